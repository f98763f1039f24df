"""Where a turn's message is kept: on the records that hold it (the session's start intent and
the turn) while it is at most :data:`INLINE_BYTES` of UTF-8, sealed in blobs above that, so that
a message up to ``HANGAR_MAX_MESSAGE_KB`` never outgrows a database record (a Firestore
document holds at most 1 MiB, every other field of the record included).

A sealed message is stored under a fresh data key (wrapped by the keys port) at
``sessions/<session>/messages/<turn>-<request>`` (:func:`message_key`, also its associated
data), so two sends racing for one turn store apart and the loser's is removed without
touching the winner's. The records then hold a :class:`~hangar.models.MessageRef` and, in
``message``, the message's opening (:data:`OPENING_CHARS` characters): what a handoff account
quotes of an earlier turn (it quotes less). The whole message is read back for the turn's
prompt, byte for byte, and for every surface that shows the turn.

Ordering: the blob is stored before any record names it, so no record ever names a blob that
is not there. A request that fails after storing it (a name taken, a busy session) removes it;
one whose process dies in between leaves a blob that no record names, which is harmless and
not reaped: nobody can read it (its data key died with the process, never wrapped into a
record), it is at most ``HANGAR_MAX_MESSAGE_KB``, and deleting the session, when it exists,
removes it with the session's other messages (:meth:`MessageStore.delete_all`).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass

from hangar.blobs import Blobs
from hangar.errors import DecryptionFailed
from hangar.keys import Keys
from hangar.keys.envelope import new_data_key, seal_bytes, unseal_bytes
from hangar.models import MessageRef

INLINE_BYTES = 64 << 10
"""The largest message kept on the records themselves, in bytes of UTF-8."""
OPENING_CHARS = 4096
"""How much of a sealed message the records keep, in characters."""


def message_key(session_id: str, n: int, request: str) -> str:
    """Where the message of turn ``n`` that ``request`` asked for is sealed."""
    return f"sessions/{session_id}/messages/{n}-{request}"


@dataclass(frozen=True)
class Kept:
    """A message as the records hold it: all of it with no ``ref``, else its opening and
    where the whole is sealed."""

    message: str
    ref: MessageRef | None


class MessageStore:
    """Keeps, reads and deletes the messages of a session's turns."""

    def __init__(self, blobs: Blobs, keys: Keys) -> None:
        self.blobs = blobs
        self.keys = keys

    def keep(self, session_id: str, n: int, message: str, inline: int = INLINE_BYTES,
             opening: int = OPENING_CHARS) -> Kept:  # fmt: skip
        """``message`` as the records of turn ``n`` are to hold it: inline up to ``inline``
        bytes, else sealed into blobs first, the records keeping its first ``opening``
        characters (the caller stores the records after, and calls :meth:`release` if it
        cannot)."""
        data = message.encode()  # the service refuses a message UTF-8 cannot carry
        if len(data) <= inline:
            return Kept(message, None)
        key = message_key(session_id, n, secrets.token_hex(4))
        data_key = new_data_key()
        self.blobs.put(key, seal_bytes(data_key, key.encode(), data))
        ref = MessageRef(blob=key, key=base64.b64encode(self.keys.wrap(data_key)).decode(),
                         size=len(data), sha256=hashlib.sha256(data).hexdigest())  # fmt: skip
        return Kept(message[:opening], ref)

    def text(self, message: str, ref: MessageRef | None) -> str:
        """The whole message a record holds as ``message`` and ``ref``. DecryptionFailed when
        its blob was altered or does not match the record; BlobNotFound when it is gone."""
        if ref is None:
            return message
        data_key = self.keys.unwrap(base64.b64decode(ref.key))
        data = unseal_bytes(data_key, ref.blob.encode(), self.blobs.get(ref.blob))
        if len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.sha256:
            raise DecryptionFailed(f"message {ref.blob} does not match its record")
        return data.decode()

    def release(self, kept: Kept) -> None:
        """Remove what :meth:`keep` sealed (the request failed before a record named it)."""
        if kept.ref is not None:
            self.blobs.delete(kept.ref.blob)

    def delete_all(self, session_id: str) -> None:
        """Remove every sealed message of the session (it is deleted), orphans included."""
        for key in self.blobs.list(f"sessions/{session_id}/messages/"):
            self.blobs.delete(key)
