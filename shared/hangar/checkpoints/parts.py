"""Checkpoint parts in blobs: sealed under the checkpoint's data key, bound to their place.

A part lives at ``sessions/<session id>/<checkpoint id>/<part name>``. Each is sealed with
:mod:`hangar.keys.envelope` under the checkpoint's own data key, with associated data naming
the session, the checkpoint and the part, so a part copied to another place fails to open.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

from hangar.blobs import Blobs, Tally
from hangar.errors import DecryptionFailed
from hangar.keys import Keys
from hangar.keys.envelope import new_data_key, part_aad, seal, unseal
from hangar.models import Checkpoint, CheckpointPart


def part_key(session_id: str, checkpoint_id: str, name: str) -> str:
    return f"sessions/{session_id}/{checkpoint_id}/{name}"


def stored_at(checkpoint: Checkpoint, part: CheckpointPart) -> str:
    """The blob key a recorded part is stored at."""
    return part.key or part_key(checkpoint.session_id, checkpoint.id, part.name)


@dataclass(frozen=True)
class StoredPart:
    key: str
    size: int
    stored_size: int
    sha256: str


class CheckpointParts:
    """Seal, store, open and delete checkpoint parts."""

    def __init__(self, blobs: Blobs, keys: Keys) -> None:
        self.blobs = blobs
        self.keys = keys

    def new_key(self) -> tuple[bytes, str]:
        """A fresh data key and its wrapped form (base64) for the checkpoint record."""
        data_key = new_data_key()
        return data_key, base64.b64encode(self.keys.wrap(data_key)).decode()

    def data_key(self, checkpoint: Checkpoint) -> bytes:
        """Unwrap a checkpoint's data key; DecryptionFailed if it does not unwrap."""
        try:
            wrapped = base64.b64decode(checkpoint.wrapped_key, validate=True)
        except ValueError:
            raise DecryptionFailed(f"checkpoint {checkpoint.id}: wrapped key is not base64") from None
        return self.keys.unwrap(wrapped)

    def put(
        self,
        session_id: str,
        checkpoint_id: str,
        name: str,
        data_key: bytes,
        chunks: Iterable[bytes],
        key: str | None = None,
    ) -> StoredPart:
        """Seal and store one part (create-only) at ``key`` (by default its place under the
        checkpoint's folder). Returns its sizes and plaintext hash."""
        tally = Tally()
        key = key or part_key(session_id, checkpoint_id, name)
        aad = part_aad(session_id, checkpoint_id, name)
        stored = self.blobs.put(key, seal(data_key, aad, tally.through(chunks)), if_absent=True)
        return StoredPart(key=key, size=tally.size, stored_size=stored, sha256=tally.sha256)

    def read(self, checkpoint: Checkpoint, name: str, data_key: bytes | None = None) -> Iterator[bytes]:
        """Yield a part's plaintext. Raises BlobNotFound if it is missing and DecryptionFailed if
        it was altered or does not match the record's size and hash (checked after the last
        chunk, so the plaintext is only trustworthy once the iterator has finished)."""
        with self.opened(checkpoint, name, data_key) as chunks:
            yield from chunks

    @contextmanager
    def opened(
        self, checkpoint: Checkpoint, name: str, data_key: bytes | None = None
    ) -> Iterator[Iterator[bytes]]:
        """Open a part now and give its plaintext as an iterator of chunks, unsealed as they
        are taken (nothing is held whole). Raises BlobNotFound (missing) and DecryptionFailed
        (not in the record, or the key does not unwrap) on opening; the iterator raises
        DecryptionFailed at the first chunk that does not authenticate, before yielding more
        bytes than the record's size, and after the last chunk when the size or the hash
        differ from the record's: its plaintext is only trustworthy once it has finished."""
        part = checkpoint.part(name)
        if part is None:
            raise DecryptionFailed(f"checkpoint {checkpoint.id} has no part {name!r}")
        key = data_key if data_key is not None else self.data_key(checkpoint)
        with self.blobs.open(stored_at(checkpoint, part)) as stream:
            yield _plaintext(checkpoint, part, key, stream)

    def delete(self, checkpoint: Checkpoint) -> None:
        """Delete every stored part of a checkpoint (idempotent)."""
        for part in checkpoint.parts:
            self.blobs.delete(stored_at(checkpoint, part))

    def delete_keys(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.blobs.delete(key)


def _plaintext(checkpoint: Checkpoint, part: CheckpointPart, key: bytes,
               stream: BinaryIO) -> Iterator[bytes]:  # fmt: skip
    aad = part_aad(checkpoint.session_id, checkpoint.id, part.name)
    tally = Tally()
    for chunk in tally.through(unseal(key, aad, stream)):
        if tally.size > part.size:
            raise DecryptionFailed(f"checkpoint {checkpoint.id}: part {part.name} is longer "
                                   "than its record says")  # fmt: skip
        yield chunk
    if tally.size != part.size or tally.sha256 != part.sha256:
        raise DecryptionFailed(f"checkpoint {checkpoint.id}: part {part.name} does not match "
                               "its hash")  # fmt: skip
