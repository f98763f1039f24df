"""Which packs of chunks are alive, by mark and sweep over the checkpoints that refer to them.

A pack (:mod:`hangar.checkpoints.chunks`) belongs to the session that wrote it, and is alive while
any recorded checkpoint, of that session or of another (a fork refers to its parent's chunks
without copying them), lists it in ``packs``. Nothing counts references: after checkpoints are
pruned or dropped, :meth:`PackSweeper.sweep` marks what every checkpoint using the owner still
lists (``Db.checkpoints_using``) and deletes the owner's other packs: at once the packs the
dropped checkpoints listed (recorded packs: no take in flight can be adding a reference to
them without its record being refused, see ``Checkpoint.source``), and packs no record ever
listed (a take that crashed before recording) only past ``grace``, since a take in flight has
written its packs and not yet recorded them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Set as AbstractSet
from datetime import UTC, datetime, timedelta

from hangar.blobs import Blobs
from hangar.db import Db
from hangar.errors import HangarError
from hangar.models import Checkpoint
from hangar.checkpoints.chunks import pack_made, packs_prefix

logger = logging.getLogger(__name__)


class PackSweeper:
    def __init__(self, db: Db, blobs: Blobs, grace: timedelta) -> None:
        self.db = db
        self.blobs = blobs
        self.grace = grace

    def after_drop(self, dropped: Iterable[Checkpoint], *, gone: str | None = None) -> int:
        """Sweep the packs of every session whose packs ``dropped`` (records no longer there)
        listed; ``gone``: a session whose records are all gone, whose every unlisted pack goes
        whatever its age. Returns how many packs were deleted; failures are logged, and the
        next sweep tries again."""
        candidates: dict[str, set[str]] = {}
        for checkpoint in dropped:
            for pack in checkpoint.packs:
                owner = _owner(pack)
                if owner is not None:
                    candidates.setdefault(owner, set()).add(pack)
        if gone is not None:
            candidates.setdefault(gone, set())
        deleted = 0
        for owner, packs in candidates.items():
            try:
                deleted += self.sweep(owner, packs, everything=owner == gone)
            except HangarError:
                logger.exception("sweeping the packs of session %s failed", owner)
        return deleted

    def sweep(self, owner: str, dropped: AbstractSet[str] = frozenset(), *,
              everything: bool = False) -> int:  # fmt: skip
        """Delete the packs of session ``owner`` that no recorded checkpoint lists: those in
        ``dropped`` at once, the others once older than ``grace`` (all of them with
        ``everything``). Returns how many were deleted."""
        live = {pack for c in self.db.checkpoints_using(owner) for pack in c.packs}
        before = datetime.now(UTC) - self.grace
        deleted = 0
        for key in self.blobs.list(packs_prefix(owner)):
            if key in live:
                continue
            made = pack_made(key)
            if key in dropped or everything or (made is not None and made < before):
                self.blobs.delete(key)
                deleted += 1
        return deleted


def _owner(pack: str) -> str | None:
    parts = pack.split("/")
    if len(parts) == 4 and parts[0] == "sessions" and parts[2] == "packs":
        return parts[1]
    return None
