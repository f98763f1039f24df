"""Verifying a V4-signed (query-string) Cloud Storage request, as GCS documents the signing
process, and GCS's XML error shape.

A request verifies when:

- ``X-Goog-Algorithm`` is ``GOOG4-RSA-SHA256``; ``X-Goog-Credential`` is
  ``EMAIL/YYYYMMDD/LOCATION/storage/goog4_request`` with the day of ``X-Goog-Date``;
- ``X-Goog-Date`` (``YYYYMMDD'T'HHMMSS'Z'``) is not in the future and ``X-Goog-Expires``
  (1 to 604800 seconds) has not run out;
- every header named in ``X-Goog-SignedHeaders`` (lowercase, sorted, ``host`` among them) is in
  the request, and no ``x-goog-*`` header is sent unsigned;
- the RSA-SHA256 signature (``X-Goog-Signature``, hex) of the string to sign verifies with the
  public key trusted for EMAIL. The string to sign is ``GOOG4-RSA-SHA256 \\n X-Goog-Date \\n
  scope \\n hex(sha256(canonical request))``; the canonical request is the method, the
  percent-encoded path, the sorted percent-encoded query without ``X-Goog-Signature``, the
  canonical headers (``name:trimmed value`` lines), the signed header names and
  ``UNSIGNED-PAYLOAD``.

Refusals raise :class:`XmlError` with the status and code GCS answers (400 ``ExpiredToken`` for
an expired URL, 403 ``SignatureDoesNotMatch``, ...). Standard library plus ``cryptography``.
"""

from __future__ import annotations

import binascii
import hashlib
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, unquote
from xml.sax.saxutils import escape

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

ALGORITHM = "GOOG4-RSA-SHA256"
MAX_EXPIRES = 7 * 24 * 3600
"""The longest validity GCS allows a V4 signed URL, in seconds."""
AUTH_PARAMS = ("X-Goog-Algorithm", "X-Goog-Credential", "X-Goog-Date", "X-Goog-Expires",
               "X-Goog-SignedHeaders", "X-Goog-Signature")  # fmt: skip
_DATE = re.compile(r"^\d{8}T\d{6}Z$")
_HEADER_NAME = re.compile(r"^[a-z0-9!#$%&'*+.^_`|~-]+$")


class XmlError(Exception):
    """A refusal in GCS's XML shape: HTTP ``status``, error ``code``, ``message`` and optional
    ``details`` (more ``<Element>text</Element>`` children, e.g. ``StringToSign``)."""

    def __init__(self, status: int, code: str, message: str, **details: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    def body(self) -> bytes:
        """``<?xml ...?><Error><Code/><Message/>...</Error>``, as GCS answers."""
        extra = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in self.details.items())
        return (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{escape(self.code)}</Code>"
                f"<Message>{escape(self.message)}</Message>{extra}</Error>").encode()  # fmt: skip


def access_denied(message: str) -> XmlError:
    return XmlError(403, "AccessDenied", message)


def _invalid(message: str) -> XmlError:
    return XmlError(400, "InvalidArgument", "Invalid argument.", Details=message)


@dataclass(frozen=True)
class Verified:
    """What a verified request was signed for."""

    account: str
    signed_headers: tuple[str, ...]
    headers: Mapping[str, str]
    """The signed headers' canonical values, by lowercase name."""


class Accounts:
    """The service accounts whose signatures are trusted, by email (thread-safe)."""

    def __init__(self) -> None:
        self._keys: dict[str, rsa.RSAPublicKey] = {}
        self._lock = threading.Lock()

    def trust(self, email: str, public_key_pem: str | bytes) -> None:
        """Trust RSA signatures by ``email`` made with the key whose public half is
        ``public_key_pem`` (PEM ``PUBLIC KEY``); replaces an earlier key for that email.
        Raises ValueError for a key that is not RSA."""
        data = public_key_pem.encode() if isinstance(public_key_pem, str) else public_key_pem
        key = serialization.load_pem_public_key(data)
        if not isinstance(key, rsa.RSAPublicKey):
            raise ValueError(f"the key for {email} is not an RSA public key")
        with self._lock:
            self._keys[email] = key

    def key(self, email: str) -> rsa.RSAPublicKey | None:
        with self._lock:
            return self._keys.get(email)


def split_query(query: str) -> list[tuple[str, str]]:
    """The query's ``(name, value)`` pairs, percent-decoded (``+`` stays ``+``, as GCS reads
    a signed URL); 400 for bytes that are not UTF-8."""
    pairs = []
    for item in query.split("&") if query else []:
        name, _, value = item.partition("=")
        try:
            pairs.append((unquote(name, errors="strict"), unquote(value, errors="strict")))
        except UnicodeDecodeError:
            raise _invalid("the query string is not UTF-8") from None
    return pairs


def canonical_query(pairs: Sequence[tuple[str, str]]) -> str:
    """Every pair but ``X-Goog-Signature``, percent-encoded, sorted by name then value."""
    encoded = sorted((quote(k, safe=""), quote(v, safe="")) for k, v in pairs
                     if k != "X-Goog-Signature")  # fmt: skip
    return "&".join(f"{k}={v}" for k, v in encoded)


def canonical_path(path: str) -> str:
    """The path as GCS signs it: decoded, then percent-encoded except ``/`` and unreserved."""
    return quote(path, safe="/~")


def _value(value: str) -> str:
    return " ".join(value.split())


def _auth_params(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in pairs:
        if name in AUTH_PARAMS:
            if name in found:
                raise _invalid(f"{name} appears more than once")
            found[name] = value
    missing = [name for name in AUTH_PARAMS if name not in found]
    if len(missing) == len(AUTH_PARAMS):
        raise access_denied("Anonymous caller does not have access to this object: the request "
                            "is not signed.")  # fmt: skip
    if missing:
        raise XmlError(400, "MissingSecurityHeader", "Your request was missing a required "
                       "header.", Details=f"missing query parameter {missing[0]}")  # fmt: skip
    return found


def _check_time(params: Mapping[str, str], now: datetime) -> str:
    """The credential scope's day; refuses a bad, future or expired date."""
    date = params["X-Goog-Date"]
    if not _DATE.match(date):
        raise _invalid(f"X-Goog-Date {date!r} is not YYYYMMDD'T'HHMMSS'Z'")
    try:
        signed_at = datetime.strptime(date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        expires = int(params["X-Goog-Expires"])
    except ValueError:
        raise _invalid("X-Goog-Date or X-Goog-Expires is not valid") from None
    if not 1 <= expires <= MAX_EXPIRES:
        raise _invalid(f"Max allowed expiration is seven days ({MAX_EXPIRES} seconds).")
    if now < signed_at:
        raise access_denied("Request is not yet valid.")
    if now > signed_at + timedelta(seconds=expires):
        raise XmlError(400, "ExpiredToken", "The provided token has expired.",
                       Details=f"Request signature expired at: "
                       f"{(signed_at + timedelta(seconds=expires)).isoformat()}")  # fmt: skip
    return date[:8]


def _signed_headers(params: Mapping[str, str], request_headers: Mapping[str, str]
                    ) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    names = params["X-Goog-SignedHeaders"].split(";")
    if names != sorted(set(names)) or not all(_HEADER_NAME.match(n) for n in names):
        raise _invalid("X-Goog-SignedHeaders must be distinct lowercase names, sorted")
    if "host" not in names:
        raise _invalid("X-Goog-SignedHeaders must include host")
    missing = [n for n in names if n not in request_headers]
    if missing:
        raise XmlError(400, "MissingSecurityHeader", "Your request was missing a required "
                       "header.", Details=f"signed header {missing[0]} was not sent")  # fmt: skip
    unsigned = sorted(n for n in request_headers if n.startswith("x-goog-") and n not in names)
    if unsigned:
        raise access_denied("There were headers present in the request which were not signed: "
                            + ", ".join(unsigned))  # fmt: skip
    return names, {n: _value(request_headers[n]) for n in names}


def verify(method: str, path: str, query: str, headers: Mapping[str, str], accounts: Accounts,
           now: datetime) -> Verified:  # fmt: skip
    """Verify a query-string-signed request; raises :class:`XmlError` when it does not verify.

    ``path`` is the decoded path (``/BUCKET/OBJECT``), ``query`` the raw query string,
    ``headers`` the request's headers by lowercase name (repeated ones joined with ``,``) and
    ``now`` an aware UTC time."""
    pairs = split_query(query)
    params = _auth_params(pairs)
    if params["X-Goog-Algorithm"] != ALGORITHM:
        raise _invalid(f"X-Goog-Algorithm must be {ALGORITHM}")
    scope_parts = params["X-Goog-Credential"].split("/")
    if len(scope_parts) != 5 or scope_parts[3:] != ["storage", "goog4_request"] or not all(
        scope_parts
    ):
        raise _invalid("X-Goog-Credential must be EMAIL/DATE/LOCATION/storage/goog4_request")
    email, day, location = scope_parts[:3]
    if day != _check_time(params, now):
        raise _invalid("the credential's date is not the day of X-Goog-Date")
    key = accounts.key(email)
    if key is None:
        raise access_denied(f"The service account {email} does not exist or is not trusted.")
    names, values = _signed_headers(params, headers)
    canonical = "\n".join([method, canonical_path(path), canonical_query(pairs),
                           "".join(f"{n}:{values[n]}\n" for n in names), ";".join(names),
                           "UNSIGNED-PAYLOAD"])  # fmt: skip
    to_sign = "\n".join([ALGORITHM, params["X-Goog-Date"],
                         f"{day}/{location}/storage/goog4_request",
                         hashlib.sha256(canonical.encode()).hexdigest()])  # fmt: skip
    mismatch = XmlError(403, "SignatureDoesNotMatch", "The request signature we calculated does "
                        "not match the signature you provided. Check your Google secret key and "
                        "signing method.", StringToSign=to_sign)  # fmt: skip
    try:
        signature = binascii.unhexlify(params["X-Goog-Signature"])
        key.verify(signature, to_sign.encode(), padding.PKCS1v15(), hashes.SHA256())
    except (binascii.Error, ValueError, InvalidSignature):
        raise mismatch from None
    return Verified(email, tuple(names), values)
