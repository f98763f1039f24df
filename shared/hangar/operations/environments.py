"""The environment operations, each written once for REST and MCP (see :mod:`.sessions` for
what an operation is). Secret values go in and never come out: views name secrets (and
variables) only."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from hangar.errors import HangarError, InvalidInput
from hangar.models import Environment
from hangar.operations import wire as w
from hangar.sessions.sandbox import check_capabilities
from hangar.sessions.environments import EnvironmentChange
from hangar.sessions.images import check_image, image_refused

if TYPE_CHECKING:
    from hangar.runtime import Runtime

logger = logging.getLogger(__name__)


def _view(runtime: Runtime, env: Environment, *more: str) -> w.EnvironmentView:
    """The view, its warnings in this hangar's terms: only local sandboxes reach host ports
    (read from the backend's URL, so a list opens no backend); ``more`` warnings added."""
    local = urlsplit(runtime.settings.sandboxes).scheme == "local"
    view = w.EnvironmentView.of(env, host_ports=local)
    return view.model_copy(update={"warnings": [*view.warnings, *more]}) if more else view


def _refuse_pool(runtime: Runtime, name: str, warm_pool: int | None) -> None:
    """At once, before anything changes: InvalidInput for a warm pool on a hangar whose
    sandbox backend has none (a GKE feature). Only a warm pool asks the backend."""
    if warm_pool and not runtime.sessions.sandboxes.capabilities.pools:
        raise InvalidInput(
            f"environment {name}: a warm pool is a GKE feature (HANGAR_SANDBOXES gke://...); "
            f"this hangar's sandboxes ({runtime.settings.sandboxes}) have none: leave "
            "--warm-pool at 0", field="warm_pool", environment=name,
        )  # fmt: skip


def _keep_pool(runtime: Runtime, before: Environment | None, after: Environment) -> list[str]:
    """Apply an added or changed environment's warm pool at once (its replicas now and its
    next ``pool`` tick); a failure is a warning on the answer, and the reaper's next pass
    tries again."""
    try:
        runtime.sessions.pools.changed(before, after)
    except HangarError as exc:
        logger.warning("keeping environment %s's warm pool failed: %s", after.name, exc.message)
        return [f"its warm pool is not kept yet ({exc.message}); hangar tries again every "
                "minute"]
    return []


def list_all(runtime: Runtime) -> list[w.EnvironmentView]:
    """Every environment."""
    return [_view(runtime, e) for e in runtime.sessions.environments.list()]


def _refuse_unreachable(runtime: Runtime, name: str, repo: str | None,
                        host_ports: list[int] | None) -> None:  # fmt: skip
    """At once, before anything changes: SandboxCapabilityMissing for host ports, or a repo
    that is a path on this machine, where the sandbox backend cannot give them (each start
    would fail on them). Only then is the backend asked (opening it on first use)."""
    path_repo = bool(repo) and str(repo).startswith("/")
    if not host_ports and not path_repo:
        return
    env = Environment(name=name, repo=repo or "", host_ports=host_ports or [])
    check_capabilities(runtime.sessions.sandboxes.capabilities, env, runtime.settings.sandboxes)


def _refuse_image(runtime: Runtime, name: str, image: str | None) -> None:
    """At once, before anything changes: InvalidInput for a bad image reference, and
    SandboxCapabilityMissing for an image on a hangar whose sandbox backend runs none (each
    start would fail on it). Only an image asks the backend (opening it on first use)."""
    if image is None:
        return
    check_image(image)
    if not runtime.sessions.sandboxes.capabilities.images:
        raise image_refused(runtime.settings.sandboxes, f"environment {name} would name image "
                            f"{image}", environment=name)  # fmt: skip


def add(runtime: Runtime, a: w.NewEnvironment) -> w.EnvironmentView:
    """Add an environment; its repo must answer git ls-remote, and its image (if any) be one
    this hangar's sandboxes can run, or nothing is created."""
    _refuse_image(runtime, a.name, a.image)
    _refuse_unreachable(runtime, a.name, a.repo, a.host_ports)
    _refuse_pool(runtime, a.name, a.warm_pool)
    env = runtime.sessions.environments.add(
        a.name, a.repo, branch=a.branch, setup=a.setup, vars=a.vars, secrets=a.secrets,
        host_ports=a.host_ports, turn_timeout_minutes=a.turn_timeout_minutes,
        image=a.image, warm_pool=a.warm_pool, warm_pool_hours=a.warm_pool_hours,
        allowed_hosts=a.allowed_hosts, deny_rules=a.deny_rules,
        notify_url=a.notify_url)  # fmt: skip
    return _view(runtime, env, *_keep_pool(runtime, None, env))


def get(runtime: Runtime, name: str) -> w.EnvironmentView:
    """One environment; EnvironmentNotFound otherwise."""
    return _view(runtime, runtime.sessions.environments.require(name))


def update(runtime: Runtime, name: str, a: w.EnvironmentPatch) -> w.EnvironmentView:
    """Change the fields ``a`` sets (and only those); a new image is refused, with nothing
    changed, as on :func:`add`, and so is a warm pool where there are none; a change of the
    warm pool (or of the image) applies to the pool at once. EnvironmentNotFound first for an
    unknown name."""
    before = runtime.sessions.environments.require(name)
    _refuse_image(runtime, name, a.image)
    if a.host_ports:
        _refuse_unreachable(runtime, name, None, a.host_ports)
    _refuse_pool(runtime, name, a.warm_pool)
    given = a.model_dump(exclude_unset=True)
    if "warm_pool" in given and given["warm_pool"] is None:
        given["warm_pool"] = 0  # null: none of its own
    change = EnvironmentChange.model_validate(given)
    after = runtime.sessions.environments.update(name, change)
    if {"warm_pool", "warm_pool_hours", "image"} & set(given):
        return _view(runtime, after, *_keep_pool(runtime, before, after))
    return _view(runtime, after)


def delete(runtime: Runtime, name: str, *, force: bool = False) -> None:
    """Delete an environment; EnvironmentInUse while sessions use it, unless ``force``. Its
    warm pool, if hangar kept one, is scaled to 0 and its tick cancelled."""
    env = runtime.sessions.environments.require(name)
    runtime.sessions.environments.delete(name, force=force)
    if runtime.sessions.pools.kept(env):
        runtime.sessions.pools.release(env)
