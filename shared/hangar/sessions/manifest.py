"""The manifest of a format-2 checkpoint: what the checkpoint holds, as content-addressed chunks.

A format-2 checkpoint stores one part, ``manifest``, sealed under the checkpoint's data key like
any part (:mod:`hangar.sessions.parts`). It lists the checkpoint's parts, each either a *blob*
(the repo bundle, a patch, ``meta.json``: its bytes are its chunks joined) or a *tree* (the
untracked files, the conversation folders, the exchange folder: entries with their paths,
modes and chunks), and, for every chunk they name, where it is stored and the key it is sealed
under (:class:`ChunkRef`). Chunks are named inside the sandbox by the SHA-256 of their bytes
(the ``cid``); in blobs they are known only by an HMAC of it under the owning session's naming
key, inside packs with random names, so the bucket's listing reveals nothing about contents.

The restore rebuilds each part from its chunks (:mod:`hangar.sessions.rebuild`) into the very
forms :mod:`hangar.agent.restore` reads for format 1: a plain tar for a tree, the bytes for a
blob.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FORMAT = 2
BLOB_PARTS = ("meta.json", "repo.bundle", "staged.patch", "wip.patch", "session.patch")
"""Parts stored as one run of bytes."""
TREE_PARTS = ("untracked", "agent", "exchange")
"""Parts stored as a listing of entries: the untracked files (relative to the repo), the
conversation folders and the exchange folder (relative to HOME)."""


class ChunkRef(BaseModel):
    """Where one chunk is stored and how to open it: ``length`` sealed bytes at ``offset`` in
    the pack ``pack`` (a blob key) of session ``owner``, sealed under ``key`` (32 bytes) with
    associated data binding ``owner`` and ``name`` (:func:`hangar.sessions.chunks.chunk_aad`);
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
