"""The sandboxes port: isolated places where agents run, found again by id or label.

The port is primitives only; hangar's policy over any backend (pre-destroy hooks, the veto,
``force``) is written once above it, in :mod:`hangar.sandboxes.policy`. Contract for every
backend (checked, all of it, by :mod:`hangar.testing.sandboxes`):

- Inside a sandbox the repo lives under :data:`WORKSPACE` (``/workspace/<repo>``), HOME is the
  sandbox's own (:data:`HOME`), ``/tmp`` is private, and ``python3``, ``git`` and ``tar`` are
  on PATH.
- ``create`` returns once the sandbox is requested, not when it is ready (on a cluster that can
  take minutes). ``status`` says where it is: :attr:`SandboxState.PENDING` with a reason for
  people, :attr:`SandboxState.READY` (it accepts ``exec`` and file calls), or
  :attr:`SandboxState.FAILED` with a reason (it never will; destroy it). ``await_status``
  waits, bounded, for a pending sandbox to be ready or failed: as soon as it is no longer
  pending, or after its timeout with its pending status (a backend that cannot wait on a
  change answers ``status`` at once: a caller must handle a pending answer however short its
  wait was). Callers ``exec`` only into a ready sandbox. A backend that starts sandboxes synchronously reports every live one
  ready. A sandbox outlives the process that made it: any later :class:`Sandboxes` opened on
  the same URL, in this process or another, finds, uses and destroys it.
- Two users (the uid split): :attr:`SandboxUser.AGENT` runs the agent's side (clone, the
  environment's setup, the harness, shells), with no privileges; :attr:`SandboxUser.HANGAR`
  runs hangar's own tools (checkpoint, restore, run supervision), which read and write any of
  the agent's files and which the agent can neither signal, trace nor read. ``exec``,
  ``put_file`` and ``get_file`` run as the agent unless told otherwise. Hangar's files live
  under :data:`HANGAR_DIR`, out of the agent's reach; the agent's HOME is :data:`HOME`.
  Whatever the agent runs has :data:`HANGAR_BIN` first on its PATH, even when the caller's
  environment sets PATH.
- ``exec`` runs one command to completion. stdin is streamed in (bytes, a binary file or an
  iterable of byte chunks); stdout and stderr are streamed to the given binary files, or
  collected and returned when none is given; output of any size passes without deadlock. A
  timeout kills the command and raises :class:`~hangar.errors.ExecTimeout`. A non-zero exit
  is not an error: it is in the result.
- ``put_file`` and ``get_file`` stream file contents in and out.
- ``destroy`` ends every process in the sandbox and removes it; no hook runs at the port. It
  is idempotent: destroying a missing sandbox does nothing.
- ``extend`` renews the sandbox's lease where the backend has one (a cluster that deletes a
  sandbox at a time of its own): the backend keeps it at least until ``until`` and a margin
  past it. It never shortens a lease, and extending a missing sandbox does nothing (as
  ``destroy``).
- Lookups of a missing sandbox (``get``, ``status``, ``exec``, the file calls) raise
  :class:`~hangar.errors.SandboxNotFound`.
- Optional capabilities (:class:`SandboxCapabilities`) are declared by each backend: a spec's
  ``ro_paths`` need :attr:`~SandboxCapabilities.ro_paths`, its ``host_ports``
  :attr:`~SandboxCapabilities.host_ports`, its ``image`` :attr:`~SandboxCapabilities.images`.
  A backend asked at ``create`` for one it lacks
  refuses with :class:`~hangar.errors.SandboxCapabilityMissing` (:func:`refuse_missing`)
  and makes nothing. Where declared: ``ro_paths`` are host paths shown read-only at the same
  path inside; ``host_ports`` are host loopback ports the sandbox reaches at its own
  ``127.0.0.1:PORT``, and no other host loopback port is reachable; ``image`` is the container
  image the sandbox runs (the contract above holds in it: ``python3``, ``git`` and ``tar``
  are the image's to provide).
- Warm pools (:attr:`SandboxCapabilities.pools`): ``keep_pool(pool, image=, replicas=)`` keeps
  the named pool (an environment's, the spec's ``pool``) holding ``replicas`` ready sandboxes
  of ``image``'s template: made if missing, its replicas set only when they differ, and answers
  what it was told and how many are ready (:class:`PoolState`). ``create`` never changes an
  existing pool's replicas. A backend without pools refuses with
  :class:`~hangar.errors.SandboxCapabilityMissing`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, BinaryIO, Protocol

from hangar.backends import pick
from hangar.config import Settings
from hangar.errors import InvalidInput, SandboxCapabilityMissing

WORKSPACE = "/workspace"
HOME = "/root"
HANGAR_DIR = "/hangar"
"""hangar's own folder inside a sandbox: ``runs/`` (detached runs), ``tmp/`` (its scratch space,
its locks), ``sandbox.json`` (who the agent is and its limits, for the run supervisor)."""
HANGAR_BIN = f"{HANGAR_DIR}/bin"
"""hangar's commands for the agent (``hangar-agent``): hangar's to write, first on the PATH of
everything run as the agent, whatever PATH the caller's environment sets."""
HANGAR_TMP = f"{HANGAR_DIR}/tmp"
"""hangar's scratch folder inside a sandbox (checkpoint and restore staging): the agent's
processes cannot see, fill or lock anything in it."""

Stdin = bytes | BinaryIO | Iterable[bytes] | None


def first_on_path(folder: str, path: str) -> str:
    """``path`` with ``folder`` first (and nowhere else)."""
    return ":".join([folder, *(p for p in path.split(":") if p and p != folder)])


# -- what every backend's exec and files share -------------------------------------------

PUT_FILE_SCRIPT = (
    'set -e; t="$1.hangar-put.$$"; trap \'rm -f -- "$t"\' EXIT; '
    'mkdir -p -- "$(dirname -- "$1")"; cat > "$t"; chmod -- "$2" "$t"; mv -fT -- "$t" "$1"; '
    "trap - EXIT"
)
"""``put_file`` in the sandbox: ``sh -c PUT_FILE_SCRIPT sh PATH MODE`` with the bytes on stdin,
written beside the target, then renamed, so a reader never sees half a file."""


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as a dict; InvalidInput for a name or value no process environment can hold."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise InvalidInput(f"invalid environment variable {name!r}")
    return dict(env)


def stderr_tail(data: bytes) -> str:
    """The end of a command's standard error, as text for an error message."""
    return data.decode(errors="replace").strip()[-2000:]


class CountingWriter:
    """Counts the bytes written through it to ``out`` (``get_file``'s answer)."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.count = 0

    def write(self, data: bytes) -> int:
        self.count += len(data)
        return self.out.write(data)


class SandboxUser(StrEnum):
    """Who a command in a sandbox runs as (the uid split)."""

    AGENT = "agent"
    HANGAR = "hangar"


class SandboxState(StrEnum):
    """Where a sandbox is after ``create``: on its way, usable, or never going to be."""

    PENDING = "pending"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True)
class SandboxStatus:
    """A sandbox's :class:`SandboxState`; ``reason`` says why it is pending or failed, for
    people (empty when ready)."""

    state: SandboxState
    reason: str = ""


READY = SandboxStatus(SandboxState.READY)


@dataclass(frozen=True)
class SandboxCapabilities:
    """What a backend offers beyond the primitives every backend has.

    ``ro_paths``: host paths shown read-only inside (:attr:`SandboxSpec.ro_paths`).
    ``host_ports``: host loopback ports reachable from inside (:attr:`SandboxSpec.host_ports`).
    ``images``: a sandbox runs the container image it is given (:attr:`SandboxSpec.image`);
    a backend without it runs its own system.
    ``host_reads``: hangar reads a sandbox's files from the host, with no exec (no call of the
    port uses it yet; the layer that follows a run's output will).
    ``pools``: warm pools of ready sandboxes, kept at a size hangar sets
    (:meth:`Sandboxes.keep_pool`).
    ``object_store``: its sandboxes reach the object store's endpoint (Google Cloud Storage),
    so checkpoints can go there straight from the sandbox through signed URLs
    (:mod:`hangar.checkpoints.direct`).
    """

    ro_paths: bool = False
    host_ports: bool = False
    host_reads: bool = False
    images: bool = False
    pools: bool = False
    object_store: bool = False


@dataclass(frozen=True)
class PoolState:
    """A warm pool after :meth:`Sandboxes.keep_pool`: ``replicas`` it was told to keep, of
    which ``ready`` are ready now (they come over the next minutes)."""

    pool: str
    replicas: int
    ready: int = 0


@dataclass(frozen=True)
class SandboxSpec:
    """What a new sandbox needs.

    ``ro_paths`` are host paths shown read-only at the same path inside (a local-path repo, so
    that it can be cloned). ``env`` is the base environment of every exec as the agent.
    ``host_ports`` are host loopback ports the sandbox may reach (a local model server).
    ``image`` is the container image it runs (a reference, checked by
    :func:`hangar.sessions.images.check_image` before it gets here; None: the backend's own
    system). All three are optional capabilities (:class:`SandboxCapabilities`): a backend
    without one refuses a spec that sets it. ``pool`` is the warm pool (and template family)
    the sandbox is drawn from: sandboxes of one environment share it (its name); a backend
    without pools ignores it.
    """

    labels: Mapping[str, str] = field(default_factory=dict)
    ro_paths: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    host_ports: Sequence[int] = ()
    image: str | None = None
    pool: str | None = None


@dataclass(frozen=True)
class SandboxInfo:
    """A live sandbox. ``outdated``: made by an older, weaker layout of the backend; it works,
    and should be checkpointed and replaced (``hangar serve`` does so at start)."""

    id: str
    labels: Mapping[str, str]
    created_at: datetime
    outdated: bool = False


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def refuse_missing(capabilities: SandboxCapabilities, spec: SandboxSpec, backend: str) -> None:
    """What every backend's ``create`` calls first: SandboxCapabilityMissing when ``spec``
    asks for a capability ``backend`` lacks (each named, with what asked for it)."""
    wanted: dict[str, object] = {"ro_paths": list(spec.ro_paths),
                                 "host_ports": list(spec.host_ports), "images": spec.image}
    missing = [name for name, value in wanted.items() if value and not getattr(capabilities, name)]
    if missing:
        asked = ", ".join(f"{name} {wanted[name]}" for name in missing)
        raise SandboxCapabilityMissing(
            f"the {backend} sandbox backend cannot give a sandbox {' or '.join(missing)} "
            f"(asked for {asked})", capability=missing[0], missing=missing, backend=backend,
        )  # fmt: skip


class Sandboxes(Protocol):
    """The port; the contract is the module's docstring."""

    @property
    def capabilities(self) -> SandboxCapabilities:
        """The optional capabilities this backend has; the same for every call."""
        ...

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Request a sandbox; returns once it is requested (``status`` says when it is
        ready). SandboxCapabilityMissing, with nothing made, for a capability it lacks."""
        ...

    def status(self, sandbox_id: str) -> SandboxStatus:
        """Where the sandbox is (pending with a reason, ready, failed with a reason);
        SandboxNotFound if it is missing."""
        ...

    def await_status(self, sandbox_id: str, timeout: float) -> SandboxStatus:
        """The sandbox's status as soon as it is no longer pending, or after ``timeout``
        seconds with its pending status; SandboxNotFound once it is gone. A backend with no
        way to wait on a change (one that starts sandboxes synchronously) answers
        :meth:`status` at once."""
        ...

    def get(self, sandbox_id: str) -> SandboxInfo: ...

    def list(self, labels: Mapping[str, str] | None = None) -> list[SandboxInfo]:
        """Live sandboxes whose labels include every given pair, oldest first."""
        ...

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
        """Run ``argv`` in the sandbox as ``user`` (cwd defaults to HOME). As the agent, ``env``
        is added to the spec's; hangar's tools get ``env`` alone. Neither is ever put on a
        command line the host can see. Once ``cancel`` is set (from another thread), the
        command and every process it started are killed within a second, and it returns as
        a command killed by SIGKILL does (exit 137)."""
        ...

    def put_file(
        self,
        sandbox_id: str,
        path: str,
        data: bytes | BinaryIO,
        *,
        mode: int = 0o644,
        user: SandboxUser = SandboxUser.AGENT,
    ) -> None:
        """Write a file as ``user`` (parents made as needed), replacing any file at ``path``."""
        ...

    def get_file(
        self, sandbox_id: str, path: str, out: BinaryIO, *, user: SandboxUser = SandboxUser.AGENT
    ) -> int:
        """Copy a file's bytes to ``out``; returns the count. SandboxError if it is missing."""
        ...

    def destroy(self, sandbox_id: str) -> None:
        """End every process in the sandbox and remove it; no hook runs. Idempotent: a missing
        sandbox is nothing to do."""
        ...

    def extend(self, sandbox_id: str, until: datetime) -> None:
        """Keep the sandbox at least until ``until`` (and the backend's margin past it) where
        the backend's cluster would delete it at a time of its own; never shortens. A missing
        sandbox is nothing to do."""
        ...

    def keep_pool(self, pool: str, *, image: str | None, replicas: int) -> PoolState:
        """Keep warm pool ``pool`` (an environment's name) at ``replicas`` ready sandboxes of
        ``image`` (None: the backend's default image): the pool and its template made if
        missing, its replicas set when they differ. InvalidInput for a negative count or, for
        a pool to make, no image at all; SandboxCapabilityMissing on a backend without pools."""
        ...


def refuse_pools(backend: str, pool: str) -> SandboxCapabilityMissing:
    """What ``keep_pool`` raises on a backend without warm pools."""
    return SandboxCapabilityMissing(
        f"the {backend} sandbox backend has no warm pools (asked to keep pool {pool}): warm "
        "pools are a GKE feature (gke://)", capability="pools", missing=["pools"],
        backend=backend,
    )  # fmt: skip


def _open_local(url: str, settings: Settings) -> Sandboxes:
    from hangar.sandboxes.local import LocalSandboxes

    return LocalSandboxes.from_url(url, settings)


class OnFirstUse:
    """A sandbox backend opened the first time a sandbox is used, not before: what a Cloud Run
    function's cold start pays for is its first request, and the local backend (bubblewrap's
    launcher, the uid, network and disk pieces) is no part of one that reads records.
    Thread-safe."""

    def __init__(self, opener: Callable[[], Sandboxes]) -> None:
        self._opener = opener
        self._backend: Sandboxes | None = None
        self._lock = threading.Lock()

    def _opened(self) -> Sandboxes:
        with self._lock:
            if self._backend is None:
                self._backend = self._opener()
            return self._backend

    @property
    def capabilities(self) -> SandboxCapabilities:
        return self._opened().capabilities

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        return self._opened().create(spec)

    def status(self, sandbox_id: str) -> SandboxStatus:
        return self._opened().status(sandbox_id)

    def await_status(self, sandbox_id: str, timeout: float) -> SandboxStatus:
        return self._opened().await_status(sandbox_id, timeout)

    def get(self, sandbox_id: str) -> SandboxInfo:
        return self._opened().get(sandbox_id)

    def list(self, labels: Mapping[str, str] | None = None) -> list[SandboxInfo]:
        return self._opened().list(labels)

    def exec(self, sandbox_id: str, argv: Sequence[str], **options: Any) -> ExecResult:
        return self._opened().exec(sandbox_id, argv, **options)

    def put_file(self, sandbox_id: str, path: str, data: bytes | BinaryIO, **options: Any) -> None:
        self._opened().put_file(sandbox_id, path, data, **options)

    def get_file(self, sandbox_id: str, path: str, out: BinaryIO, **options: Any) -> int:
        return self._opened().get_file(sandbox_id, path, out, **options)

    def destroy(self, sandbox_id: str) -> None:
        self._opened().destroy(sandbox_id)

    def extend(self, sandbox_id: str, until: datetime) -> None:
        self._opened().extend(sandbox_id, until)

    def keep_pool(self, pool: str, *, image: str | None, replicas: int) -> PoolState:
        return self._opened().keep_pool(pool, image=image, replicas=replicas)


def _open_gke(url: str, settings: Settings) -> Sandboxes:
    from hangar.sandboxes.gke import GkeSandboxes

    return GkeSandboxes.from_url(url, settings)


_BACKENDS: dict[str, Callable[[str, Settings], Sandboxes]] = {"local": _open_local,
                                                              "gke": _open_gke}


def open_sandboxes(url: str, settings: Settings, *, on_first_use: bool = False) -> Sandboxes:
    """Open the backend the URL's scheme names; InvalidSettings for an unknown scheme. With
    ``on_first_use``, the backend is opened (and the rest of its URL checked) when a sandbox is
    first used (:class:`OnFirstUse`)."""
    opener = pick(_BACKENDS, url, "HANGAR_SANDBOXES")
    if on_first_use:
        return OnFirstUse(lambda: opener(url, settings))
    return opener(url, settings)
