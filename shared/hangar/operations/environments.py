"""The environment operations, each written once for REST and MCP (see :mod:`.sessions` for
what an operation is). Secret values go in and never come out: views name secrets (and
variables) only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hangar.operations import wire as w
from hangar.sessions.environments import EnvironmentChange
from hangar.sessions.images import check_image, image_refused

if TYPE_CHECKING:
    from hangar.runtime import Runtime


def list_all(runtime: Runtime) -> list[w.EnvironmentView]:
    """Every environment."""
    return [w.EnvironmentView.of(e) for e in runtime.sessions.environments.list()]


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
    return w.EnvironmentView.of(runtime.sessions.environments.add(
        a.name, a.repo, branch=a.branch, setup=a.setup, vars=a.vars, secrets=a.secrets,
        host_ports=a.host_ports, turn_timeout_minutes=a.turn_timeout_minutes,
        image=a.image))  # fmt: skip


def get(runtime: Runtime, name: str) -> w.EnvironmentView:
    """One environment; EnvironmentNotFound otherwise."""
    return w.EnvironmentView.of(runtime.sessions.environments.require(name))


def update(runtime: Runtime, name: str, a: w.EnvironmentPatch) -> w.EnvironmentView:
    """Change the fields ``a`` sets (and only those); a new image is refused, with nothing
    changed, as on :func:`add`; EnvironmentNotFound first for an unknown name."""
    if a.image is not None:
        runtime.sessions.environments.require(name)
    _refuse_image(runtime, name, a.image)
    change = EnvironmentChange.model_validate(a.model_dump(exclude_unset=True))
    return w.EnvironmentView.of(runtime.sessions.environments.update(name, change))


def delete(runtime: Runtime, name: str, *, force: bool = False) -> None:
    """Delete an environment; EnvironmentInUse while sessions use it, unless ``force``."""
    runtime.sessions.environments.delete(name, force=force)
