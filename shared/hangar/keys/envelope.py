"""Sealing data under a data key: streamed AES-256-GCM with bound associated data.

Every checkpoint gets a fresh 32-byte data key (wrapped by the keys port and kept on the
checkpoint record). Each part is sealed as a stream of chunks so that neither side holds a
whole part in memory::

    header  = b"HGR" + version(1) + nonce_prefix(8)                      12 bytes
    chunk_i = AES-GCM(key, nonce_prefix + i(3 bytes) + last(1 byte), plaintext_i, aad)

Plaintext chunks are :data:`CHUNK` bytes except the last, which is flagged in its nonce. So a
reordered, dropped, truncated or extended stream fails, and so does any part sealed with another
``aad``: the associated data names the session, the checkpoint and the part
(:func:`part_aad`), which is what stops a part being swapped between checkpoints or sessions.
"""

from __future__ import annotations

import io
import secrets
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from hangar.errors import DecryptionFailed

MAGIC = b"HGR\x01"
CHUNK = 1 << 20
_TAG = 16
_MAX_CHUNKS = 1 << 24


def new_data_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def part_aad(session_id: str, checkpoint_id: str, part: str) -> bytes:
    return f"hangar/part\x00{session_id}\x00{checkpoint_id}\x00{part}".encode()


def _nonce(prefix: bytes, index: int, last: bool) -> bytes:
    if index >= _MAX_CHUNKS:
        raise ValueError("stream too long to seal")
    return prefix + index.to_bytes(3, "big") + (b"\x01" if last else b"\x00")


def _rechunk(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """``chunks`` cut again into CHUNK-byte pieces, then a last shorter one (maybe empty). A
    piece that already is one (a stream read CHUNK at a time) passes on without a copy."""
    buf = bytearray()
    for piece in chunks:
        if not buf and len(piece) == CHUNK:
            yield piece
            continue
        buf += piece
        while len(buf) >= CHUNK:
            yield bytes(buf[:CHUNK])
            del buf[:CHUNK]
    yield bytes(buf)


def seal(data_key: bytes, aad: bytes, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Yield the sealed stream of the plaintext ``chunks`` (any sizes)."""
    aead = AESGCM(data_key)
    prefix = secrets.token_bytes(8)
    yield MAGIC + prefix
    pending: bytes | None = None
    index = 0
    for chunk in _rechunk(chunks):
        if pending is not None:
            yield aead.encrypt(_nonce(prefix, index, False), pending, aad)
            index += 1
        pending = chunk
    # _rechunk always yields at least one (possibly empty) chunk, so pending is set.
    assert pending is not None
    yield aead.encrypt(_nonce(prefix, index, True), pending, aad)


def _read_full(stream: BinaryIO, size: int) -> bytes:
    """Read ``size`` bytes, or fewer only at the end: streams may return short reads."""
    buf = bytearray()
    while len(buf) < size:
        chunk = stream.read(size - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def unseal(data_key: bytes, aad: bytes, stream: BinaryIO) -> Iterator[bytes]:
    """Yield the plaintext of a sealed stream, raising DecryptionFailed at the first chunk that
    does not authenticate. Plaintext is only trustworthy once the iterator has finished."""
    header = _read_full(stream, len(MAGIC) + 8)
    if len(header) != len(MAGIC) + 8 or header[: len(MAGIC)] != MAGIC:
        raise DecryptionFailed("not a sealed hangar stream")
    prefix = header[len(MAGIC) :]
    aead = AESGCM(data_key)
    size = CHUNK + _TAG
    current = _read_full(stream, size)
    index = 0
    while True:
        following = _read_full(stream, size) if len(current) == size else b""
        last = not following
        try:
            yield aead.decrypt(_nonce(prefix, index, last), current, aad)
        except InvalidTag:
            raise DecryptionFailed("sealed data was altered, truncated or bound elsewhere") from None
        if last:
            return
        current = following
        index += 1


def seal_bytes(data_key: bytes, aad: bytes, data: bytes) -> bytes:
    return b"".join(seal(data_key, aad, [data]))


def unseal_bytes(data_key: bytes, aad: bytes, sealed: bytes) -> bytes:
    return b"".join(unseal(data_key, aad, io.BytesIO(sealed)))
