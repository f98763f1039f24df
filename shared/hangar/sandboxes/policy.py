"""hangar's policy over any sandbox backend, written once: pre-destroy hooks, the veto and
``force``.

A backend's ``destroy`` only ends a sandbox (:mod:`hangar.sandboxes`). Work is saved before a
sandbox goes by a pre-destroy hook (the session service's checkpoint), so every destroy that
must not lose work goes through :class:`SandboxPolicy`: it runs the hooks in the order added,
while the sandbox still runs, and a hook that raises vetoes the destroy. The runtime wraps its
backend in one (:func:`guarded`); everything else of the port passes straight through.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, BinaryIO

from hangar.errors import DestroyVetoed, HangarError, SandboxNotFound
from hangar.sandboxes import ExecResult, SandboxCapabilities, SandboxInfo, Sandboxes
from hangar.sandboxes import PoolState, SandboxSpec, SandboxStatus

__all__ = ["PreDestroyHook", "SandboxPolicy", "guarded"]

logger = logging.getLogger(__name__)

PreDestroyHook = Callable[[SandboxInfo], None]


class SandboxPolicy:
    """The sandboxes port over ``backend``, plus hooks run before a destroy. Thread-safe.

    Every call of the port is the backend's, unchanged, except :meth:`destroy`.
    """

    def __init__(self, backend: Sandboxes) -> None:
        self.backend = backend
        self._hooks: list[PreDestroyHook] = []
        self._lock = threading.Lock()

    def add_pre_destroy_hook(self, hook: PreDestroyHook) -> None:
        """Run ``hook(info)`` before every destroy (of a live sandbox), in the order added."""
        with self._lock:
            self._hooks.append(hook)

    def destroy(self, sandbox_id: str, *, hooks: bool = True, force: bool = False) -> None:
        """Run every hook (if the sandbox is live and ``hooks``), then destroy it at the port.

        Idempotent: a missing sandbox runs no hook and is nothing to do. A hook that raises
        vetoes the destroy: the sandbox is kept and DestroyVetoed raised (later hooks do not
        run), unless ``force``, the caller's explicit choice to lose that work; then the
        failure is logged and the destroy goes on. ``hooks=False``: the caller knows there is
        nothing to save (a start that failed, a sandbox just checkpointed).
        """
        if hooks:
            try:
                info = self.backend.get(sandbox_id)
            except SandboxNotFound:
                info = None
            if info is not None:
                self._run_hooks(info, force)
        self.backend.destroy(sandbox_id)

    def _run_hooks(self, info: SandboxInfo, force: bool) -> None:
        with self._lock:
            hooks = list(self._hooks)
        for hook in hooks:
            try:
                hook(info)
            except Exception as exc:  # any failure: the work it guards is not saved
                if not force:
                    reason = exc.message if isinstance(exc, HangarError) else repr(exc)
                    raise DestroyVetoed(
                        f"sandbox {info.id} was kept: saving its work first failed ({reason}); "
                        "destroying it anyway (force) loses the work since the last good "
                        "checkpoint", sandbox_id=info.id,
                    ) from exc  # fmt: skip
                logger.exception("pre-destroy hook %r failed for %s; destroying anyway "
                                 "(forced)", hook, info.id)  # fmt: skip

    # -- the port, passed through ------------------------------------------------------------

    @property
    def capabilities(self) -> SandboxCapabilities:
        return self.backend.capabilities

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        return self.backend.create(spec)

    def status(self, sandbox_id: str) -> SandboxStatus:
        return self.backend.status(sandbox_id)

    def await_status(self, sandbox_id: str, timeout: float) -> SandboxStatus:
        return self.backend.await_status(sandbox_id, timeout)

    def get(self, sandbox_id: str) -> SandboxInfo:
        return self.backend.get(sandbox_id)

    def list(self, labels: Mapping[str, str] | None = None) -> list[SandboxInfo]:
        return self.backend.list(labels)

    def exec(self, sandbox_id: str, argv: Sequence[str], **options: Any) -> ExecResult:
        return self.backend.exec(sandbox_id, argv, **options)

    def put_file(self, sandbox_id: str, path: str, data: bytes | BinaryIO, **options: Any) -> None:
        self.backend.put_file(sandbox_id, path, data, **options)

    def get_file(self, sandbox_id: str, path: str, out: BinaryIO, **options: Any) -> int:
        return self.backend.get_file(sandbox_id, path, out, **options)

    def extend(self, sandbox_id: str, until: datetime) -> None:
        self.backend.extend(sandbox_id, until)

    def keep_pool(self, pool: str, *, image: str | None, replicas: int) -> PoolState:
        return self.backend.keep_pool(pool, image=image, replicas=replicas)


def guarded(sandboxes: Sandboxes) -> SandboxPolicy:
    """``sandboxes`` under a policy: itself if it already is one, else a new
    :class:`SandboxPolicy` over it (with no hooks yet)."""
    return sandboxes if isinstance(sandboxes, SandboxPolicy) else SandboxPolicy(sandboxes)
