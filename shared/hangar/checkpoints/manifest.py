"""The manifest of a format-2 checkpoint: what the checkpoint holds, as content-addressed chunks.

A format-2 checkpoint stores one part, ``manifest``, sealed under the checkpoint's data key like
any part (:mod:`hangar.checkpoints.parts`). It lists the checkpoint's parts, each either a *blob*
(the repo bundle, a patch, ``meta.json``: its bytes are its chunks joined) or a *tree* (the
untracked files, the conversation folders, the exchange folder: entries with their paths,
modes and chunks), and, for every chunk they name, where it is stored and the key it is sealed
under (:class:`ChunkRef`). Chunks are named inside the sandbox by the SHA-256 of their bytes
(the ``cid``); in blobs they are known only by an HMAC of it under the owning session's naming
key, inside packs with random names, so the bucket's listing reveals nothing about contents.

The restore rebuilds each part from its chunks (:mod:`hangar.checkpoints.rebuild`) into the very
forms :mod:`hangar.agent.restore` reads for format 1: a plain tar for a tree, the bytes for a
blob.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FORMAT: Literal[2] = 2
BLOB_PARTS = ("meta.json", "repo.bundle", "staged.patch", "wip.patch", "session.patch")
"""Parts stored as one run of bytes."""
TREE_PARTS = ("untracked", "agent", "exchange")
"""Parts stored as a listing of entries: the untracked files (relative to the repo), the
conversation folders and the exchange folder (relative to HOME)."""


class ChunkRef(BaseModel):
    """Where one chunk is stored and how to open it: ``length`` sealed bytes at ``offset`` in
    the pack ``pack`` (a blob key) of session ``owner``, sealed under ``key`` (32 bytes) with
    associated data binding ``owner`` and ``name`` (:func:`hangar.checkpoints.chunks.chunk_aad`);
    ``size`` plaintext bytes, whose SHA-256 is the cid it is listed under."""

    model_config = ConfigDict(extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")

    owner: str
    name: str
    pack: str
    offset: int = Field(ge=0)
    length: int = Field(gt=0)
    size: int = Field(gt=0)
    key: bytes


class TreeEntry(BaseModel):
    """One member of a tree part: ``path`` relative to the tree's root, byte for byte (a name
    need not be UTF-8); ``kind``; ``mode`` (permission bits); ``mtime_ns``; ``size`` (a file's
    bytes, 0 otherwise); ``target`` (a link's); ``chunks`` (a file's cids, in order, their
    sizes adding up to ``size``)."""

    model_config = ConfigDict(extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")

    path: bytes
    kind: Literal["file", "dir", "symlink"]
    mode: int = Field(ge=0, le=0o7777)
    mtime_ns: int = Field(ge=0)
    size: int = Field(default=0, ge=0)
    target: bytes | None = None
    chunks: list[str] = Field(default_factory=list)


class ManifestPart(BaseModel):
    """A part of the checkpoint: a blob (``chunks``, joined in order) or a tree (``entries``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["blob", "tree"]
    size: int = Field(ge=0, description="a blob's bytes; a tree's files' bytes")
    chunks: list[str] = Field(default_factory=list)
    entries: list[TreeEntry] = Field(default_factory=list)

    @property
    def cids(self) -> list[str]:
        """Every chunk of the part in the order its bytes come: a blob's, or its files'."""
        return self.chunks if self.kind == "blob" else [c for e in self.entries for c in e.chunks]


class Manifest(BaseModel):
    """A format-2 checkpoint's manifest (sealed as its ``manifest`` part)."""

    model_config = ConfigDict(extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")

    format: Literal[2] = FORMAT
    session_id: str
    checkpoint_id: str
    naming_key: bytes = Field(description="the session's key that names its chunks (32 bytes)")
    parts: list[ManifestPart] = Field(default_factory=list)
    chunks: dict[str, ChunkRef] = Field(default_factory=dict, description="by cid")

    def part(self, name: str) -> ManifestPart | None:
        return next((p for p in self.parts if p.name == name), None)


# ---------------------------------------------------------------------------- stored form
#
# A manifest of a large session lists thousands of chunks: stored whole, every checkpoint
# would write it again, more than the edit it records. So it is stored as *pieces*: its
# records as JSON lines (a blob's chunk, a tree's entry, a chunk's ref right after the first
# record that uses it), cut into pieces where a line's hash says (content-defined: an edit
# changes the piece it falls in, not the ones after), each piece a chunk like any other
# (reused from the source checkpoint when its bytes are the same, compressed, sealed under its
# own key in a pack). The root, sealed as the checkpoint's ``manifest`` part, holds the parts'
# names and sizes and the pieces' refs.

PIECE_CUT = 48
"""A piece ends after a line whose hash is 0 modulo this (about this many lines a piece)."""
PIECE_MAX = 32 << 10
"""A piece also ends once it holds this many bytes."""
MAX_PIECE_PLAIN = 64 << 20
"""The most one piece may unpack to (a file of a million chunks lists them on one line)."""


class PartHead(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["blob", "tree"]
    size: int = Field(ge=0)


class PieceRef(ChunkRef):
    """A piece of the manifest: a chunk (compressed JSON lines) whose plaintext's SHA-256,
    before compression, is ``cid``."""

    cid: str


class ManifestRoot(BaseModel):
    """What the ``manifest`` part holds: everything but the records, which are in pieces."""

    model_config = ConfigDict(extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")

    format: Literal[2] = FORMAT
    session_id: str
    checkpoint_id: str
    naming_key: bytes
    parts: list[PartHead]
    pieces: list[PieceRef]
    pack_sizes: dict[str, int] = Field(
        default_factory=dict, description="the sizes of the session's own packs it refers to "
        "(to tell how much of a pack is still used)")


def _line(record: list[object]) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def manifest_lines(manifest: Manifest) -> list[bytes]:
    """The records of ``manifest`` as JSON lines, in a stable order: the same entries and refs
    give the same lines."""
    lines: list[bytes] = []
    written: set[str] = set()

    def refs(cids: list[str]) -> None:
        for cid in cids:
            if cid not in written:
                written.add(cid)
                r = manifest.chunks[cid]
                lines.append(_line(["c", cid, r.owner, r.name, r.pack, r.offset, r.length, r.size,
                                    base64.b64encode(r.key).decode()]))  # fmt: skip

    for index, part in enumerate(manifest.parts):
        if part.kind == "blob":
            for cid in part.chunks:
                lines.append(_line(["b", index, cid]))
                refs([cid])
            continue
        for e in part.entries:
            target = None if e.target is None else base64.b64encode(e.target).decode()
            lines.append(_line(["e", index, base64.b64encode(e.path).decode(), e.kind, e.mode,
                                e.mtime_ns, e.size, target, e.chunks]))  # fmt: skip
            refs(e.chunks)
    return lines


def cut_pieces(lines: list[bytes]) -> list[bytes]:
    """``lines`` joined into pieces, cut after each line whose SHA-256 is 0 modulo PIECE_CUT or
    once a piece passes PIECE_MAX bytes."""
    pieces: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for line in lines:
        current.append(line)
        size += len(line)
        if size >= PIECE_MAX or int.from_bytes(hashlib.sha256(line).digest()[:4]) % PIECE_CUT == 0:
            pieces.append(b"".join(current))
            current, size = [], 0
    if current:
        pieces.append(b"".join(current))
    return pieces


def from_lines(root: ManifestRoot, lines: list[bytes]) -> Manifest:
    """The manifest of ``root`` with its records read back from ``lines``; ValueError when
    they are not what :func:`manifest_lines` writes for these parts."""
    parts = [ManifestPart(name=h.name, kind=h.kind, size=h.size) for h in root.parts]
    chunks: dict[str, ChunkRef] = {}
    try:
        for raw in lines:
            record = json.loads(raw)
            if record[0] == "c":
                _, cid, owner, name, pack, offset, length, size, key = record
                chunks[cid] = ChunkRef(owner=owner, name=name, pack=pack, offset=offset,
                                       length=length, size=size, key=base64.b64decode(key))  # fmt: skip
            elif record[0] == "b":
                parts[record[1]].chunks.append(record[2])
            elif record[0] == "e":
                _, index, path, kind, mode, mtime_ns, size, target, cids = record
                parts[index].entries.append(TreeEntry(
                    path=base64.b64decode(path), kind=kind, mode=mode, mtime_ns=mtime_ns,
                    size=size, target=None if target is None else base64.b64decode(target),
                    chunks=cids))  # fmt: skip
            else:
                raise ValueError("an unknown record")
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ValueError(f"a malformed manifest record ({exc})") from None
    for part in parts:
        if part.kind == "blob" and part.entries or part.kind == "tree" and part.chunks:
            raise ValueError(f"part {part.name}: records of the other kind")
    if {c for p in parts for c in p.cids} - chunks.keys():
        raise ValueError("a chunk without its ref")
    return Manifest(session_id=root.session_id, checkpoint_id=root.checkpoint_id,
                    naming_key=root.naming_key, parts=parts, chunks=chunks)  # fmt: skip
