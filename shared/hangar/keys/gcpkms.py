"""Keys in Cloud KMS (``gcpkms://projects/P/locations/L/keyRings/R/cryptoKeys/K``).

A data key is wrapped by the KMS ``encrypt`` method and unwrapped by ``decrypt``; the key
material never leaves the service. Both calls carry CRC-32C checksums both ways, checked as
Google recommends (the request checksum verified by the service, the response checksum here), so
corruption in transit is caught rather than stored.

When ``settings.kms_endpoint`` is set (``HANGAR_KMS_ENDPOINT``) the client talks REST with
anonymous credentials to that endpoint (the stand-in in ``emulators/kms``); otherwise it uses
the default credentials against the real service. The client is built on first use and the
google libraries are imported only then: importing this module costs nothing.

Errors: a wrapped key that was altered or made by another key raises DecryptionFailed; any other
service or transport failure raises BackendError. google.api_core exceptions never escape.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from hangar.config import Settings
from hangar.gcloud import translate, vendor_errors
from hangar.errors import BackendError, DecryptionFailed, InvalidSettings

_SETTING = "HANGAR_KEYS"
_SCHEME = "gcpkms://"
_KEY_NAME = re.compile(
    r"projects/[A-Za-z0-9.:_-]+/locations/[A-Za-z0-9_-]+"
    r"/keyRings/[A-Za-z0-9_-]{1,63}/cryptoKeys/[A-Za-z0-9_-]{1,63}"
)
_TIMEOUT = 30.0


def _crc32c(data: bytes) -> int:
    import google_crc32c  # type: ignore[import-untyped,unused-ignore]

    return int(google_crc32c.value(data))


def _refuses_ciphertext(exc: BaseException) -> bool:
    """True for the service's INVALID_ARGUMENT: over gRPC an ``InvalidArgument``; over REST a
    400 ``BadRequest`` whose body says ``"status": "INVALID_ARGUMENT"`` (a disabled key's
    FAILED_PRECONDITION is also a 400 there, and is a backend failure, not a bad ciphertext)."""
    from google.api_core import exceptions as api_exceptions

    if isinstance(exc, api_exceptions.InvalidArgument):
        return True
    if type(exc) is not api_exceptions.BadRequest:
        return False
    response = getattr(exc, "response", None)
    try:
        status = (
            response.json()["error"].get("status") if response is not None else None
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        status = None
    return status in (None, "INVALID_ARGUMENT")


class GcpKmsKeys:
    """Wraps data keys with one Cloud KMS crypto key. Thread-safe; calls are not idempotent
    (each wrap gives new bytes) but any wrapped key unwraps as long as the key version lives."""

    def __init__(self, key_name: str, endpoint: str | None = None) -> None:
        self.key_name = key_name
        self.endpoint = endpoint
        self._client: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, settings: Settings) -> GcpKmsKeys:
        """Parse the key URL; InvalidSettings(setting="HANGAR_KEYS") when it names no crypto key."""
        name = url[len(_SCHEME) :] if url.startswith(_SCHEME) else ""
        if not _KEY_NAME.fullmatch(name):
            raise InvalidSettings(
                f"{_SETTING}: expected gcpkms://projects/P/locations/L/keyRings/R/cryptoKeys/K, "
                f"got {url!r}",
                setting=_SETTING,
            )
        return cls(name, settings.kms_endpoint)

    def _kms(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._build_client()
            return self._client

    def _build_client(self) -> Any:
        from google.cloud import kms

        try:
            if self.endpoint:
                from google.api_core.client_options import ClientOptions
                from google.auth.credentials import AnonymousCredentials

                return kms.KeyManagementServiceClient(
                    credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                    transport="rest",
                    client_options=ClientOptions(api_endpoint=self.endpoint),
                )
            return kms.KeyManagementServiceClient()
        except vendor_errors() as exc:
            raise translate(exc, "cannot build the Cloud KMS client") from None

    def wrap(self, data_key: bytes) -> bytes:
        """Encrypt ``data_key`` with the crypto key; BackendError on any failure, including a
        checksum mismatch either way."""

        try:
            response = self._kms().encrypt(
                request={
                    "name": self.key_name,
                    "plaintext": data_key,
                    "plaintext_crc32c": _crc32c(data_key),
                },
                timeout=_TIMEOUT,
            )
        except vendor_errors() as exc:
            raise translate(exc, f"Cloud KMS encrypt with {self.key_name} failed") from None
        ciphertext = bytes(response.ciphertext)
        if not response.verified_plaintext_crc32c:
            raise BackendError(
                "Cloud KMS did not verify the plaintext checksum of the encrypt request"
            )
        if int(response.ciphertext_crc32c) != _crc32c(ciphertext):
            raise BackendError(
                "Cloud KMS encrypt response is corrupted (ciphertext checksum)"
            )
        version = str(response.name)
        if version != self.key_name and not version.startswith(self.key_name + "/"):
            raise BackendError(
                f"Cloud KMS encrypted with {version!r}, not {self.key_name!r}"
            )
        return ciphertext

    def unwrap(self, wrapped: bytes) -> bytes:
        """Decrypt a wrapped key; DecryptionFailed when the service refuses the ciphertext
        (altered, or wrapped by another key), BackendError for any other failure."""

        try:
            response = self._kms().decrypt(
                request={
                    "name": self.key_name,
                    "ciphertext": wrapped,
                    "ciphertext_crc32c": _crc32c(wrapped),
                },
                timeout=_TIMEOUT,
            )
        except vendor_errors() as exc:
            if _refuses_ciphertext(exc):
                message = getattr(exc, "message", str(exc))
                raise DecryptionFailed(
                    f"wrapped key does not unwrap with {self.key_name}: {message}"
                ) from None
            raise translate(exc, f"Cloud KMS decrypt with {self.key_name} failed") from None
        plaintext = bytes(response.plaintext)
        if int(response.plaintext_crc32c) != _crc32c(plaintext):
            raise BackendError(
                "Cloud KMS decrypt response is corrupted (plaintext checksum)"
            )
        return plaintext
