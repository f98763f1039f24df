"""Signed URLs: an optional capability of a blobs backend, so that a sandbox reads and writes
objects itself, each URL good for one object, one method and a few minutes.

- :meth:`SignsUrls.sign_put` grants a create-only upload: the request must carry the header
  ``x-goog-if-generation-match: 0``, which is signed in (a request without it, or with another
  value, does not match the signature), so an object can be written once and never replaced
  through the URL. The headers the request must send are in :attr:`SignedRequest.headers`.
- :meth:`SignsUrls.sign_get` grants reads of one object (``Range`` requests included).
- :meth:`SignsUrls.stat` says what was written (size and MD5), without reading the bytes: what
  the control plane checks against what a sandbox reports before it records anything.

:func:`url_signer` gives a backend's signer, or None where it cannot sign (the local folder
backend; ``gs://`` without signing credentials). Nothing here imports a cloud library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from hangar.blobs import Blobs

CREATE_ONLY = {"x-goog-if-generation-match": "0"}
"""The header a create-only upload must send (signed in)."""

MAX_SECONDS = 7 * 24 * 3600
"""The longest a V4 signed URL may be valid (GCS refuses longer)."""


@dataclass(frozen=True)
class SignedRequest:
    """What a sandbox sends: ``method`` to ``url``, with every one of ``headers`` (names lower
    case, values exactly as given). The URL carries its own authorization and expiry."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BlobStat:
    """An object as stored: ``size`` in bytes and ``md5``, the lowercase hex MD5 of its bytes."""

    size: int
    md5: str


class SignsUrls(Protocol):
    """A backend that signs URLs for its own objects (keys as the blobs port takes them)."""

    def sign_put(self, key: str, seconds: int) -> SignedRequest:
        """A create-only PUT of ``key`` valid for ``seconds`` (1 to :data:`MAX_SECONDS`): its
        headers are :data:`CREATE_ONLY`, signed in, so a second upload to the URL (or to an
        existing key) is refused. InvalidInput for a bad key or duration; BackendError when the
        signing service fails or refuses. Makes no request to the store."""
        ...

    def sign_get(self, key: str, seconds: int) -> SignedRequest:
        """A GET of ``key`` valid for ``seconds``; no headers required. Errors as
        :meth:`sign_put`; the key need not exist yet."""
        ...

    def stat(self, key: str) -> BlobStat:
        """Size and MD5 of ``key`` from its metadata (no download); BlobNotFound if missing."""
        ...


@runtime_checkable
class _OffersSigning(Protocol):
    def url_signer(self) -> SignsUrls | None: ...


def url_signer(blobs: Blobs) -> SignsUrls | None:
    """``blobs``'s signer, or None when that backend, as configured, cannot sign URLs. Cheap:
    credentials are checked when the first URL is signed (InvalidSettings then if they are
    unusable)."""
    if isinstance(blobs, _OffersSigning):
        return blobs.url_signer()
    return None
