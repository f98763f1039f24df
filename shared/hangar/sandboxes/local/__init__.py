"""Local sandboxes: bubblewrap namespaces that hold by the kernel's own rules.

Each sandbox runs in its own user namespace as two unprivileged host uids of its own (the uid
split, :mod:`hangar.sandboxes.local.isolation`): hangar's tools as uid 0 inside, with only the
capabilities they need and only over the namespace; the agent as uid 1000, with none. It has
its own network namespace, whose egress goes through slirp4netns with the host's loopback
unreachable except the spec's ``host_ports``, and whose packet filter refuses every other
address of the host and the link-local ranges (:mod:`hangar.sandboxes.local.network`); its own PID,
IPC, UTS and mount namespaces; and limits on the agent's processes and memory. The folder and
what is shown inside are described in :mod:`hangar.sandboxes.local.layout`.

A sandbox is started by :mod:`hangar.sandboxes.local.launcher` in its own session, so it outlives the
process that made it. The record keeps the init's host pid and start time: a sandbox is live
while its record exists and that very process runs (a reused pid never passes); ``get`` and
``list`` tear down sandboxes whose init is gone.

Every exec enters the namespaces with ``nsenter`` and sets its user with ``setpriv``: the agent
as 1000 with no capabilities and ``no_new_privs``, joined to its cgroups (or given its rlimits)
before it enters; hangar's tools as 0 with :data:`HANGAR_CAPS` alone. The environment reaches
the command through the process environment, never its arguments: the host's process list shows
no variable or secret.

Sandboxes made by the previous layout (``layout`` 1: the host's user and network namespaces,
root with every capability dropped) are still found and used, as :attr:`SandboxInfo.outdated`,
so that they can be checkpointed and replaced.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, cast
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, ValidationError

from hangar.config import Settings
from hangar.errors import ExecTimeout, InvalidInput, InvalidSettings
from hangar.errors import SandboxError
from hangar.errors import SandboxNotFound, SandboxUnavailable
from hangar.sandboxes import HANGAR_BIN, HANGAR_DIR, HANGAR_TMP, HOME, READY, ExecResult
from hangar.sandboxes import CountingWriter, PUT_FILE_SCRIPT, check_env, first_on_path
from hangar.sandboxes import PoolState, refuse_missing, refuse_pools, stderr_tail
from hangar.sandboxes import SandboxCapabilities, SandboxInfo, SandboxStatus
from hangar.sandboxes import SandboxSpec, SandboxUser, Stdin
from hangar.sandboxes.local import layout, network
from hangar.sandboxes.local.disk import disk_for
from hangar.sandboxes.local.isolation import Cgroups, Limits, LimitsMode, UidClaim, claim_uids
from hangar.sandboxes.local.isolation import resolve_mode
from hangar.sandboxes.local.layout import HANGAR_PATH, HARNESS_MOUNT, SANDBOX_PATH
from hangar.sandboxes.local.processes import HOST_ENV, feed, finish, host_tool, kill, kill_tree, pump
from hangar.sandboxes.local.processes import read_some, start_time

__all__ = ["HARNESS_MOUNT", "HANGAR_CAPS", "LocalSandboxes"]

logger = logging.getLogger(__name__)

LAYOUT = 2
"""The layout this module makes; records without one are layout 1 (shared host namespaces)."""

HANGAR_CAPS = ("chown", "dac_override", "dac_read_search", "fowner", "kill", "setgid", "setuid")
"""What hangar's tools keep, inside the sandbox's namespace only: read and write any of the
agent's files, hand them to the agent, start the agent's processes as it and signal them."""

STAGE = "/run/hangar/stage"
"""Each launcher mounts a private tmpfs here (in a mount namespace of its own)."""
_LAUNCHER_DIR = "/run/hangar/launcher"
"""Root's copies of the launcher's module, one per version, with their bytecode."""

_ID = re.compile(r"sbx-[0-9a-f]{8}\Z")
_RECORD = "record.json"
_START_TIMEOUT = 15.0  # seconds for the launcher, bubblewrap and the network to be up
_KILL_TIMEOUT = 10.0  # seconds for a killed init to be gone
_HELPER_GRACE = 2.0  # seconds for slirp4netns and the relay to see the sandbox end
_TOOLS = ("setsid", "nsenter", "setpriv", "slirp4netns", "prlimit", "nft")
_PACKAGES = {"slirp4netns": "slirp4netns", "nft": "nftables"}  # the rest are util-linux's

# Join the agent's cgroups, then become the rest of the command: sh -c JOIN sh N FILE... CMD...
_JOIN = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; '
    'n=$((n - 1)); done; exec "$@"'
)



class _Helper(BaseModel):
    model_config = ConfigDict(frozen=True)

    pid: int
    start_time: int


class _Record(BaseModel):
    """What ``record.json`` holds; the init's start time guards against pid reuse."""

    model_config = ConfigDict(frozen=True)

    id: str
    labels: dict[str, str]
    created_at: datetime
    init_pid: int
    init_start_time: int
    env: dict[str, str]
    layout: int = 1
    uid_index: int | None = None
    hangar_uid: int | None = None
    agent_uid: int | None = None
    host_ports: list[int] = []
    helpers: list[_Helper] = []
    limits_mode: LimitsMode | None = None
    max_pids: int | None = None
    memory_mb: int | None = None
    disk_mb: int | None = None  # the volume's size; None: made before disks, or with no cap

    def info(self) -> SandboxInfo:
        created_at = self.created_at.astimezone(UTC)
        return SandboxInfo(id=self.id, labels=dict(self.labels), created_at=created_at,
                           outdated=self.layout < LAYOUT)  # fmt: skip


class LocalSandboxes:
    """The ``local:`` backend of :class:`hangar.sandboxes.Sandboxes` (runs as root).

    ``root`` holds one folder per sandbox; ``harness_dir`` (if it exists) is shown read-only at
    :data:`HARNESS_MOUNT`. ``uid_base``, ``limits`` (AUTO picks cgroups where usable),
    ``max_pids`` and ``memory_mb`` are the settings of the same names; ``disk_gb`` is
    ``HANGAR_SANDBOX_DISK_GB`` (0: no cap, :mod:`hangar.sandboxes.local.disk`). ``bwrap`` overrides the
    bubblewrap binary (default: found on PATH at ``create``); a missing one makes ``create``
    raise :class:`SandboxUnavailable`.
    """

    def __init__(
        self,
        root: Path,
        harness_dir: Path | None = None,
        *,
        bwrap: str | None = None,
        uid_base: int = 200_000,
        limits: LimitsMode = LimitsMode.AUTO,
        max_pids: int = 1024,
        memory_mb: int = 4096,
        disk_gb: float = 20.0,
    ):
        self.root = Path(root)
        self.harness_dir = harness_dir
        self.uid_base = uid_base
        self.limits_mode = limits
        self.max_pids = max_pids
        self.memory_mb = memory_mb
        self.disk = disk_for(disk_gb)
        self._bwrap = bwrap

    @classmethod
    def from_url(cls, url: str, settings: Settings) -> LocalSandboxes:
        """``local:///ABS/PATH`` -> sandboxes under that folder. InvalidSettings otherwise."""
        parts = urlsplit(url)
        path = unquote(parts.path)
        if parts.scheme != "local" or parts.netloc or not path.startswith("/"):
            raise InvalidSettings(
                f"HANGAR_SANDBOXES: expected local:///ABSOLUTE/PATH, got {url!r}",
                setting="HANGAR_SANDBOXES",
            )
        return cls(
            Path(path),
            settings.harness_dir,
            uid_base=settings.sandbox_uid_base,
            limits=LimitsMode(settings.sandbox_limits),
            max_pids=settings.sandbox_max_pids,
            memory_mb=settings.sandbox_memory_mb,
            disk_gb=settings.sandbox_disk_gb,
        )

    def limits(self) -> Limits:
        """The agent's limits in a sandbox made now (the mechanism resolved for this machine)."""
        mode = resolve_mode(self.limits_mode)
        return Limits(mode=mode, max_pids=self.max_pids, memory_mb=self.memory_mb)

    # -- the port ---------------------------------------------------------------------------

    capabilities = SandboxCapabilities(ro_paths=True, host_ports=True, images=False)
    """Host paths read-only and host ports, both; no host reads yet (the sandbox's files are
    on a volume mounted in its own mount namespace); no images (a sandbox runs the host's own
    system, seen through bubblewrap)."""

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Start a sandbox; returns once it accepts exec and its network is up (synchronous:
        ``status`` of a live sandbox is always ready).

        Raises SandboxUnavailable when bubblewrap, util-linux tools, slirp4netns or nft are
        missing, InvalidInput for a bad ``ro_paths`` entry, env name or host port, and
        SandboxError when the sandbox cannot start (the network rules not loaded included).
        """
        refuse_missing(self.capabilities, spec, "local")
        tools = self._tools()
        ro_paths = [self._check_ro_path(p) for p in spec.ro_paths]
        env = check_env(spec.env)
        ports = _check_ports(spec.host_ports)
        limits = self.limits()
        sandbox_id, folder = self._new_folder()
        claim: UidClaim | None = None
        cgroups: Cgroups | None = None
        record: _Record | None = None
        try:
            claim = claim_uids(self.uid_base, f"{folder}")
            cgroup_files: list[str] = []
            if limits.mode is LimitsMode.CGROUP:
                cgroups = Cgroups(sandbox_id)
                cgroups.create(limits, claim.hangar_uid)
                cgroup_files = cgroups.procs
            disk = self.disk
            tree = layout.make_folder(folder, sandbox_id, claim.hangar_uid, claim.agent_uid,
                                      limits, cgroup_files, volume=disk is not None)  # fmt: skip
            volumes = [] if disk is None else disk.volumes(self.root, folder, claim.hangar_uid,
                                                           tree)  # fmt: skip
            binds, args = layout.binds_and_args(
                folder, STAGE, sandbox_id, ro_paths, self.harness_dir, cgroup_files,
                volumes=disk is not None,
            )
            init_pid, helpers = self._launch(tools, folder, claim, binds, args, ports, volumes)
            started = start_time(init_pid)
            if started is None:
                raise SandboxError(f"the sandbox's init died at once: {_log_text(folder)}")
            record = _Record(
                id=sandbox_id,
                labels=dict(spec.labels),
                created_at=datetime.now(UTC),
                init_pid=init_pid,
                init_start_time=started,
                env=env,
                layout=LAYOUT,
                uid_index=claim.index,
                hangar_uid=claim.hangar_uid,
                agent_uid=claim.agent_uid,
                host_ports=ports,
                helpers=[_Helper(pid=p, start_time=t) for p in helpers
                         if (t := start_time(p)) is not None],  # fmt: skip
                limits_mode=limits.mode,
                max_pids=limits.max_pids,
                memory_mb=limits.memory_mb,
                disk_mb=None if disk is None else disk.cap >> 20,
            )
            _write_atomically(folder / _RECORD, record.model_dump_json(indent=2).encode())
        except BaseException as exc:
            _teardown(folder, record, cgroups)
            if isinstance(exc, OSError):
                raise SandboxError(f"cannot create a sandbox in {self.root}: {exc}") from exc
            raise
        finally:
            if claim is not None:
                claim.release()  # the sandbox's init holds its own
        return record.info()

    def status(self, sandbox_id: str) -> SandboxStatus:
        """Ready for a live sandbox (``create`` returns a started one); SandboxNotFound if it
        is missing or dead."""
        self._live_record(sandbox_id)
        return READY

    def await_status(self, sandbox_id: str, timeout: float) -> SandboxStatus:
        """:meth:`status`, at once: a live local sandbox is never pending, so there is
        nothing to wait for (``timeout`` is unused)."""
        return self.status(sandbox_id)

    def get(self, sandbox_id: str) -> SandboxInfo:
        """The live sandbox ``sandbox_id``; SandboxNotFound if it is missing or dead."""
        return self._live_record(sandbox_id).info()

    def list(self, labels: Mapping[str, str] | None = None) -> list[SandboxInfo]:
        """Live sandboxes whose labels include every given pair, oldest first."""
        try:
            names = [e.name for e in os.scandir(self.root) if _ID.match(e.name)]
        except FileNotFoundError:
            return []
        found: list[_Record] = []
        for name in names:
            record = self._read_record(name)
            if record is None:
                continue  # being created, or not ours
            if not _is_live(record):
                _teardown(self.root / name, record)
                continue
            if all(record.labels.get(k) == v for k, v in (labels or {}).items()):
                found.append(record)
        found.sort(key=lambda r: (r.created_at, r.id))
        return [r.info() for r in found]

    def exec(
        self,
        sandbox_id: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        user: SandboxUser = SandboxUser.AGENT,
        cancel: threading.Event | None = None,
    ) -> ExecResult:
        """Run ``argv`` to completion in the sandbox as ``user``.

        As the agent: cwd defaults to HOME, the environment is HOME, PATH and LANG, then the
        spec's env, then ``env``. As hangar: cwd defaults to :data:`HANGAR_DIR`, the
        environment is HOME (hangar's folder), PATH, LANG and TMPDIR, then ``env``. Output that
        background processes keep writing after the command exits is read for at most
        :data:`~hangar.sandboxes.local.processes.DRAIN_GRACE` seconds. A command killed by signal N
        exits 128 + N. A timeout kills the command and every process it started that is still
        its descendant, then raises ExecTimeout; ``cancel`` set kills them the same way and
        returns exit 137 (SIGKILL's). SandboxNotFound if the sandbox is missing or dies
        meanwhile.
        """
        if not argv:
            raise InvalidInput("exec needs a command")
        if "=" in argv[0]:
            raise InvalidInput(f"command name {argv[0]!r} must not contain '='")
        record = self._live_record(sandbox_id)
        if user is SandboxUser.HANGAR and record.layout >= LAYOUT:
            full_env = {"HOME": HANGAR_DIR, "PATH": HANGAR_PATH, "LANG": "C.UTF-8",
                        "TMPDIR": HANGAR_TMP}  # fmt: skip
            default_cwd = HANGAR_DIR
        else:
            full_env = {"HOME": HOME, "PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}
            full_env.update(record.env)
            default_cwd = HOME
        full_env.update(check_env(env or {}))
        if user is SandboxUser.AGENT:
            full_env["PATH"] = first_on_path(HANGAR_BIN, full_env.get("PATH", SANDBOX_PATH))
        command = _command(record, user) + ["/usr/bin/env", "-C", cwd or default_cwd, "--"]
        command += list(argv)
        out: list[bytes] = []
        err: list[bytes] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, so a timeout can kill it all
                env=full_env,  # inherited all the way in; never on a command line
            )
        except OSError as exc:
            raise SandboxUnavailable(f"cannot run nsenter: {exc}", tool="nsenter") from exc
        errors: list[Exception] = []
        writer = None
        if stdin is not None:
            writer = threading.Thread(target=feed, args=(proc.stdin, stdin, errors), daemon=True)
            writer.start()
        try:
            assert proc.stdout is not None and proc.stderr is not None
            streams: dict[int, Callable[[bytes], Any]] = {
                proc.stdout.fileno(): out.append if stdout is None else stdout.write,
                proc.stderr.fileno(): err.append if stderr is None else stderr.write,
            }
            if not (pump(proc, streams, deadline, cancel) and finish(proc, deadline, cancel)):
                if cancel is not None and cancel.is_set() and proc.poll() is None:
                    kill_tree(proc)
                    return ExecResult(128 + signal.SIGKILL, b"".join(out), b"".join(err))
                if proc.poll() is None:
                    raise subprocess.TimeoutExpired(command, timeout or 0)
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            message = f"{argv[0]} timed out after {timeout} s in sandbox {sandbox_id}"
            raise ExecTimeout(
                message, sandbox_id=sandbox_id, argv=list(argv), timeout=timeout
            ) from None
        finally:
            if proc.poll() is None:
                kill_tree(proc)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            if writer is not None:
                writer.join(1.0)  # the feeder closes stdin itself
        if errors:
            raise errors[0]
        code = proc.returncode
        if code != 0 and not _is_live(record):
            raise SandboxNotFound(f"sandbox {sandbox_id} is gone", sandbox_id=sandbox_id)
        return ExecResult(128 - code if code < 0 else code, b"".join(out), b"".join(err))

    def put_file(
        self,
        sandbox_id: str,
        path: str,
        data: bytes | BinaryIO,
        *,
        mode: int = 0o644,
        user: SandboxUser = SandboxUser.AGENT,
    ) -> None:
        """Write a file as ``user`` (parents made as needed), replacing any file at ``path``
        atomically."""
        argv = ["/bin/sh", "-c", PUT_FILE_SCRIPT, "sh", path, format(mode & 0o7777, "o")]
        result = self.exec(sandbox_id, argv, stdin=data, user=user)
        if not result.ok:
            message = f"cannot write {path} in sandbox {sandbox_id}: {stderr_tail(result.stderr)}"
            raise SandboxError(message, sandbox_id=sandbox_id, path=path)

    def get_file(
        self, sandbox_id: str, path: str, out: BinaryIO, *, user: SandboxUser = SandboxUser.AGENT
    ) -> int:
        """Copy a file's bytes to ``out``; returns the count. SandboxError if it is missing."""
        counter = CountingWriter(out)
        result = self.exec(sandbox_id, ["cat", "--", path], stdout=cast(BinaryIO, counter),
                           user=user)  # fmt: skip
        if not result.ok:
            message = f"cannot read {path} in sandbox {sandbox_id}: {stderr_tail(result.stderr)}"
            raise SandboxError(message, sandbox_id=sandbox_id, path=path)
        return counter.count

    def destroy(self, sandbox_id: str) -> None:
        """Kill every process in the sandbox and remove its folder; no hook runs (hooks are
        :mod:`hangar.sandboxes.policy`'s). Idempotent. SandboxError if the init outlives
        SIGKILL for :data:`_KILL_TIMEOUT` seconds (the folder is then kept)."""
        record = self._read_record(sandbox_id) if _ID.match(sandbox_id) else None
        if record is None:
            return
        _teardown(self.root / sandbox_id, record)

    def extend(self, sandbox_id: str, until: datetime) -> None:
        """Nothing to do: a local sandbox has no lease (it lives until destroyed; hangar's
        reaper alone ends it)."""

    def keep_pool(self, pool: str, *, image: str | None, replicas: int) -> PoolState:
        """Refused: local sandboxes have no warm pools (SandboxCapabilityMissing)."""
        raise refuse_pools("local", pool)

    def network_rules(self, sandbox_id: str) -> str:
        """The packet filter the kernel holds for the sandbox's network namespace, as ``nft``
        lists it (empty for a sandbox of the previous layout, which has none). SandboxNotFound
        if it is missing or dead; SandboxError if nft cannot list it."""
        record = self._live_record(sandbox_id)
        return network.listed(record.init_pid) if record.layout >= LAYOUT else ""

    # -- starting ----------------------------------------------------------------------------

    def _new_folder(self) -> tuple[str, Path]:
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            while True:
                sandbox_id = f"sbx-{secrets.token_hex(4)}"
                try:
                    (self.root / sandbox_id).mkdir(mode=0o700)
                    return sandbox_id, self.root / sandbox_id
                except FileExistsError:
                    continue  # a clash of random ids: draw again
        except OSError as exc:
            raise SandboxError(f"cannot create a sandbox in {self.root}: {exc}") from exc

    def _tools(self) -> dict[str, str]:
        bwrap = self._bwrap or shutil.which("bwrap")
        if not bwrap or not os.access(bwrap, os.X_OK):
            raise SandboxUnavailable(
                f"bubblewrap (bwrap) is not installed{f' at {bwrap}' if bwrap else ''}; "
                "run `make install` (or `apt-get install bubblewrap`) and run hangar as root",
                tool="bwrap",
            )
        if os.geteuid() != 0:
            raise SandboxUnavailable("local sandboxes need hangar to run as root", tool="root")
        tools = {"bwrap": bwrap}
        for name in _TOOLS:
            found = host_tool(name)
            if found is None:
                package = _PACKAGES.get(name, "util-linux")
                raise SandboxUnavailable(f"{name} ({package}) is not installed; run `make install`",
                                         tool=name)  # fmt: skip
            tools[name] = found
        return tools

    def _check_ro_path(self, raw: str) -> str:
        path = os.path.normpath(raw)
        if not path.startswith("/") or not os.path.exists(path):
            raise InvalidInput(f"ro_paths entry {raw!r} is not an existing absolute path")
        real = PurePosixPath(os.path.realpath(path))
        root = PurePosixPath(os.path.realpath(self.root))
        if real.is_relative_to(root) or root.is_relative_to(real):
            raise InvalidInput(f"ro_paths entry {raw!r} would show the sandboxes folder")
        if layout.under(path, ("/proc", "/dev")) or any(
            layout.under(own, [path]) for own in layout.OWN_MOUNTS
        ):
            raise InvalidInput(f"ro_paths entry {raw!r} would hide the sandbox's own folders")
        return path

    def _launch(
        self,
        tools: Mapping[str, str],
        folder: Path,
        claim: UidClaim,
        binds: Sequence[Mapping[str, str]],
        args: Sequence[str],
        ports: Sequence[int],
        volumes: Sequence[Mapping[str, Any]] = (),
    ) -> tuple[int, Sequence[int]]:
        """Run the launcher detached; return the init's host pid and the helpers' pids."""
        from hangar.sandboxes.local.launcher import encode_config

        os.makedirs(STAGE, mode=0o755, exist_ok=True)
        os.chmod(STAGE, 0o755)
        host = network.host_addresses()
        config = {
            "stage": STAGE,
            "binds": [dict(b) for b in binds],
            "hangar_uid": claim.hangar_uid,
            "agent_uid": claim.agent_uid,
            "bwrap": [tools["bwrap"], *args],
            "init": list(layout.INIT_ARGV),
            "hold_fds": [claim.fd],
            "slirp4netns": tools["slirp4netns"],
            "nft": tools["nft"],
            "rules": network.ruleset(host),
            "known": network.known(host),
            "sets": network.SETS,
            "host_ports": list(ports),
            "volumes": [dict(v) for v in volumes],
            "timeout": _START_TIMEOUT,
        }
        report_r, report_w = os.pipe()
        os.set_inheritable(claim.fd, True)
        try:
            argv = [tools["setsid"], "--fork", _launcher_python(), "-I", "-S", "-c",
                    _launcher_code(), encode_config(config),  # type: ignore[no-untyped-call]
                    str(report_w)]  # fmt: skip
            log_fd = os.open(folder / "init.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(log_fd, "wb") as log:
                try:
                    # setsid forks the launcher off and exits at once: no child of ours lingers.
                    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   pass_fds=(report_w, claim.fd), env=HOST_ENV, check=True,
                                   timeout=_START_TIMEOUT)  # fmt: skip
                except (OSError, subprocess.SubprocessError) as exc:
                    raise SandboxError(f"cannot start the sandbox launcher: {exc}") from exc
            os.close(report_w)
            report_w = -1
            answer = _read_answer(report_r, time.monotonic() + _START_TIMEOUT + 5)
        finally:
            os.close(report_r)
            if report_w >= 0:
                os.close(report_w)
        if not answer.get("ok"):
            detail = answer.get("error") or "no answer"
            raise SandboxError(f"the sandbox could not start: {detail}; {_log_text(folder)}")
        return int(answer["init_pid"]), [int(p) for p in answer.get("helpers", [])]

    # -- records and liveness ----------------------------------------------------------------

    def _read_record(self, sandbox_id: str) -> _Record | None:
        try:
            return _Record.model_validate_json((self.root / sandbox_id / _RECORD).read_bytes())
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValidationError) as exc:
            logger.warning("unreadable sandbox record %s: %s", sandbox_id, exc)
            return None

    def _live_record(self, sandbox_id: str) -> _Record:
        record = self._read_record(sandbox_id) if _ID.match(sandbox_id) else None
        if record is not None and not _is_live(record):
            _teardown(self.root / sandbox_id, record)
            record = None
        if record is None:
            raise SandboxNotFound(f"no sandbox {sandbox_id}", sandbox_id=sandbox_id)
        return record


def _command(record: _Record, user: SandboxUser) -> list[str]:
    """Everything before ``env -C CWD -- ARGV``: entering the sandbox as ``user``."""
    nsenter = host_tool("nsenter") or "nsenter"
    setpriv = "/usr/bin/setpriv"  # the sandbox's own (its /usr is the host's, read-only)
    target = ["--target", str(record.init_pid)]
    if record.layout < LAYOUT:  # one user for everything, root with every capability dropped
        return [nsenter, *target, "--mount", "--pid", "--uts", "--ipc", "--", setpriv,
                "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all",
                "--no-new-privs", "--"]  # fmt: skip
    enter = [nsenter, *target, "--user", "--mount", "--pid", "--uts", "--ipc", "--net",
             "--cgroup", "--"]  # fmt: skip
    if user is SandboxUser.HANGAR:
        keep = ",".join(f"+{cap}" for cap in HANGAR_CAPS)
        return enter + [setpriv, f"--bounding-set=-all,{keep}", "--inh-caps=-all",
                        "--ambient-caps=-all", "--no-new-privs", "--"]  # fmt: skip
    agent = [setpriv, "--reuid=1000", "--regid=1000", "--clear-groups", "--bounding-set=-all",
             "--inh-caps=-all", "--ambient-caps=-all", "--no-new-privs", "--"]  # fmt: skip
    if record.limits_mode is LimitsMode.CGROUP:
        procs = Cgroups(record.id).procs
        return ["/bin/sh", "-c", _JOIN, "sh", str(len(procs)), *procs, *enter, *agent]
    prlimit = host_tool("prlimit") or "prlimit"
    nproc, memory = record.max_pids or 1024, (record.memory_mb or 4096) << 20
    return [prlimit, f"--nproc={nproc}", f"--as={memory}", "--", *enter, *agent]


def _launcher_python() -> str:
    """The system's interpreter where there is one: the relay drops root and must still read
    its standard library, which a Python under /root would hide from it."""
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def _launcher_code() -> str:
    """``-c`` code that runs the launcher: an import of a root-only copy of its module in
    :data:`_LAUNCHER_DIR`, so that its interpreter compiles it once and then loads its cached
    bytecode (compiling its source took 5 ms of every start); its source itself where no such
    copy can be kept."""
    from hangar.sandboxes.local import launcher

    source = Path(launcher.__file__).read_bytes()
    name = f"hangar_launcher_{hashlib.sha256(source).hexdigest()[:16]}"
    path = Path(_LAUNCHER_DIR) / f"{name}.py"
    try:
        os.makedirs(_LAUNCHER_DIR, mode=0o700, exist_ok=True)
        st = os.lstat(_LAUNCHER_DIR)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o077:
            return source.decode()  # not a folder only root may change: never import from it
        if not path.exists():
            _write_atomically(path, source)
    except OSError:
        return source.decode()
    return f"import sys; sys.path.append({_LAUNCHER_DIR!r}); import {name}; {name}.main()"


def _read_answer(fd: int, deadline: float) -> dict[str, Any]:
    buf = b""
    try:
        while chunk := read_some(fd, deadline):
            buf += chunk
    except TimeoutError:
        raise SandboxError("the sandbox did not start in time") from None
    try:
        value = json.loads(buf or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}



def _is_live(record: _Record) -> bool:
    return start_time(record.init_pid) == record.init_start_time


def _teardown(folder: Path, record: _Record | None, cgroups: Cgroups | None = None) -> None:
    """Kill the init of ``record`` (if given and live) and wait until it is gone; make sure its
    helpers are gone; remove its cgroups and its folder."""
    if record is not None and _is_live(record):
        kill(record.init_pid)
        _wait_gone(lambda: _is_live(record), record.id, _KILL_TIMEOUT)
    if record is not None:
        for helper in record.helpers:
            def alive(h: _Helper = helper) -> bool:
                return start_time(h.pid) == h.start_time

            try:
                _wait_gone(alive, record.id, _HELPER_GRACE)
            except SandboxError:
                kill(helper.pid)  # it did not see the sandbox end: end it
                _wait_gone(alive, record.id, _KILL_TIMEOUT)
        if record.limits_mode is LimitsMode.CGROUP:
            cgroups = Cgroups(record.id)
    if cgroups is not None:
        cgroups.remove()
    try:
        _remove_tree(folder)
    except OSError as exc:
        raise SandboxError(f"cannot remove sandbox folder {folder}: {exc}") from exc


def _wait_gone(alive: Callable[[], bool], sandbox_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pause = 0.001
    while alive():
        if time.monotonic() > deadline:
            raise SandboxError(f"sandbox {sandbox_id} outlived SIGKILL", sandbox_id=sandbox_id)
        time.sleep(pause)
        pause = min(pause * 2, 0.05)



def _check_ports(ports: Sequence[int]) -> list[int]:
    checked = sorted(set(ports))
    bad = [p for p in checked if not isinstance(p, int) or not 1 <= p <= 65535]
    if bad:
        raise InvalidInput(f"host ports must be between 1 and 65535: {bad}", ports=bad)
    return checked


def _write_atomically(path: Path, data: bytes) -> None:
    """A file of hangar's own (0600), replaced whole."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _remove_tree(folder: Path) -> None:
    """Remove a sandbox folder, making read-only folders writable on the way."""

    def retry(func: Callable[..., Any], path: str, exc_info: Any) -> None:
        exc = exc_info[1]
        if isinstance(exc, FileNotFoundError):
            return  # removed meanwhile by another destroy or list
        if not isinstance(exc, PermissionError) or func not in (os.rmdir, os.unlink):
            raise exc
        os.chmod(os.path.dirname(path), 0o700)
        func(path)

    if os.path.lexists(folder):
        shutil.rmtree(folder, onerror=retry)



def _log_text(folder: Path) -> str:
    try:
        return (folder / "init.log").read_text(errors="replace").strip() or "(no output)"
    except OSError:
        return "(no log)"
