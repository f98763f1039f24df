"""The IAM Credentials stand-in: ``POST /v1/projects/-/serviceAccounts/{email}:signBlob`` as the
IAM Service Account Credentials API serves it.

- Request ``{"payload": base64, "delegates": ["projects/-/serviceAccounts/..."]}``, answer
  ``{"keyId", "signedBlob"}`` (base64): an RSASSA-PKCS1-v1_5 SHA-256 signature of the payload
  with the account's key, the signature a V4 signed URL carries.
- One RSA key per service account, held in memory: made when the account is added
  (:meth:`IamStandIn.add_account`), or the key given there (the key of a key file a test made).
  :meth:`IamStandIn.public_key_pem` gives its public half to a verifier.
- An account never added is 404 NOT_FOUND; a project other than the ``-`` wildcard, a missing
  or non-base64 payload, or a delegate not named ``projects/-/serviceAccounts/X`` is 400
  INVALID_ARGUMENT. A delegate must be an added account too (404 otherwise); delegation is not
  checked further (no roles here).
- Errors are Google's JSON shape: ``{"error": {"code", "message", "status"}}``.

Standard library and ``cryptography`` only.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

from emulators.googleapi import ApiError, JsonHandler
from emulators.processes import StandInServer, ThreadedStandIn

from .keys import ServiceAccountKey

_PATH = re.compile(r"^/v1/projects/([^/]+)/serviceAccounts/([^/:]+):signBlob$")
_DELEGATE = re.compile(r"^projects/-/serviceAccounts/([^/:]+)$")


def _invalid(message: str) -> ApiError:
    return ApiError(400, "INVALID_ARGUMENT", message)


class _Accounts:
    """The service accounts the stand-in knows, one key each."""

    def __init__(self) -> None:
        self._keys: dict[str, ServiceAccountKey] = {}
        self._lock = threading.Lock()

    def add(self, email: str, private_key_pem: bytes | None) -> ServiceAccountKey:
        given = None if private_key_pem is None else ServiceAccountKey.of(email, private_key_pem)
        with self._lock:
            if given is None and email in self._keys:
                return self._keys[email]
            key = given or ServiceAccountKey.generate(email)
            self._keys[email] = key
            return key

    def key(self, email: str) -> ServiceAccountKey:
        with self._lock:
            found = self._keys.get(email)
        if found is None:
            raise ApiError(404, "NOT_FOUND", f"Not found; Gaia id not found for email {email}")
        return found


def sign_blob(accounts: _Accounts, project: str, email: str, body: dict[str, Any]) -> dict[str, Any]:
    if project != "-":
        raise _invalid("The - wildcard character is required in the resource name; replacing "
                       "it with a project ID is invalid.")  # fmt: skip
    delegates = body.get("delegates", [])
    if not isinstance(delegates, list) or not all(isinstance(d, str) for d in delegates):
        raise _invalid("delegates must be a list of strings")
    for delegate in delegates:
        match = _DELEGATE.match(delegate)
        if match is None:
            raise _invalid(f"Invalid form of delegate {delegate!r}: expected "
                           "projects/-/serviceAccounts/{ACCOUNT_EMAIL_OR_UNIQUEID}")  # fmt: skip
        accounts.key(match.group(1))
    raw = body.get("payload")
    if not isinstance(raw, str) or not raw:
        raise _invalid("payload is required")
    try:
        payload = base64.b64decode(raw, altchars=b"-_" if ("-" in raw or "_" in raw) else None,
                                   validate=True)  # fmt: skip
    except (binascii.Error, ValueError):
        raise _invalid("Invalid value at 'payload' (TYPE_BYTES): not valid base64") from None
    key = accounts.key(email)
    return {"keyId": key.key_id, "signedBlob": base64.b64encode(key.sign(payload)).decode()}


class _Handler(JsonHandler):
    server: _Server

    def do_POST(self) -> None:
        try:
            match = _PATH.match(unquote(urlsplit(self.path).path))
            if match is None:
                raise ApiError(404, "NOT_FOUND", f"no such method: POST {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                raise _invalid("request body is not JSON") from None
            if not isinstance(body, dict):
                raise _invalid("request body must be a JSON object")
            answer = sign_blob(self.server.accounts, match.group(1), match.group(2), body)
            self.send_json(200, answer)
        except ApiError as exc:
            self.send_api_error(exc)

    def do_GET(self) -> None:
        self.send_api_error(ApiError(404, "NOT_FOUND", "not found"))


class _Server(StandInServer):

    def __init__(self, address: tuple[str, int], verbose: bool) -> None:
        super().__init__(address, _Handler)
        self.accounts = _Accounts()
        self.verbose = verbose


class IamStandIn(ThreadedStandIn):
    """The stand-in in a background thread: ``start()`` binds and serves, ``url`` is its base
    URL (the client's ``api_endpoint``), ``stop()`` shuts it down; also a context manager.
    Accounts are those named at construction plus those added once it is started; a
    restart forgets every key."""

    label = "iam stand-in"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, verbose: bool = False,
                 accounts: Iterable[str] = ()) -> None:  # fmt: skip
        super().__init__(host, port, verbose=verbose)
        self.accounts = tuple(accounts)
        """Accounts added (with new keys) whenever the server is made."""

    def _accounts(self) -> _Accounts:
        server = self._server
        if not isinstance(server, _Server):
            raise RuntimeError("start the iam stand-in first")
        return server.accounts

    def add_account(self, email: str, private_key_pem: bytes | None = None) -> ServiceAccountKey:
        """Make ``email`` a service account ``signBlob`` signs for: with ``private_key_pem``
        (RSA, PEM) that key, replacing any it had; without, its key if it has one, else a new
        one. Returns the key (its id and public half for a verifier)."""
        return self._accounts().add(email, private_key_pem)

    def public_key_pem(self, email: str) -> bytes:
        """The public key of ``email`` (SubjectPublicKeyInfo PEM); KeyError if not added."""
        try:
            return self._accounts().key(email).public_key_pem
        except ApiError:
            raise KeyError(email) from None

    def make_server(self) -> _Server:
        server = _Server((self.host, self.port), self.verbose)
        for email in self.accounts:
            server.accounts.add(email, None)
        return server
