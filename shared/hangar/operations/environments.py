"""The environment operations, each written once for REST and MCP (see :mod:`.sessions` for
what an operation is). Secret values go in and never come out: views name secrets (and
variables) only."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from hangar.models import Environment
from hangar.operations import wire as w
from hangar.sessions.sandbox import check_capabilities
from hangar.sessions.environments import EnvironmentChange
from hangar.sessions.images import check_image, image_refused

if TYPE_CHECKING:
    from hangar.runtime import Runtime


def _view(runtime: Runtime, env: Environment) -> w.EnvironmentView:
    """The view, its warnings in this hangar's terms: only local sandboxes reach host ports
    (read from the backend's URL, so a list opens no backend)."""
    local = urlsplit(runtime.settings.sandboxes).scheme == "local"
    return w.EnvironmentView.of(env, host_ports=local)


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
    return _view(runtime, runtime.sessions.environments.add(
        a.name, a.repo, branch=a.branch, setup=a.setup, vars=a.vars, secrets=a.secrets,
        host_ports=a.host_ports, turn_timeout_minutes=a.turn_timeout_minutes,
        image=a.image))  # fmt: skip


def get(runtime: Runtime, name: str) -> w.EnvironmentView:
    """One environment; EnvironmentNotFound otherwise."""
    return _view(runtime, runtime.sessions.environments.require(name))


def update(runtime: Runtime, name: str, a: w.EnvironmentPatch) -> w.EnvironmentView:
    """Change the fields ``a`` sets (and only those); a new image is refused, with nothing
    changed, as on :func:`add`; EnvironmentNotFound first for an unknown name."""
    if a.image is not None:
        runtime.sessions.environments.require(name)
    _refuse_image(runtime, name, a.image)
    if a.host_ports:
        _refuse_unreachable(runtime, name, None, a.host_ports)
    change = EnvironmentChange.model_validate(a.model_dump(exclude_unset=True))
    return _view(runtime, runtime.sessions.environments.update(name, change))


def delete(runtime: Runtime, name: str, *, force: bool = False) -> None:
    """Delete an environment; EnvironmentInUse while sessions use it, unless ``force``."""
    runtime.sessions.environments.delete(name, force=force)
