"""Environments: where sessions' sandboxes come from (a repo, a branch, setup, vars, secrets).

Secrets are sealed with the keys port the moment they arrive (each with its own data key, bound
to the environment and the secret's name) and opened only to build a turn's or a setup's
environment inside the sandbox. They never appear in a listing, a log or a checkpoint.
"""

from __future__ import annotations

import base64
import os
import re
from urllib.parse import urlsplit
import subprocess

from pydantic import BaseModel, Field

from hangar.db import Db
from hangar.errors import (
    EnvironmentInUse,
    EnvironmentNotFound,
    InvalidInput,
    InvalidName,
    VersionConflict,
)
from hangar.keys import Keys
from hangar.keys.envelope import new_data_key, seal_bytes, unseal_bytes
from hangar.models import NAME_PATTERN, Environment, utcnow
from hangar.sessions import warmhours
from hangar.sessions.images import check_image
from hangar.sessions.rules import check_rules
from hangar.sessions.timeouts import check_minutes

_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LOOPBACK_URL = re.compile(
    r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?:[^@/]*@)?(?P<host>localhost|127(?:\.\d{1,3}){3}|\[::1\])"
    r"(?::(?P<port>\d{1,5}))?(?:[/?#]|$)",
    re.I,
)
LS_REMOTE_TIMEOUT = 30
IN_USE_SHOWN = 5
"""How many of the sessions using an environment a refused delete names."""


class EnvironmentChange(BaseModel):
    """A change to an environment: only the fields set (``model_fields_set``) change. Variables
    and secrets given are added or replaced; ``unset`` removes variables or secrets by name;
    ``host_ports`` replaces the list; ``branch`` None is the remote's HEAD, ``setup`` None or
    empty is none; ``turn_timeout_minutes`` None is HANGAR_TURN_TIMEOUT_MINUTES; ``image`` None
    is none (the backend's own system); ``warm_pool`` 0 is no warm pool of its own,
    ``warm_pool_hours`` None is always. The repo cannot change: sessions' checkpoints are
    commits of it."""

    branch: str | None = None
    setup: str | None = None
    vars: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict)
    unset: list[str] = Field(default_factory=list)
    host_ports: list[int] | None = None
    turn_timeout_minutes: float | None = None
    image: str | None = None
    warm_pool: int = 0
    warm_pool_hours: str | None = None
    allowed_hosts: list[str] | None = None
    deny_rules: dict[str, str] | None = None
    notify_url: str | None = None


MAX_WARM_POOL = 100
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?)*")


def check_notify_url(url: str | None) -> str | None:
    """An environment's notify URL: http or https, no credentials in it (None or empty:
    none of its own)."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(
            c.isspace() for c in url) or "@" in parts.netloc:  # fmt: skip
        raise InvalidInput(f"notify URL {url!r} must be an http:// or https:// URL without "
                           "credentials (the events are signed instead)", field="notify_url")
    return url


def check_hosts(hosts: list[str]) -> list[str]:
    """Allowed hosts: DNS names (lowercase; each covers its subdomains), at most 100."""
    if len(hosts) > 100:
        raise InvalidInput("at most 100 allowed hosts", field="allowed_hosts")
    for host in hosts:
        if len(host) > 253 or not _HOST.fullmatch(host):
            raise InvalidInput(f"allowed host {host!r} is not a lowercase DNS name",
                               field="allowed_hosts")  # fmt: skip
    return sorted(set(hosts))
"""The most ready sandboxes one environment's warm pool may keep."""


def check_warm_pool(size: int) -> int:
    """A warm pool's size: a whole number from 0 to :data:`MAX_WARM_POOL`."""
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_WARM_POOL:
        raise InvalidInput(f"warm_pool must be a whole number from 0 to {MAX_WARM_POOL}, not "
                           f"{size!r}", field="warm_pool")  # fmt: skip
    return size


def check_warm_hours(spec: str | None) -> str | None:
    """A ``warm_pool_hours`` spec in its canonical spelling (None stays None; empty is None);
    InvalidInput naming the field, first in its message, for a bad one
    (:func:`hangar.sessions.warmhours.parse`)."""
    if not spec:
        return None
    try:
        return str(warmhours.parse(spec))
    except InvalidInput as exc:
        raise InvalidInput(f"{warmhours.FIELD}: {exc.message}", **exc.data) from None


def _aad(env_name: str, secret: str) -> bytes:
    return f"hangar/secret\x00{env_name}\x00{secret}".encode()


def check_name(kind: str, name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise InvalidName(
            f"{kind} name {name!r} must be lowercase letters, digits and dashes "
            "(1-64, not starting or ending with a dash)",
            name=name,
        )
    return name


def loopback_warnings(env: Environment, *, host_ports: bool = True) -> list[str]:
    """One warning per variable whose value is a URL on the server's loopback that the
    environment's sandboxes cannot reach: with ``host_ports`` (a backend that relays host
    ports, the local one), at a port the environment does not allow; without (sandboxes on
    other machines, a cluster), at any port, since there the address is the sandbox itself.
    (Secrets are sealed and not looked at.)"""
    warnings = []
    for name, value in sorted(env.vars.items()):
        found = _LOOPBACK_URL.match(value.strip())
        if found is None:
            continue
        port = int(found["port"]) if found["port"] else 443 if found["scheme"] == "https" else 80
        if not host_ports:
            warnings.append(
                f"{name} points at {found['host']}:{port}, the server's loopback; this "
                "hangar's sandboxes run on other machines, where that address is the sandbox "
                "itself: use an address the sandboxes' cluster routes (a Service, a URL)"
            )
        elif port not in env.host_ports:
            warnings.append(
                f"{name} points at {found['host']}:{port} on the server's loopback, which the "
                f"environment's sandboxes cannot reach: allow it with --host-port {port}"
            )
    return warnings


def check_ports(ports: list[int]) -> list[int]:
    """Host ports, each from 1 to 65535, sorted and without repeats."""
    bad = [p for p in ports if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535]
    if bad:
        raise InvalidInput(f"host ports must be whole numbers from 1 to 65535, not {bad}",
                           ports=bad)  # fmt: skip
    return sorted(set(ports))


def check_vars(values: dict[str, str]) -> dict[str, str]:
    bad = [k for k in values if not _VAR_NAME.match(k)]
    if bad:
        raise InvalidInput(f"invalid variable names: {', '.join(bad)}", names=bad)
    return values


def _without(values: dict[str, str], *names: list[str] | dict[str, str]) -> dict[str, str]:
    """``values`` less the given names (a variable that becomes a secret, or the reverse, is
    moved, never kept under both)."""
    drop = {n for group in names for n in group}
    return {k: v for k, v in values.items() if k not in drop}


class Environments:
    def __init__(self, db: Db, keys: Keys) -> None:
        self.db = db
        self.keys = keys

    def add(
        self,
        name: str,
        repo: str,
        *,
        branch: str | None = None,
        setup: str | None = None,
        vars: dict[str, str] | None = None,
        secrets: dict[str, str] | None = None,
        host_ports: list[int] | None = None,
        turn_timeout_minutes: float | None = None,
        image: str | None = None,
        warm_pool: int = 0,
        warm_pool_hours: str | None = None,
        allowed_hosts: list[str] | None = None,
        deny_rules: dict[str, str] | None = None,
        notify_url: str | None = None,
    ) -> Environment:
        """Check everything, including that the repo (and branch) can be reached with
        ``git ls-remote``, then create the environment. Creates nothing on any error.
        ``turn_timeout_minutes``: its sessions' turns' time limit (None: the setting's);
        ``image``: the container image its sandboxes run (:func:`check_image`; whether the
        backend runs images is checked above, where it is known, and again at each start);
        ``warm_pool``, ``warm_pool_hours``: its warm pool's size and hours
        (:func:`check_warm_pool`, :func:`check_warm_hours`; whether the backend has pools is
        checked above)."""
        check_name("environment", name)
        check_vars(vars or {})
        check_vars(secrets or {})
        ports = check_ports(host_ports or [])
        limit = check_minutes(turn_timeout_minutes, "turn_timeout_minutes")
        if image is not None:
            check_image(image)
        pool = check_warm_pool(warm_pool)
        hours = check_warm_hours(warm_pool_hours)
        hosts, rules = check_hosts(allowed_hosts or []), check_rules(deny_rules or {})
        notify = check_notify_url(notify_url)
        self._check_reachable(repo, branch)
        sealed = {k: self._seal(name, k, v) for k, v in (secrets or {}).items()}
        env = Environment(name=name, repo=repo, branch=branch, setup=setup, vars=vars or {},
                          secrets=sealed, host_ports=ports,
                          turn_timeout_minutes=limit, image=image, warm_pool=pool,
                          warm_pool_hours=hours, allowed_hosts=hosts,
                          deny_rules=rules, notify_url=notify)  # fmt: skip
        return self.db.create_environment(env)

    def _check_reachable(self, repo: str, branch: str | None) -> None:
        if repo.startswith("-"):
            raise InvalidInput(f"repo {repo!r} is not a git URL or a path", repo=repo)
        if "://" not in repo and ":" not in repo.split("/")[0] and not os.path.isabs(repo):
            raise InvalidInput(f"a local repo must be an absolute path, not {repo!r}", repo=repo)
        argv = ["git", "ls-remote", "--quiet", "--", repo]
        argv += [f"refs/heads/{branch}"] if branch else ["HEAD"]
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false"}
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=LS_REMOTE_TIMEOUT, env=env
            )
        except subprocess.TimeoutExpired:
            raise InvalidInput(f"repo {repo!r} did not answer within {LS_REMOTE_TIMEOUT} s",
                               repo=repo) from None  # fmt: skip
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            fatal = [line for line in lines if line.startswith("fatal:")]
            reason = (fatal or lines or ["no answer"])[0].removeprefix("fatal: ")
            raise InvalidInput(f"repo {repo!r} cannot be reached: {reason}", repo=repo)
        if branch and not proc.stdout.strip():
            raise InvalidInput(f"repo {repo!r} has no branch {branch!r}", repo=repo, branch=branch)

    def _seal(self, env_name: str, secret: str, value: str) -> str:
        data_key = new_data_key()
        wrapped = self.keys.wrap(data_key)
        sealed = seal_bytes(data_key, _aad(env_name, secret), value.encode())
        return base64.b64encode(len(wrapped).to_bytes(2, "big") + wrapped + sealed).decode()

    def _open(self, env_name: str, secret: str, stored: str) -> str:
        raw = base64.b64decode(stored)
        size = int.from_bytes(raw[:2], "big")
        data_key = self.keys.unwrap(raw[2 : 2 + size])
        return unseal_bytes(data_key, _aad(env_name, secret), raw[2 + size :]).decode()

    def get(self, name: str) -> Environment:
        return self.db.get_environment(name)

    def list(self) -> list[Environment]:
        return self.db.list_environments()

    def update(self, name: str, change: EnvironmentChange) -> Environment:
        """Apply ``change`` (see :class:`EnvironmentChange`) after checking all of it (a new
        branch must answer ``git ls-remote``); nothing changes on any error. Variables and
        secrets, and the turns' time limit, reach the next turn; branch, setup, host ports and
        image the next sandbox."""
        given = change.model_fields_set
        check_vars(change.vars)
        check_vars(change.secrets)
        ports = check_ports(change.host_ports or []) if "host_ports" in given else None
        limit = check_minutes(change.turn_timeout_minutes, "turn_timeout_minutes")
        if change.image is not None:
            check_image(change.image)
        pool = check_warm_pool(change.warm_pool)
        hours = check_warm_hours(change.warm_pool_hours)
        hosts = check_hosts(change.allowed_hosts or []) if "allowed_hosts" in given else None
        rules = check_rules(change.deny_rules or {}) if "deny_rules" in given else None
        notify = check_notify_url(change.notify_url)
        both = sorted(set(change.unset) & (set(change.vars) | set(change.secrets)))
        if both:
            raise InvalidInput(f"cannot both set and unset {', '.join(both)}", names=both)
        for _ in range(5):
            env = self.require(name)
            unknown = sorted(set(change.unset) - set(env.vars) - set(env.secrets))
            if unknown:
                raise InvalidInput(f"environment {name} has no variable or secret named "
                                   f"{', '.join(unknown)}", names=unknown)  # fmt: skip
            branch = change.branch if "branch" in given else env.branch
            if "branch" in given and branch != env.branch:
                self._check_reachable(env.repo, branch)
            sealed = {k: self._seal(name, k, v) for k, v in change.secrets.items()}
            updated = env.model_copy(update={
                "branch": branch,
                "setup": (change.setup or None) if "setup" in given else env.setup,
                "vars": {**_without(env.vars, change.unset, change.secrets), **change.vars},
                "secrets": {**_without(env.secrets, change.unset, change.vars), **sealed},
                "host_ports": env.host_ports if ports is None else ports,
                "turn_timeout_minutes": (limit if "turn_timeout_minutes" in given
                                         else env.turn_timeout_minutes),
                "image": change.image if "image" in given else env.image,
                "warm_pool": pool if "warm_pool" in given else env.warm_pool,
                "warm_pool_hours": hours if "warm_pool_hours" in given else env.warm_pool_hours,
                "allowed_hosts": env.allowed_hosts if hosts is None else hosts,
                "deny_rules": env.deny_rules if rules is None else rules,
                "notify_url": notify if "notify_url" in given else env.notify_url,
                "updated_at": utcnow(),
            })  # fmt: skip
            try:
                return self.db.update_environment(updated)
            except VersionConflict:
                continue
        raise VersionConflict(f"environment {name} keeps changing; try again", name=name)

    def delete(self, name: str, *, force: bool = False) -> None:
        """Delete the environment; EnvironmentInUse, naming sessions made from it, unless
        ``force`` (those sessions then fail to start a sandbox, and say why)."""
        self.require(name)
        using = self.db.sessions_of_environment(name, IN_USE_SHOWN + 1)
        if using and not force:
            names = [s.name for s in using[:IN_USE_SHOWN]]
            more = " and more" if len(using) > IN_USE_SHOWN else ""
            raise EnvironmentInUse(
                f"environment {name} is used by session(s) {', '.join(names)}{more}: delete "
                "them first, or force it (they could not start a sandbox again)",
                name=name, sessions=names,
            )  # fmt: skip
        self.db.delete_environment(name)

    def turn_env(self, env: Environment) -> dict[str, str]:
        """The environment's variables and opened secrets, for one turn or one setup run."""
        opened = {k: self._open(env.name, k, v) for k, v in env.secrets.items()}
        return {**env.vars, **opened}

    def require(self, name: str) -> Environment:
        try:
            return self.db.get_environment(name)
        except EnvironmentNotFound:
            raise EnvironmentNotFound(f"no environment {name!r}", name=name) from None


