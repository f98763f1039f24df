"""The credentials that sign GCS V4 URLs, from the settings:

1. ``HANGAR_SIGNING_KEY_FILE``: a service account key file; its private key signs, here.
2. else ``HANGAR_SIGNING_SERVICE_ACCOUNT``: that account's Google-held key signs, through the
   IAM Credentials API's ``signBlob`` (the caller needs ``iam.serviceAccounts.signBlob`` on the
   account: on Cloud Run, the function's own account on itself), called with the official
   ``google-cloud-iam`` client. With ``HANGAR_IAM_ENDPOINT`` it talks REST with anonymous
   credentials to that endpoint (the stand-in in ``emulators/iam``), as the other stand-ins are
   reached. google-auth's own IAM signer names Google's endpoint and cannot be pointed there.
3. else none: no signed URLs.

This module imports google-auth at import time: import it only when signing.
"""

from __future__ import annotations

import threading
from typing import Any

from google.auth import credentials as auth_credentials
from google.auth import crypt
from google.auth.exceptions import GoogleAuthError

from hangar.config import Settings
from hangar.errors import InvalidSettings

_TIMEOUT = 30.0


class IamSigner(crypt.Signer):
    """Signs bytes with ``signBlob`` for ``email`` (RSA SHA-256, the account's Google-held key).
    The client is built on first use. Vendor errors pass through: the caller maps them."""

    def __init__(self, email: str, endpoint: str | None) -> None:
        self.email = email
        self.endpoint = endpoint
        self._client: Any = None
        self._key_id: str | None = None
        self._lock = threading.Lock()

    @property
    def key_id(self) -> str | None:
        """The id of the key that made the last signature (None before the first)."""
        return self._key_id

    def _iam(self) -> Any:
        with self._lock:
            if self._client is None:
                from google.cloud import iam_credentials_v1

                if self.endpoint:
                    from google.api_core.client_options import ClientOptions

                    self._client = iam_credentials_v1.IAMCredentialsClient(
                        credentials=auth_credentials.AnonymousCredentials(),  # type: ignore[no-untyped-call]
                        transport="rest",
                        client_options=ClientOptions(api_endpoint=self.endpoint),
                    )
                else:
                    self._client = iam_credentials_v1.IAMCredentialsClient()
            return self._client

    def sign(self, message: str | bytes) -> bytes:
        payload = message.encode() if isinstance(message, str) else message
        response = self._iam().sign_blob(
            request={"name": f"projects/-/serviceAccounts/{self.email}", "payload": payload},
            timeout=_TIMEOUT,
        )
        self._key_id = str(response.key_id) or None
        return bytes(response.signed_blob)


class IamSigning(auth_credentials.Signing):
    """Signing credentials for ``email`` through :class:`IamSigner`: what
    ``Blob.generate_signed_url`` takes as ``credentials``."""

    def __init__(self, email: str, endpoint: str | None) -> None:
        self._signer = IamSigner(email, endpoint)

    def sign_bytes(self, message: str | bytes) -> bytes:
        return self._signer.sign(message)

    @property
    def signer_email(self) -> str:
        return self._signer.email

    @property
    def signer(self) -> IamSigner:
        return self._signer


def signing_credentials(settings: Settings) -> auth_credentials.Signing | None:
    """The credentials the settings name (see the module), or None. A key file that cannot be
    read or is not a service account key raises InvalidSettings naming
    ``HANGAR_SIGNING_KEY_FILE``."""
    if settings.signing_key_file is not None:
        from google.oauth2 import service_account

        path = settings.signing_key_file
        try:
            return service_account.Credentials.from_service_account_file(str(path))  # type: ignore[no-untyped-call,no-any-return]
        except (OSError, ValueError, KeyError, GoogleAuthError) as exc:
            raise InvalidSettings(
                f"HANGAR_SIGNING_KEY_FILE: cannot read a service account key from {path}: "
                f"{type(exc).__name__}: {exc}", setting="HANGAR_SIGNING_KEY_FILE",
            ) from None
    if settings.signing_service_account:
        return IamSigning(settings.signing_service_account, settings.iam_endpoint)
    return None
