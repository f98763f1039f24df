"""Keys from a local key file (``local:///ABS/PATH/vault.key``).

The file holds 32 random bytes, made with mode 0600 on first use (created exclusively, so two
processes starting together agree on one key). A data key is wrapped with AES-256-GCM under it.
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from hangar.errors import BackendError, DecryptionFailed, InvalidSettings
from hangar.private import private_dirs

_VERSION = b"\x01"
_AAD = b"hangar/data-key"
_KEY_BYTES = 32


class LocalKeys:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._key: bytes | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str) -> LocalKeys:
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise InvalidSettings(
                f"HANGAR_KEYS: expected local:///ABSOLUTE/PATH, got {url!r}", setting="HANGAR_KEYS"
            )
        return cls(Path(unquote(parts.path)))

    def _kek(self) -> AESGCM:
        with self._lock:
            if self._key is None:
                self._key = self._load_or_create()
            return AESGCM(self._key)

    def _load_or_create(self) -> bytes:
        try:
            private_dirs(self.path.parent)
            if not self.path.exists():
                # Written whole beside the key file, then linked into place: a process starting
                # at the same moment sees no key or the whole key, and both end on one key.
                tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    with os.fdopen(fd, "wb") as out:
                        out.write(secrets.token_bytes(_KEY_BYTES))
                        out.flush()
                        os.fsync(out.fileno())
                    try:
                        os.link(tmp, self.path)
                    except FileExistsError:
                        pass
                finally:
                    os.unlink(tmp)
            key = self.path.read_bytes()
        except OSError as exc:
            raise BackendError(f"cannot use key file {self.path}: {exc.strerror}") from None
        if len(key) != _KEY_BYTES:
            raise BackendError(f"key file {self.path} is not a {_KEY_BYTES}-byte key")
        return key

    def wrap(self, data_key: bytes) -> bytes:
        nonce = secrets.token_bytes(12)
        return _VERSION + nonce + self._kek().encrypt(nonce, data_key, _AAD)

    def unwrap(self, wrapped: bytes) -> bytes:
        if len(wrapped) < 1 + 12 + 16 or wrapped[:1] != _VERSION:
            raise DecryptionFailed("wrapped key is malformed")
        try:
            return self._kek().decrypt(wrapped[1:13], wrapped[13:], _AAD)
        except InvalidTag:
            raise DecryptionFailed("wrapped key does not unwrap with this key") from None
