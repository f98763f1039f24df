"""The KMS stand-in: ``POST /v1/{cryptoKey}:encrypt`` and ``:decrypt`` as Cloud KMS serves them.

- One AES-256-GCM key per crypto key name, made at random on first use and held in memory only
  (a restart forgets every key, as a deleted key would).
- Ciphertext is ``0x01 | nonce(12) | sealed``, bound to the key name and the request's
  ``additionalAuthenticatedData``: another key, or altered bytes, fail with 400
  INVALID_ARGUMENT, as the real service answers.
- Request checksums (``plaintextCrc32c``, ``ciphertextCrc32c``,
  ``additionalAuthenticatedDataCrc32c``) are checked when present; responses carry the
  ``verified*`` flags and the checksums of what they return, int64 values as JSON strings.
- Errors are Google's JSON shape: ``{"error": {"code", "message", "status"}}``.

Standard library only (``cryptography`` for AES-GCM, a hangar dependency already).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import threading
from typing import Any
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from emulators.googleapi import ApiError, JsonHandler
from emulators.processes import StandInServer, ThreadedStandIn

_VERSION = b"\x01"
_NONCE = 12
_TAG = 16
_PROTECTION_SOFTWARE = 1
_PATH = re.compile(
    r"^/v1/(projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/:]+):(encrypt|decrypt)$"
)


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum Cloud KMS uses."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _invalid(message: str) -> ApiError:
    return ApiError(400, "INVALID_ARGUMENT", message)


class _Vault:
    """The in-memory keys, one per crypto key name."""

    def __init__(self) -> None:
        self._keys: dict[str, bytes] = {}
        self._disabled: set[str] = set()
        self._lock = threading.Lock()

    def disable(self, name: str, disabled: bool = True) -> None:
        with self._lock:
            (self._disabled.add if disabled else self._disabled.discard)(name)

    def key(self, name: str) -> AESGCM:
        """The key, made on first use; 400 FAILED_PRECONDITION while it is disabled, as the
        service answers for a key whose primary version is not enabled."""
        with self._lock:
            if name in self._disabled:
                raise ApiError(400, "FAILED_PRECONDITION", f"The request cannot be fulfilled. "
                                f"Resource {name}/cryptoKeyVersions/1 has value DISABLED in "
                                "field crypto_key_version.state.")  # fmt: skip
            if name not in self._keys:
                self._keys[name] = AESGCM.generate_key(bit_length=256)
            return AESGCM(self._keys[name])


def _b64(body: dict[str, Any], field: str, *, required: bool) -> bytes | None:
    raw = body.get(field)
    if raw is None or raw == "":
        if required:
            raise _invalid(f"{field} is required")
        return None if raw is None else b""
    if not isinstance(raw, str):
        raise _invalid(f"{field} must be a base64 string")
    try:
        return base64.b64decode(
            raw, altchars=b"-_" if ("-" in raw or "_" in raw) else None, validate=True
        )
    except (binascii.Error, ValueError):
        raise _invalid(f"{field} is not valid base64") from None


def _check_crc(body: dict[str, Any], field: str, data: bytes, data_field: str) -> bool:
    """True when the request carried ``field`` and it matches; 400 when it does not match."""
    raw = body.get(field)
    if raw is None:
        return False
    try:
        expected = int(raw)
    except (TypeError, ValueError):
        raise _invalid(f"{field} is not an int64") from None
    if expected != crc32c(data):
        raise _invalid(
            f"The checksum in field {field} did not match the data in field {data_field}."
        )
    return True


def _aad(name: str, extra: bytes) -> bytes:
    return name.encode() + b"\x00" + extra


def encrypt(vault: _Vault, name: str, body: dict[str, Any]) -> dict[str, Any]:
    plaintext = _b64(body, "plaintext", required=True) or b""
    if len(plaintext) > 64 * 1024:
        raise _invalid("plaintext is larger than 64 KiB")
    extra = _b64(body, "additionalAuthenticatedData", required=False) or b""
    verified_plain = _check_crc(body, "plaintextCrc32c", plaintext, "plaintext")
    verified_aad = _check_crc(
        body,
        "additionalAuthenticatedDataCrc32c",
        extra,
        "additional_authenticated_data",
    )
    nonce = secrets.token_bytes(_NONCE)
    ciphertext = (
        _VERSION + nonce + vault.key(name).encrypt(nonce, plaintext, _aad(name, extra))
    )
    return {
        "name": f"{name}/cryptoKeyVersions/1",
        "ciphertext": base64.b64encode(ciphertext).decode(),
        "ciphertextCrc32c": str(crc32c(ciphertext)),
        "verifiedPlaintextCrc32c": verified_plain,
        "verifiedAdditionalAuthenticatedDataCrc32c": verified_aad,
        "protectionLevel": _PROTECTION_SOFTWARE,
    }


def decrypt(vault: _Vault, name: str, body: dict[str, Any]) -> dict[str, Any]:
    ciphertext = _b64(body, "ciphertext", required=True) or b""
    extra = _b64(body, "additionalAuthenticatedData", required=False) or b""
    _check_crc(body, "ciphertextCrc32c", ciphertext, "ciphertext")
    _check_crc(
        body,
        "additionalAuthenticatedDataCrc32c",
        extra,
        "additional_authenticated_data",
    )
    if len(ciphertext) < 1 + _NONCE + _TAG or ciphertext[:1] != _VERSION:
        raise _invalid("Decryption failed: the ciphertext is invalid.")
    try:
        plaintext = vault.key(name).decrypt(
            ciphertext[1 : 1 + _NONCE], ciphertext[1 + _NONCE :], _aad(name, extra)
        )
    except InvalidTag:
        raise _invalid("Decryption failed: the ciphertext is invalid.") from None
    return {
        "plaintext": base64.b64encode(plaintext).decode(),
        "plaintextCrc32c": str(crc32c(plaintext)),
        "usedPrimary": True,
        "protectionLevel": _PROTECTION_SOFTWARE,
    }


class _Handler(JsonHandler):
    server: _Server

    def do_POST(self) -> None:
        try:
            match = _PATH.match(urlsplit(self.path).path)
            if match is None:
                raise ApiError(404, "NOT_FOUND", f"no such method: POST {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                raise _invalid("request body is not JSON") from None
            if not isinstance(body, dict):
                raise _invalid("request body must be a JSON object")
            name, method = match.group(1), match.group(2)
            handler = encrypt if method == "encrypt" else decrypt
            self.send_json(200, handler(self.server.vault, name, body))
        except ApiError as exc:
            self.send_api_error(exc)

    def do_GET(self) -> None:
        self.send_api_error(ApiError(404, "NOT_FOUND", "not found"))


class _Server(StandInServer):

    def __init__(self, address: tuple[str, int], verbose: bool) -> None:
        super().__init__(address, _Handler)
        self.vault = _Vault()
        self.verbose = verbose


class KmsStandIn(ThreadedStandIn):
    """The stand-in in a background thread: ``start()`` binds and serves, ``url`` is its base
    URL, ``stop()`` shuts it down; also a context manager."""

    label = "kms stand-in"

    def disable(self, key_name: str, disabled: bool = True) -> None:
        """Disable (or enable again) the crypto key ``projects/.../cryptoKeys/K``: encrypt and
        decrypt with it answer 400 FAILED_PRECONDITION until it is enabled."""
        server = self._server
        assert isinstance(server, _Server), "start the stand-in first"
        server.vault.disable(key_name, disabled)

    def make_server(self) -> _Server:
        return _Server((self.host, self.port), self.verbose)
