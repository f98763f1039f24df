"""The blobs port: object storage for checkpoint parts, run logs and artifacts.

Contract for every backend (checked by :mod:`hangar.testing.blobs`):

- Keys are relative, ``/``-separated paths of safe segments (no empty, ``.`` or ``..``
  segment, no leading ``/``); anything else raises :class:`~hangar.errors.InvalidInput`.
- ``put`` is atomic: a reader sees the old object, the whole new one, or none, never a part.
  With ``if_absent=True`` it raises :class:`~hangar.errors.AlreadyExists` when the key exists
  and changes nothing. Data is bytes or an iterable of byte chunks (streamed, never all held).
- ``open`` streams an object; ``get`` reads it whole; ``read_range`` reads a slice of it in
  one request. A missing key raises :class:`~hangar.errors.BlobNotFound`.
- ``delete`` is idempotent. ``list`` returns keys under a prefix, sorted.

A backend may also sign URLs for its objects (:mod:`hangar.blobs.signing`: ``url_signer``,
``SignsUrls``, ``SignedRequest``, ``BlobStat``, re-exported here).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import BinaryIO, Protocol

from hangar.backends import pick
from hangar.blobs.signing import BlobStat as BlobStat
from hangar.blobs.signing import SignedRequest as SignedRequest
from hangar.blobs.signing import SignsUrls as SignsUrls
from hangar.blobs.signing import url_signer as url_signer
from hangar.config import Settings
from hangar.errors import InvalidInput


class Blobs(Protocol):
    def put(self, key: str, data: bytes | Iterable[bytes], *, if_absent: bool = False) -> int:
        """Store the object; returns its size in bytes."""
        ...

    def open(self, key: str) -> AbstractContextManager[BinaryIO]: ...

    def get(self, key: str) -> bytes: ...

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """The bytes ``[start, start + length)`` of the object, in one request: all ``length``
        of them, fewer only when the object ends sooner (none when it ends at or before
        ``start``). BlobNotFound if the key is missing (a zero ``length`` included);
        InvalidInput if ``start`` or ``length`` is negative."""
        ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...

    def list(self, prefix: str = "") -> list[str]: ...


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe blob key, else raise InvalidInput."""
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") for p in parts) or "\x00" in key:
        raise InvalidInput(f"invalid blob key {key!r}", key=key)
    return key


def check_range(key: str, start: int, length: int) -> None:
    """Raise InvalidInput unless ``start`` and ``length`` are both at least 0."""
    if start < 0 or length < 0:
        raise InvalidInput(f"invalid range of blob {key!r}: start {start}, length {length}",
                           key=key, start=start, length=length)  # fmt: skip


class Tally:
    """Counts and hashes (SHA-256) the chunks that pass through :meth:`through`: what a sealed
    object records about its plaintext when stored, and checks when read back."""

    def __init__(self) -> None:
        self.size = 0
        self._digest = hashlib.sha256()

    def through(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self._digest.update(chunk)
            self.size += len(chunk)
            yield chunk

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()


def iter_chunks(stream: BinaryIO, size: int = 1 << 20) -> Iterator[bytes]:
    """Read a binary stream in chunks of at most ``size`` bytes."""
    while chunk := stream.read(size):
        yield chunk


def _open_file(url: str, settings: Settings) -> Blobs:
    from hangar.blobs.local import LocalBlobs

    return LocalBlobs.from_url(url)


def _open_gcs(url: str, settings: Settings) -> Blobs:
    from hangar.blobs.gcs import GcsBlobs

    return GcsBlobs.from_url(url, settings)


_BACKENDS: dict[str, Callable[[str, Settings], Blobs]] = {"file": _open_file, "gs": _open_gcs}


def open_blobs(url: str, settings: Settings) -> Blobs:
    """Open the backend the URL's scheme names; InvalidSettings for an unknown scheme."""
    return pick(_BACKENDS, url, "HANGAR_SESSION_STORE")(url, settings)
