"""Blobs in Google Cloud Storage (``gs://BUCKET/PREFIX``), through the official client.

- Objects up to 8 MiB go up in one request; a create-only put passes ``if_generation_match=0``,
  so the service refuses it atomically when the key exists.
- Larger objects are streamed in a resumable upload (8 MiB per request, never held whole). The
  object appears only when the upload is finalised, so a source that fails midway leaves none.
  A create-only put above 8 MiB first checks that the key is absent, then uploads with
  ``if_generation_match=0``: the precondition is enforced where the service supports it on
  resumable uploads (GCS does; the fake-gcs-server emulator does not, so there only the
  existence check guards it).
- When ``STORAGE_EMULATOR_HOST`` is set the client talks to that emulator with anonymous
  credentials and a placeholder project (``GOOGLE_CLOUD_PROJECT`` if set).
- Signed URLs (:mod:`hangar.blobs.signing`): V4, for the host ``HANGAR_SIGNED_URL_ENDPOINT``,
  signed by the credentials the settings name (:mod:`hangar.blobs.signers`); without any,
  :meth:`GcsBlobs.url_signer` is None. A signing service's failure is a BackendError.

The google libraries are imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any, BinaryIO, cast
from urllib.parse import urlsplit

from hangar.blobs import check_key, check_range
from hangar.blobs.signing import (CREATE_ONLY, MAX_SECONDS, BlobStat, SignedRequest,
                                  SignsUrls)  # fmt: skip
from hangar.config import Settings
from hangar.errors import AlreadyExists, BackendError, BlobNotFound, InvalidInput, InvalidSettings
from hangar.gcloud import translate, vendor_errors

SINGLE_REQUEST_LIMIT = 8 * 1024 * 1024
"""Objects up to this size go up in one request; larger ones in a resumable upload."""

_SETTING = "HANGAR_SESSION_STORE"


@contextlib.contextmanager
def _mapped(key: str, action: str) -> Iterator[None]:
    """Turn google client errors into hangar errors (412 -> AlreadyExists, 404 ->
    BlobNotFound, anything else as :mod:`hangar.gcloud`'s table says). Other exceptions pass
    through."""
    from google.api_core import exceptions as api_exceptions

    try:
        yield
    except api_exceptions.PreconditionFailed:
        raise AlreadyExists(f"blob {key!r} exists", key=key) from None
    except api_exceptions.NotFound:
        raise BlobNotFound(f"blob {key!r} not found", key=key) from None
    except vendor_errors() as exc:
        raise translate(exc, f"cannot {action} blob {key!r}", key=key) from None


@contextlib.contextmanager
def _signing_mapped(key: str) -> Iterator[None]:
    """Turn the signing service's errors (an unknown account is its NotFound, a missing grant
    its PermissionDenied) into one BackendError: they say nothing about the blob."""
    try:
        yield
    except vendor_errors() as exc:
        raise translate(exc, f"cannot sign a URL for blob {key!r}", key=key) from None


class _ChunkReader(io.RawIOBase):
    """A forward-only binary stream over an iterable of byte chunks (for resumable uploads)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        super().__init__()
        self._chunks = iter(chunks)
        self._buffer = b""
        self._pos = 0
        self.size = 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        target = offset if whence == os.SEEK_SET else self._pos + offset
        if whence not in (os.SEEK_SET, os.SEEK_CUR) or target != self._pos:
            raise io.UnsupportedOperation("a streamed upload cannot rewind")
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(view), len(self._buffer))
        view[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        self._pos += n
        self.size += n
        return n

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        out = bytearray()
        while len(out) < size:
            chunk = bytearray(size - len(out))
            n = self.readinto(chunk)
            if n == 0:
                break
            out += chunk[:n]
        return bytes(out)


def storage_client(env: Mapping[str, str]) -> Any:
    """A google-cloud-storage client: the real service, or, when ``env`` has
    ``STORAGE_EMULATOR_HOST``, that emulator with anonymous credentials and a placeholder
    project (``GOOGLE_CLOUD_PROJECT`` if set)."""
    from google.cloud.storage import Client

    host = env.get("STORAGE_EMULATOR_HOST")
    if not host:
        return Client()
    from google.auth.credentials import AnonymousCredentials

    return Client(
        project=env.get("GOOGLE_CLOUD_PROJECT") or "hangar-emulator",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": host if "://" in host else f"http://{host}"},
    )


class GcsBlobs:
    def __init__(self, bucket: str, prefix: str, settings: Settings | None = None) -> None:
        self.bucket_name = bucket
        self.prefix = prefix  # "" or "a/b/" (always ends with "/")
        self.settings = settings
        self._client: Any = None
        self._bucket: Any = None
        self._credentials: Any = None
        self._signing_bucket: Any = None
        self._lock = threading.Lock()
        self._signing_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, settings: Settings | None = None) -> GcsBlobs:
        parts = urlsplit(url)
        bucket = parts.netloc
        path = parts.path.strip("/")
        bad = (
            parts.scheme != "gs"
            or not bucket
            or "@" in bucket
            or ":" in bucket
            or parts.query
            or parts.fragment
            or (path and any(p in ("", ".", "..") for p in path.split("/")))
        )
        if bad:
            raise InvalidSettings(
                f"{_SETTING}: expected gs://BUCKET or gs://BUCKET/PREFIX, got {url!r}",
                setting=_SETTING,
            )
        return cls(bucket, f"{path}/" if path else "", settings)

    # -- the client, built on first use ---------------------------------------------------

    def _get_bucket(self) -> Any:
        with self._lock:
            if self._bucket is None:
                self._client = storage_client(os.environ)
                self._bucket = self._client.bucket(self.bucket_name)
            return self._bucket

    def _blob(self, key: str) -> Any:
        return self._get_bucket().blob(self.prefix + check_key(key))

    # -- the port ---------------------------------------------------------------------------

    def put(self, key: str, data: bytes | Iterable[bytes], *, if_absent: bool = False) -> int:
        blob = self._blob(key)
        match = {"if_generation_match": 0} if if_absent else {}
        if isinstance(data, (bytes, bytearray, memoryview)):
            head, rest = bytes(data), None
        else:
            # Buffer at most one request's worth; if the source ends there, one request.
            chunks = iter(data)
            buffered: list[bytes] = []
            held = 0
            rest = None
            for chunk in chunks:
                buffered.append(chunk)
                held += len(chunk)
                if held > SINGLE_REQUEST_LIMIT:
                    rest = chunks
                    break
            head = b"".join(buffered)
        if rest is None and len(head) <= SINGLE_REQUEST_LIMIT:
            with _mapped(key, "write"):
                blob.upload_from_string(
                    head, content_type="application/octet-stream", **match
                )
            return len(head)
        return self._put_streamed(key, blob, head, rest or iter(()), match)

    def _put_streamed(
        self, key: str, blob: Any, head: bytes, rest: Iterator[bytes], match: dict[str, int]
    ) -> int:
        if match and self.exists(key):
            raise AlreadyExists(f"blob {key!r} exists", key=key)

        def source() -> Iterator[bytes]:
            yield head
            yield from rest

        reader = _ChunkReader(source())
        blob.chunk_size = SINGLE_REQUEST_LIMIT
        with _mapped(key, "write"):
            blob.upload_from_file(
                cast(BinaryIO, reader), content_type="application/octet-stream", **match
            )
        return reader.size

    @contextlib.contextmanager
    def open(self, key: str) -> Iterator[BinaryIO]:
        bucket = self._get_bucket()
        name = self.prefix + check_key(key)
        with _mapped(key, "read"):
            blob = bucket.get_blob(name)
        if blob is None:
            raise BlobNotFound(f"blob {key!r} not found", key=key)
        with _mapped(key, "read"):
            # The blob carries the generation we found, so reads are pinned to it and a
            # concurrent replace cannot splice two objects.
            stream = blob.open("rb")
        with stream, _mapped(key, "read"):
            yield cast(BinaryIO, stream)

    def get(self, key: str) -> bytes:
        blob = self._blob(key)
        with _mapped(key, "read"):
            return cast(bytes, blob.download_as_bytes())

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """One ranged download (``end`` is inclusive there) of the stored bytes as they are
        (``raw_download``: never a transcoded form). A range that starts at or past the end is
        refused by the service (416): no bytes. A zero ``length`` is an existence check."""
        from google.api_core.exceptions import RequestRangeNotSatisfiable

        check_range(key, start, length)
        if length == 0:
            if not self.exists(key):
                raise BlobNotFound(f"blob {key!r} not found", key=key)
            return b""
        blob = self._blob(key)
        with _mapped(key, "read"):
            try:
                return cast(bytes, blob.download_as_bytes(start=start, end=start + length - 1,
                                                          raw_download=True))  # fmt: skip
            except RequestRangeNotSatisfiable:
                return b""

    def exists(self, key: str) -> bool:
        blob = self._blob(key)
        with _mapped(key, "check"):
            return bool(blob.exists())

    def delete(self, key: str) -> None:
        from google.api_core.exceptions import NotFound

        blob = self._blob(key)
        with _mapped(key, "delete"):
            try:
                blob.delete()
            except NotFound:
                pass

    def list(self, prefix: str = "") -> list[str]:
        bucket = self._get_bucket()
        start = len(self.prefix)
        with _mapped(self.prefix + prefix, "list"):
            names = [b.name for b in bucket.list_blobs(prefix=self.prefix + prefix)]
        return sorted(name[start:] for name in names)

    # -- signed URLs (hangar.blobs.signing.SignsUrls) ------------------------------------------

    def url_signer(self) -> SignsUrls | None:
        """This backend, when the settings name signing credentials (a key file or a service
        account); else None."""
        settings = self.settings
        if settings is None or (settings.signing_key_file is None
                                and not settings.signing_service_account):  # fmt: skip
            return None
        return self

    def _signing_credentials(self) -> Any:
        from hangar.blobs.signers import signing_credentials

        with self._signing_lock:
            if self._credentials is None and self.settings is not None:
                self._credentials = signing_credentials(self.settings)
            if self._credentials is None:
                raise InvalidSettings(
                    "no signing credentials: set HANGAR_SIGNING_KEY_FILE or "
                    "HANGAR_SIGNING_SERVICE_ACCOUNT", setting="HANGAR_SIGNING_SERVICE_ACCOUNT",
                )
            return self._credentials

    def _signing_blob(self, key: str) -> Any:
        """``key``'s blob for signing alone: through a client of its own without credentials
        (signing is local or the IAM API's: it reads nothing of the bucket and needs no
        storage credentials or endpoint)."""
        with self._signing_lock:
            if self._signing_bucket is None:
                from google.auth.credentials import AnonymousCredentials
                from google.cloud.storage import Client

                client = Client(project="hangar-signing", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
                self._signing_bucket = client.bucket(self.bucket_name)
            return self._signing_bucket.blob(self.prefix + check_key(key))

    def _sign(self, key: str, method: str, seconds: int, headers: dict[str, str]) -> SignedRequest:
        if not 1 <= seconds <= MAX_SECONDS:
            raise InvalidInput(f"a signed URL lives 1 to {MAX_SECONDS} seconds, not {seconds}",
                               key=key, seconds=seconds)  # fmt: skip
        blob = self._signing_blob(key)
        credentials = self._signing_credentials()
        assert self.settings is not None  # credentials come from the settings
        with _signing_mapped(key):
            url = blob.generate_signed_url(
                version="v4",
                expiration=timedelta(seconds=seconds),
                method=method,
                headers=dict(headers),  # the client adds Host to what it is given
                credentials=credentials,
                api_access_endpoint=self.settings.signed_url_endpoint,
            )
        return SignedRequest(method, str(url), dict(headers))

    def sign_put(self, key: str, seconds: int) -> SignedRequest:
        """A create-only PUT of ``key`` (under this store's prefix): ``x-goog-if-generation-match:
        0`` is among the signed headers and in the answer's ``headers``."""
        return self._sign(key, "PUT", seconds, dict(CREATE_ONLY))

    def sign_get(self, key: str, seconds: int) -> SignedRequest:
        return self._sign(key, "GET", seconds, {})

    def stat(self, key: str) -> BlobStat:
        """Size and MD5 from the object's metadata. BlobNotFound if missing; BackendError for
        an object the service keeps no MD5 of (a composed one: hangar composes none)."""
        bucket = self._get_bucket()
        name = self.prefix + check_key(key)
        with _mapped(key, "stat"):
            blob = bucket.get_blob(name)
        if blob is None:
            raise BlobNotFound(f"blob {key!r} not found", key=key)
        if blob.md5_hash is None or blob.size is None:
            raise BackendError(f"blob {key!r} has no MD5 or size in its metadata", key=key)
        return BlobStat(int(blob.size), base64.b64decode(blob.md5_hash).hex())
