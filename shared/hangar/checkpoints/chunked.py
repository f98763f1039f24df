"""Format-2 checkpoints on the control plane: what the sandbox sent, checked and stored.

The sandbox's checkpoint script (format 2, :mod:`hangar.agent.chunking`) is told the cids of
the chunks a *source* checkpoint holds (the session's newest, or for a fork's first, the one it
was forked from) and answers with a manifest line listing every part by its chunks and the new
chunks' bytes after it. Nothing it says is trusted: :func:`accept` checks every name, size and
cid (a chunk it did not send must be one the source holds; a chunk it sent must hash to its
cid), and :class:`ChunkedStore` seals each new chunk under a key of its own into packs, then
seals the manifest (:class:`~hangar.checkpoints.manifest.Manifest`) as the checkpoint's one part.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import zlib
from functools import cached_property
from typing import BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hangar.errors import CheckpointError, DecryptionFailed
from hangar.models import Checkpoint, CheckpointPart
from hangar.checkpoints.chunks import OVERHEAD, PackWriter, new_key, pack_key, pack_target
from hangar.checkpoints.chunks import ChunkReader
from hangar.checkpoints.manifest import BLOB_PARTS, MAX_PIECE_PLAIN, TREE_PARTS, ChunkRef, Manifest
from hangar.checkpoints.manifest import ManifestPart, ManifestRoot, PartHead, PieceRef, TreeEntry
from hangar.checkpoints.manifest import cut_pieces, from_lines, manifest_lines
from hangar.checkpoints.parts import CheckpointParts

MANIFEST_PART = "manifest"
MOVE_BUDGET = 8 << 20
"""The most a checkpoint copies out of packs it mostly no longer uses (:meth:`ChunkedStore._repack`)."""
BLOCK = 64 * 1024
"""The largest chunk a sandbox may send (agent/chunking.py's BLOCK)."""
_CID = re.compile(r"[0-9a-f]{64}")


class _SentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    kind: Literal["blob", "tree"]
    size: int = Field(ge=0)
    chunks: list[str] | None = None
    entries: list[tuple[str, str, int, int, int, str | None, list[str]]] | None = None


class Sent(BaseModel):
    """The part of a format-2 manifest line that names chunks (the rest is format 1's)."""

    model_config = ConfigDict(extra="ignore")

    format: Literal[2]
    parts: list[_SentPart]
    new: list[tuple[str, int]]


class Source:
    """The checkpoint whose chunks a take may reuse: its manifest's root and records, opened
    and checked (:func:`open_source`). The records are parsed only when a take stores
    something: an interval check the sandbox answers "unchanged" needs only :meth:`known`."""

    def __init__(self, checkpoint: Checkpoint, root: ManifestRoot, lines: list[bytes]) -> None:
        self.checkpoint = checkpoint
        self.root = root
        self.lines = lines
        self.pieces = {piece.cid: piece for piece in root.pieces}
        """The pieces its manifest is stored in, by cid: a piece with the same bytes is reused."""
        self.pack_sizes = root.pack_sizes

    @cached_property
    def manifest(self) -> Manifest:
        try:
            return from_lines(self.root, self.lines)
        except ValueError as exc:
            raise DecryptionFailed(f"checkpoint {self.checkpoint.id}: its manifest is "
                                   f"malformed: {exc}") from None  # fmt: skip

    def known(self) -> bytes:
        """Its cids as the sandbox reads them, 32-byte digests back to back, read off its
        records' lines (``["c","<cid>",...``) without parsing them."""
        return b"".join(bytes.fromhex(line[6:70].decode()) for line in self.lines
                        if line.startswith(b'["c","'))  # fmt: skip


def accept(line: bytes, source: Source | None) -> tuple[list[ManifestPart], list[tuple[str, int]]]:
    """The parts and the new chunks (cid, size) of a format-2 manifest line, checked:
    CheckpointError when a part or entry is malformed, a cid is neither sent nor held by
    ``source``, or sizes do not add up."""
    try:
        sent = Sent.model_validate_json(line)
    except ValidationError as exc:
        raise CheckpointError(f"the sandbox's checkpoint manifest is malformed: {exc}") from None
    held = source.manifest.chunks if source is not None else {}
    sizes: dict[str, int] = {cid: ref.size for cid, ref in held.items()}
    for cid, size in sent.new:
        if not _CID.fullmatch(cid) or not 0 < size <= BLOCK or cid in sizes:
            raise CheckpointError(f"the sandbox's checkpoint lists a bad new chunk {cid[:80]!r}")
        sizes[cid] = size
    names = [p.name for p in sent.parts]
    if len(set(names)) != len(names):
        raise CheckpointError(f"the sandbox's checkpoint lists a part twice: {names}")
    parts = [_part(p, sizes) for p in sent.parts]
    return parts, sent.new


def _part(sent: _SentPart, sizes: dict[str, int]) -> ManifestPart:
    if sent.kind == "blob":
        if sent.name not in BLOB_PARTS or sent.chunks is None:
            raise CheckpointError(f"the sandbox's checkpoint lists a bad part {sent.name!r}")
        if _total(sent.chunks, sizes) != sent.size:
            raise CheckpointError(f"part {sent.name}: its chunks do not add up to its size")
        return ManifestPart(name=sent.name, kind="blob", size=sent.size, chunks=sent.chunks)
    if sent.name not in TREE_PARTS or sent.entries is None:
        raise CheckpointError(f"the sandbox's checkpoint lists a bad part {sent.name!r}")
    entries = [_entry(sent.name, fields, sizes) for fields in sent.entries]
    if sum(e.size for e in entries) != sent.size:
        raise CheckpointError(f"part {sent.name}: its files do not add up to its size")
    return ManifestPart(name=sent.name, kind="tree", size=sent.size, entries=entries)


def _entry(part: str, fields: tuple[str, str, int, int, int, str | None, list[str]],
           sizes: dict[str, int]) -> TreeEntry:  # fmt: skip
    path, kind, mode, mtime_ns, size, target, chunks = fields
    try:
        entry = TreeEntry(path=_b64(path), kind=kind, mode=mode, mtime_ns=mtime_ns, size=size,  # type: ignore[arg-type]
                          target=None if target is None else _b64(target), chunks=chunks)  # fmt: skip
    except (ValidationError, ValueError):
        raise CheckpointError(f"part {part}: a malformed entry") from None
    if (entry.kind == "symlink") != (entry.target is not None) or (
        entry.kind != "file" and (entry.chunks or entry.kind == "dir" and entry.size)
    ):
        raise CheckpointError(f"part {part}: a malformed {entry.kind} entry")
    if entry.kind == "file" and _total(entry.chunks, sizes) != entry.size:
        raise CheckpointError(f"part {part}: a file's chunks do not add up to its size")
    if entry.kind == "symlink":
        entry = entry.model_copy(update={"size": 0})
    return entry


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None


def _total(cids: list[str], sizes: dict[str, int]) -> int:
    try:
        return sum(sizes[cid] for cid in cids)
    except KeyError as missing:
        raise CheckpointError(f"the sandbox's checkpoint names a chunk it neither sent nor had "
                              f"({str(missing)[:80]})") from None  # fmt: skip


class ChunkedStore:
    """Stores what a format-2 take sent: packs first, then the sealed manifest."""

    def __init__(self, parts: CheckpointParts) -> None:
        self.parts = parts
        self.blobs = parts.blobs

    def store(
        self, checkpoint: Checkpoint, data_key: bytes, parts: list[ManifestPart],
        new: list[tuple[str, int]], spool: BinaryIO, source: Source | None, stored: list[str],
    ) -> Checkpoint:  # fmt: skip
        """Seal and pack the new chunks read from ``spool`` (each must hash to its cid; the
        caller checked that it holds exactly their bytes), then seal the manifest; returns
        ``checkpoint`` with its part, packs and sizes. Every blob key written (or maybe
        written) is appended to ``stored`` as it is, for the caller to delete on failure."""
        own = source if source is not None and source.root.session_id == checkpoint.session_id \
            else None  # fmt: skip
        naming_key = own.root.naming_key if own is not None else new_key()
        sealed_total = sum(size for _, size in new) + len(new) * OVERHEAD
        writer = PackWriter(self.blobs, checkpoint.session_id, naming_key,
                            pack_target(sealed_total))  # fmt: skip
        refs: dict[str, ChunkRef] = {}
        pieces: list[PieceRef] = []
        try:
            for cid, size in new:
                data = spool.read(size)
                if len(data) != size or hashlib.sha256(data).hexdigest() != cid:
                    raise CheckpointError("a chunk the sandbox sent does not match its cid")
                refs[cid] = writer.add(cid, data)
            held = source.manifest.chunks if source is not None else {}
            used = {cid: refs.get(cid) or held[cid] for part in parts for cid in part.cids}
            sizes = {**(own.pack_sizes if own is not None else {}), **writer.sizes}
            evacuated = self._repack(used, sizes, writer)
            manifest = Manifest(session_id=checkpoint.session_id, checkpoint_id=checkpoint.id,
                                naming_key=naming_key, parts=parts, chunks=used)  # fmt: skip
            old = source.pieces if source is not None else {}
            for piece in cut_pieces(manifest_lines(manifest)):
                cid = hashlib.sha256(piece).hexdigest()
                kept: ChunkRef | None = old.get(cid)
                if kept is None or kept.pack in evacuated:
                    kept = writer.add(cid, zlib.compress(piece, 6))
                pieces.append(PieceRef(cid=cid, **kept.model_dump(exclude={"cid"})))
            writer.close()
        finally:
            stored.extend(writer.keys)
        sizes.update(writer.sizes)
        listed = [*used.values(), *pieces]
        mine = {r.pack for r in listed if r.owner == checkpoint.session_id}
        root = ManifestRoot(session_id=checkpoint.session_id, checkpoint_id=checkpoint.id,
                            naming_key=naming_key, pieces=pieces,
                            parts=[PartHead(name=p.name, kind=p.kind, size=p.size)
                                   for p in parts],
                            pack_sizes={p: sizes[p] for p in sorted(mine) if p in sizes})  # fmt: skip
        body = root.model_dump_json().encode()
        # Among the packs: listed by the record, and swept like them if it never is.
        at = pack_key(checkpoint.session_id)
        stored.append(at)
        put = self.parts.put(checkpoint.session_id, checkpoint.id, MANIFEST_PART, data_key, [body],
                             key=at)  # fmt: skip
        packs = sorted({at, *(ref.pack for ref in listed)})
        return checkpoint.model_copy(update={
            "format": 2,
            "parts": [CheckpointPart(name=MANIFEST_PART, size=put.size, stored_size=put.stored_size,
                                     sha256=put.sha256, key=at)],
            "packs": packs,
            "uses": sorted({checkpoint.session_id, *(r.owner for r in listed)}),
            "written": writer.written,
            "source": source.checkpoint.id if source else None,
            "source_session": source.checkpoint.session_id if source else None,
        })  # fmt: skip

    def _repack(self, used: dict[str, ChunkRef], sizes: dict[str, int],
                writer: PackWriter) -> set[str]:  # fmt: skip
        """Move the chunks ``used`` still needs out of the writer's owner's packs that it uses
        less than half of (sparsest first, up to MOVE_BUDGET bytes a checkpoint), copying their
        sealed bytes into ``writer``'s packs and updating ``used``: once the checkpoints that
        still list such a pack are pruned, it goes, and the bytes of the chunks no one uses in
        it go with it. Returns the packs emptied of what ``used`` needs."""
        live: dict[str, list[str]] = {}
        for cid, ref in used.items():
            if ref.owner == writer.owner and ref.pack in sizes:
                live.setdefault(ref.pack, []).append(cid)
        share = {pack: sum(used[c].length for c in cids) / sizes[pack]
                 for pack, cids in live.items()}  # fmt: skip
        moving: list[str] = []
        budget = MOVE_BUDGET
        for pack in sorted(share, key=share.__getitem__):
            if share[pack] >= 0.5:
                break
            needed = sum(used[c].length for c in live[pack])
            if needed > budget:
                continue
            budget -= needed
            moving += sorted(live[pack], key=lambda c: used[c].offset)
        refs = [used[c] for c in moving]
        for cid, ref, sealed in zip(moving, refs, ChunkReader(self.blobs).sealed(refs)):
            used[cid] = writer.move(ref, sealed)
        return {ref.pack for ref in refs}


def open_source(parts: CheckpointParts, checkpoint: Checkpoint) -> Source:
    """A format-2 checkpoint's manifest, unsealed, with its pieces (see open_manifest)."""
    root = _root(parts, checkpoint)
    return Source(checkpoint, root, _lines(parts, checkpoint, root))


def open_manifest(parts: CheckpointParts, checkpoint: Checkpoint) -> Manifest:
    """The manifest of a format-2 checkpoint, unsealed and checked against its record: its
    root (the ``manifest`` part) and the pieces of its records. DecryptionFailed when either
    does not open or is malformed, or the root is another checkpoint's; BlobNotFound when a
    part or a pack is gone."""
    return open_source(parts, checkpoint).manifest


def _root(parts: CheckpointParts, checkpoint: Checkpoint) -> ManifestRoot:
    body = b"".join(parts.read(checkpoint, MANIFEST_PART))
    try:
        root = ManifestRoot.model_validate_json(body)
    except ValidationError:
        raise DecryptionFailed(f"checkpoint {checkpoint.id}: its manifest is malformed") from None
    if root.session_id != checkpoint.session_id or root.checkpoint_id != checkpoint.id:
        raise DecryptionFailed(f"checkpoint {checkpoint.id}: its manifest is another's")
    return root


def _lines(parts: CheckpointParts, checkpoint: Checkpoint, root: ManifestRoot) -> list[bytes]:
    """The records' lines, from the root's pieces, each checked against its cid."""
    lines: list[bytes] = []
    for ref, packed in zip(root.pieces, ChunkReader(parts.blobs).read(root.pieces)):
        inflate = zlib.decompressobj()
        try:
            plain = inflate.decompress(packed, MAX_PIECE_PLAIN)
        except zlib.error:
            plain = b""
        if inflate.unconsumed_tail or not inflate.eof or hashlib.sha256(plain).hexdigest() != ref.cid:
            raise DecryptionFailed(f"checkpoint {checkpoint.id}: a piece of its manifest is "
                                   "not what its root says")  # fmt: skip
        lines.extend(plain.splitlines(keepends=True))
    return lines
