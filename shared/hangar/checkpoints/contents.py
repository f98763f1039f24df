"""What a recorded checkpoint holds, read the same way whatever its format.

Parts go by their plain names: ``meta.json``, ``repo.bundle``, ``staged.patch``,
``wip.patch``, ``session.patch`` (bytes) and the trees ``untracked``, ``agent`` and
``exchange`` (a tar archive: format 1's as stored, compressed; format 2's rebuilt from its
entries, plain). :meth:`Contents.restore_parts` gives them as :mod:`hangar.agent.restore`
takes them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import cached_property

from hangar.errors import BlobNotFound, DecryptionFailed
from hangar.models import Checkpoint, CheckpointPart, Compression
from hangar.checkpoints.chunked import open_manifest
from hangar.checkpoints.chunks import ChunkReader
from hangar.checkpoints.manifest import Manifest, ManifestPart, TreeEntry
from hangar.checkpoints.parts import CheckpointParts
from hangar.checkpoints.rebuild import tree_tar

TREES = ("untracked", "agent", "exchange")
_RESTORE_ORDER = ("repo.bundle", "staged.patch", "wip.patch", "untracked", "agent", "exchange")


@dataclass(frozen=True)
class RestorePart:
    """A part as the restore script is told of it (name, size, compression) with its bytes."""

    name: str
    size: int
    compression: Compression
    chunks: Iterator[bytes]

    def entry(self) -> dict[str, object]:
        return {"name": self.name, "size": self.size, "compression": self.compression}


class Contents:
    """The parts of one recorded checkpoint. Reading a format-2 checkpoint opens its manifest
    once (DecryptionFailed or BlobNotFound then); each part's bytes are checked as they are
    read, and only trustworthy once its iterator has finished."""

    def __init__(self, parts: CheckpointParts, checkpoint: Checkpoint) -> None:
        self.parts = parts
        self.checkpoint = checkpoint
        self.reader = ChunkReader(parts.blobs)

    @cached_property
    def manifest(self) -> Manifest:
        return open_manifest(self.parts, self.checkpoint)

    def names(self) -> list[str]:
        if self.checkpoint.format == 2:
            return [p.name for p in self.manifest.parts]
        return [_plain(p.name) for p in self.checkpoint.parts]

    def has(self, name: str) -> bool:
        return name in self.names()

    def size(self, name: str) -> int:
        """A blob's size in bytes (for a tree, its files' bytes)."""
        if self.checkpoint.format == 2:
            return self._part(name).size
        return self._stored(name).size

    def read(self, name: str) -> Iterator[bytes]:
        """The part's bytes (a tree: its tar archive)."""
        if self.checkpoint.format == 2:
            return self._chunked(self._part(name)).chunks
        return self.parts.read(self.checkpoint, self._stored(name).name)

    def restore_parts(self, stack: ExitStack) -> list[RestorePart]:
        """The parts a restore takes, in its order, each opened now: a missing part (or pack)
        raises BlobNotFound here, before the sandbox is used."""
        out: list[RestorePart] = []
        if self.checkpoint.format == 2:
            for pack in self.checkpoint.packs:
                if not self.parts.blobs.exists(pack):
                    raise BlobNotFound(f"checkpoint {self.checkpoint.id}: a pack of its chunks "
                                       "is gone", key=pack)  # fmt: skip
            for name in _RESTORE_ORDER:
                if (part := self.manifest.part(name)) is not None:
                    out.append(self._chunked(part))
            return out
        key = self.parts.data_key(self.checkpoint)
        for name in _RESTORE_ORDER:
            if (stored := self._stored_or_none(name)) is None:
                continue
            chunks = stack.enter_context(self.parts.opened(self.checkpoint, stored.name, key))
            out.append(RestorePart(stored.name, stored.size, stored.compression, chunks))
        return out

    def _chunked(self, part: ManifestPart) -> RestorePart:
        refs = self.manifest.chunks
        stream = self.reader.read([refs[cid] for cid in part.cids])
        if part.kind == "blob":
            return RestorePart(part.name, part.size, Compression.NONE, stream)

        def contents(entry: TreeEntry) -> Iterator[bytes]:
            return itertools.islice(stream, len(entry.chunks))

        size, tar = tree_tar(part.entries, contents)
        return RestorePart(part.name + ".tar", size, Compression.NONE, tar)

    def _part(self, name: str) -> ManifestPart:
        part = self.manifest.part(name)
        if part is None:
            raise DecryptionFailed(f"checkpoint {self.checkpoint.id} has no part {name!r}")
        return part

    def _stored_or_none(self, name: str) -> CheckpointPart | None:
        return next((p for p in self.checkpoint.parts if _plain(p.name) == name), None)

    def _stored(self, name: str) -> CheckpointPart:
        part = self._stored_or_none(name)
        if part is None:
            raise DecryptionFailed(f"checkpoint {self.checkpoint.id} has no part {name!r}")
        return part


def _plain(stored: str) -> str:
    """A format-1 part's plain name: its archives without their suffixes."""
    head = stored.split(".tar", 1)[0]
    return head if head in TREES else stored
