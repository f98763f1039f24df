"""Chunks of format-2 checkpoints in blobs: sealed one by one, kept in packs.

- A chunk is sealed under a key of its own (32 random bytes, listed in every manifest that uses
  the chunk) with AES-256-GCM, its associated data binding the owning session and the chunk's
  name (:func:`chunk_aad`), so a chunk copied into another session's pack, or under another
  name, fails to open. Sealed: ``MAGIC`` + a 12-byte nonce + ciphertext and tag.
- A chunk's name is ``HMAC-SHA256(naming key of the owning session, cid)`` (:func:`chunk_name`):
  stable for equal content within a session, and telling nothing to whoever can list the
  bucket without the key.
- New chunks are written into packs: objects at ``sessions/<owner>/packs/<stamp>-<random>``
  (:func:`pack_key`), the UTC time of their making first so that a sweep can tell how old an
  unreferenced pack is without reading it. A checkpoint writes at most :data:`MAX_PACKS`,
  create-only, before its manifest is recorded.
- :class:`ChunkReader` reads chunks back by their :class:`~hangar.checkpoints.manifest.ChunkRef`,
  reading neighbouring chunks of a pack in one ranged read.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from hangar.blobs import Blobs
from hangar.errors import DecryptionFailed
from hangar.checkpoints.manifest import ChunkRef

MAGIC = b"HGC\x01"
_NONCE = 12
OVERHEAD = len(MAGIC) + _NONCE + 16
"""Sealed bytes beyond a chunk's plaintext."""
MAX_PACKS = 64
PACK_TARGET = 8 << 20
"""A pack's size, unless MAX_PACKS of them would not hold a checkpoint's new chunks."""
_READ_SPAN = 8 << 20
"""The most one ranged read of a pack asks for."""
_GAP = 64 << 10
"""Chunks of a pack at most this far apart are read in one ranged read."""
STAMP = "%Y%m%dT%H%M%SZ"


def new_key() -> bytes:
    return secrets.token_bytes(32)


def chunk_aad(owner: str, name: str) -> bytes:
    return f"hangar/chunk\x00{owner}\x00{name}".encode()


def chunk_name(naming_key: bytes, cid: str) -> str:
    return hmac.new(naming_key, cid.encode(), hashlib.sha256).hexdigest()


def seal_chunk(key: bytes, aad: bytes, data: bytes) -> bytes:
    nonce = secrets.token_bytes(_NONCE)
    return MAGIC + nonce + AESGCM(key).encrypt(nonce, data, aad)


def open_chunk(key: bytes, aad: bytes, sealed: bytes) -> bytes:
    """The plaintext of a sealed chunk; DecryptionFailed when it is not one, was altered, or
    was sealed under another key or associated data."""
    if len(sealed) < OVERHEAD or not sealed.startswith(MAGIC):
        raise DecryptionFailed("a chunk is not sealed by hangar")
    nonce = sealed[len(MAGIC) : len(MAGIC) + _NONCE]
    try:
        return AESGCM(key).decrypt(nonce, sealed[len(MAGIC) + _NONCE :], aad)
    except (InvalidTag, ValueError):
        raise DecryptionFailed("a chunk does not authenticate (altered, or not this "
                               "session's)") from None  # fmt: skip


def pack_key(owner: str, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime(STAMP)
    return f"sessions/{owner}/packs/{stamp}-{secrets.token_hex(8)}"


def packs_prefix(owner: str) -> str:
    return f"sessions/{owner}/packs/"


def pack_made(key: str) -> datetime | None:
    """When the pack at ``key`` was made, from its name; None for a name that is not a pack's."""
    stamp = key.rsplit("/", 1)[-1].split("-", 1)[0]
    try:
        return datetime.strptime(stamp, STAMP).replace(tzinfo=UTC)
    except ValueError:
        return None


def pack_target(total: int) -> int:
    """The size to fill packs to so that ``total`` sealed bytes take at most MAX_PACKS."""
    return max(PACK_TARGET, -(-total // MAX_PACKS))


class PackWriter:
    """Seals new chunks of session ``owner`` and writes them into packs of about ``target``
    bytes (:func:`pack_target` of the sealed total), create-only. :meth:`add` returns the
    chunk's :class:`ChunkRef`, :meth:`move` places a chunk already sealed (of this owner) in a
    new pack; :meth:`close` writes the last pack. ``keys`` lists every pack written so far, for
    the caller to delete if the checkpoint fails; ``sizes`` their sizes. Not thread-safe."""

    def __init__(self, blobs: Blobs, owner: str, naming_key: bytes, target: int) -> None:
        self.blobs = blobs
        self.owner = owner
        self.naming_key = naming_key
        self.target = target
        self.keys: list[str] = []
        self.sizes: dict[str, int] = {}
        self.written = 0
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._key = pack_key(owner)

    def add(self, cid: str, data: bytes) -> ChunkRef:
        name = chunk_name(self.naming_key, cid)
        key = new_key()
        sealed = seal_chunk(key, chunk_aad(self.owner, name), data)
        pack, offset = self._place(sealed)
        return ChunkRef(owner=self.owner, name=name, pack=pack, offset=offset,
                        length=len(sealed), size=len(data), key=key)  # fmt: skip

    def move(self, ref: ChunkRef, sealed: bytes) -> ChunkRef:
        """``ref``'s chunk, whose sealed bytes are ``sealed``, in this writer's packs: it opens
        as before (its key and associated data do not name its pack)."""
        assert ref.owner == self.owner and len(sealed) == ref.length
        pack, offset = self._place(sealed)
        return ref.model_copy(update={"pack": pack, "offset": offset})

    def _place(self, sealed: bytes) -> tuple[str, int]:
        if self._buffered and self._buffered + len(sealed) > self.target:
            self._flush()
        at = (self._key, self._buffered)
        self._buffer.append(sealed)
        self._buffered += len(sealed)
        return at

    def close(self) -> None:
        if self._buffered:
            self._flush()

    def _flush(self) -> None:
        self.keys.append(self._key)  # before the put: a put that fails may have landed
        size = self.blobs.put(self._key, self._buffer, if_absent=True)
        self.sizes[self._key] = size
        self.written += size
        self._buffer, self._buffered = [], 0
        self._key = pack_key(self.owner)


class ChunkReader:
    """Reads chunks back from their packs, checking each: it must open under its key and
    associated data and have the size its ref says (DecryptionFailed otherwise; BlobNotFound
    for a pack that is gone)."""

    def __init__(self, blobs: Blobs) -> None:
        self.blobs = blobs

    def read(self, refs: Sequence[ChunkRef]) -> Iterator[bytes]:
        """The plaintext of each of ``refs``, in order. Runs of chunks that lie close together
        in one pack are fetched with one ranged read of at most ``_READ_SPAN`` bytes."""
        for ref, sealed in zip(refs, self.sealed(refs)):
            plain = open_chunk(ref.key, chunk_aad(ref.owner, ref.name), sealed)
            if len(plain) != ref.size:
                raise DecryptionFailed("a chunk is not the size its manifest says")
            yield plain

    def sealed(self, refs: Sequence[ChunkRef]) -> Iterator[bytes]:
        """The sealed bytes of each of ``refs``, in order, unopened (read as :meth:`read`
        does)."""
        for run in _runs(refs):
            start = run[0].offset
            end = max(r.offset + r.length for r in run)
            data = self.blobs.read_range(run[0].pack, start, end - start)
            for ref in run:
                sealed = data[ref.offset - start : ref.offset - start + ref.length]
                if len(sealed) != ref.length:
                    raise DecryptionFailed(f"pack {ref.pack} ends before a chunk it should hold")
                yield sealed


def _runs(refs: Iterable[ChunkRef]) -> Iterator[list[ChunkRef]]:
    """``refs`` in order, grouped into runs of one pack going forward with small gaps."""
    run: list[ChunkRef] = []
    for ref in refs:
        if run:
            last = run[-1]
            begin = run[0].offset
            if (ref.pack != last.pack or ref.offset < last.offset + last.length
                    or ref.offset - (last.offset + last.length) > _GAP
                    or ref.offset + ref.length - begin > _READ_SPAN):  # fmt: skip
                yield run
                run = []
        run.append(ref)
    if run:
        yield run
