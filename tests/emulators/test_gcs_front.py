"""The verifying front of fake-gcs-server: V4 signed URLs made by the official client (a service
account key made here) pass only as GCS would let them, create-only for PUT; every refusal
leaves the bucket as it was; the API port still serves the google-cloud-storage client."""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit
from xml.etree import ElementTree

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.oauth2 import service_account

from hangar.blobs.gcs import SINGLE_REQUEST_LIMIT, GcsBlobs
from hangar.errors import AlreadyExists
from hangar.testing.blobs import BlobsConformance

from emulators.gcs import FakeGcs

SIGNER = "checkpoints@hangar-test.iam.gserviceaccount.com"
PRECONDITION = {"x-goog-if-generation-match": "0"}


@pytest.fixture(scope="module")
def gcs() -> Iterator[FakeGcs]:
    with FakeGcs(front=True) as server:
        yield server


def _credentials(email: str) -> tuple[service_account.Credentials, str]:
    """Service account credentials with a fresh key, and the key's public half (PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()  # fmt: skip
    info = {"type": "service_account", "client_email": email, "private_key": pem,
            "private_key_id": uuid.uuid4().hex, "token_uri": "http://127.0.0.1:1/token",
            "project_id": "hangar-test"}  # fmt: skip
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return service_account.Credentials.from_service_account_info(info), public.decode()


@pytest.fixture(scope="module")
def signer(gcs: FakeGcs) -> service_account.Credentials:
    credentials, public = _credentials(SIGNER)
    gcs.trust(SIGNER, public)
    return credentials


@pytest.fixture
def bucket(gcs: FakeGcs) -> str:
    name = f"front-{uuid.uuid4().hex[:16]}"
    gcs.create_bucket(name)
    return name


@pytest.fixture
def clock(gcs: FakeGcs) -> Iterator[list[timedelta]]:
    """Moves the front's clock: append an offset from now; the wall clock again afterwards."""
    assert gcs.front is not None
    offset = [timedelta()]
    gcs.front.now = lambda: datetime.now(UTC) + offset[-1]
    yield offset
    gcs.front.now = lambda: datetime.now(UTC)


def _client(gcs: FakeGcs) -> storage.Client:
    return storage.Client(project="hangar-test", credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": gcs.api_url})  # fmt: skip


def sign(gcs: FakeGcs, credentials: Any, bucket: str, name: str, method: str,
         headers: dict[str, str] | None = None, seconds: int = 600) -> str:  # fmt: skip
    blob = _client(gcs).bucket(bucket).blob(name)
    return str(blob.generate_signed_url(version="v4", expiration=timedelta(seconds=seconds),
                                        method=method, credentials=credentials,
                                        api_access_endpoint=gcs.signed_url,
                                        headers=headers))  # fmt: skip


def send(method: str, url: str, data: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


def error_code(body: bytes) -> str:
    return str(ElementTree.fromstring(body).findtext("Code"))


def contents(gcs: FakeGcs, bucket: str) -> dict[str, bytes]:
    """Every object in the bucket and its bytes, read through the API port."""
    client = _client(gcs)
    return {b.name: b.download_as_bytes() for b in client.list_blobs(bucket)}


def put(gcs: FakeGcs, signer: Any, bucket: str, name: str, data: bytes) -> int:
    url = sign(gcs, signer, bucket, name, "PUT", PRECONDITION)
    return send("PUT", url, data, PRECONDITION)[0]


def test_a_signed_create_only_put_lands_and_reads_back_through_a_signed_get_with_a_range(
    gcs: FakeGcs, signer: Any, bucket: str
) -> None:
    name = "sessions/s1/packs/20261205T000000Z-a b~c"
    url = sign(gcs, signer, bucket, name, "PUT", PRECONDITION)
    status, headers, _ = send("PUT", url, b"0123456789", PRECONDITION)
    assert status == 200
    assert headers["ETag"] == '"781e5e245d69b566979b86e28d23f2c7"'  # md5 of the bytes
    get = sign(gcs, signer, bucket, name, "GET")
    assert send("GET", get)[::2] == (200, b"0123456789")
    status, headers, body = send("GET", get, headers={"Range": "bytes=2-5"})
    assert (status, body, headers["Content-Range"]) == (206, b"2345", "bytes 2-5/10")
    status, headers, body = send("HEAD", sign(gcs, signer, bucket, name, "HEAD"))
    assert (status, headers["Content-Length"], body) == (200, "10", b"")
    assert contents(gcs, bucket) == {name: b"0123456789"}


def test_the_same_put_url_used_twice_is_refused_412_and_the_first_object_stays(
    gcs: FakeGcs, signer: Any, bucket: str
) -> None:
    url = sign(gcs, signer, bucket, "root", "PUT", PRECONDITION)
    assert send("PUT", url, b"first", PRECONDITION)[0] == 200
    status, _, body = send("PUT", url, b"second", PRECONDITION)
    assert (status, error_code(body)) == (412, "PreconditionFailed")
    assert contents(gcs, bucket) == {"root": b"first"}


@pytest.mark.parametrize(
    "offset, expected",
    [(timedelta(seconds=61), (400, "ExpiredToken")),
     (-timedelta(minutes=5), (403, "AccessDenied"))],  # fmt: skip
    ids=["expired", "not-yet-valid"],
)
def test_an_expired_or_not_yet_valid_url_is_refused_and_writes_nothing(
    gcs: FakeGcs, signer: Any, bucket: str, clock: list[timedelta], offset: timedelta,
    expected: tuple[int, str],
) -> None:  # fmt: skip
    put_url = sign(gcs, signer, bucket, "late", "PUT", PRECONDITION, seconds=60)
    assert put(gcs, signer, bucket, "kept", b"kept") == 200
    get_url = sign(gcs, signer, bucket, "kept", "GET", seconds=60)
    clock.append(offset)
    status, _, body = send("PUT", put_url, b"late", PRECONDITION)
    assert (status, error_code(body)) == expected
    status, _, body = send("GET", get_url)
    assert (status, error_code(body)) == expected
    assert contents(gcs, bucket) == {"kept": b"kept"}


def test_a_url_signed_for_one_object_or_method_is_refused_for_another(
    gcs: FakeGcs, signer: Any, bucket: str
) -> None:
    url = sign(gcs, signer, bucket, "granted/a", "PUT", PRECONDITION)
    other = url.replace("/granted/a?", "/granted/b?")
    status, _, body = send("PUT", other, b"x", PRECONDITION)
    assert (status, error_code(body)) == (403, "SignatureDoesNotMatch")
    status, _, body = send("GET", url, headers=PRECONDITION)
    assert (status, error_code(body)) == (403, "SignatureDoesNotMatch")
    assert contents(gcs, bucket) == {}


def test_a_put_without_its_signed_precondition_is_refused(
    gcs: FakeGcs, signer: Any, bucket: str
) -> None:
    url = sign(gcs, signer, bucket, "pack", "PUT", PRECONDITION)
    status, _, body = send("PUT", url, b"x")  # the signed header left out of the request
    assert (status, error_code(body)) == (400, "MissingSecurityHeader")
    status, _, body = send("PUT", url, b"x", {"x-goog-if-generation-match": "7"})
    assert (status, error_code(body)) == (403, "SignatureDoesNotMatch")
    overwrite = sign(gcs, signer, bucket, "pack", "PUT")  # signed without the precondition
    status, _, body = send("PUT", overwrite, b"x")
    assert (status, error_code(body)) == (403, "AccessDenied")
    status, _, body = send("PUT", overwrite, b"x", PRECONDITION)  # added, but not signed
    assert (status, error_code(body)) == (403, "AccessDenied")
    assert contents(gcs, bucket) == {}


def test_a_signature_by_an_untrusted_key_is_refused(
    gcs: FakeGcs, signer: Any, bucket: str
) -> None:
    impostor, _ = _credentials(SIGNER)  # the trusted account's name, another key
    stranger, _ = _credentials("stranger@hangar-test.iam.gserviceaccount.com")
    for credentials, expected in [(impostor, "SignatureDoesNotMatch"), (stranger, "AccessDenied")]:
        url = sign(gcs, credentials, bucket, "pack", "PUT", PRECONDITION)
        status, _, body = send("PUT", url, b"x", PRECONDITION)
        assert (status, error_code(body)) == (403, expected)
    assert contents(gcs, bucket) == {}


@pytest.mark.parametrize(
    "change",
    [
        lambda url, h: (url.replace("X-Goog-Expires=600", "X-Goog-Expires=6000"), h),
        lambda url, h: (url + "&generation=1", h),
        lambda url, h: (url.replace("X-Goog-Signature=", "X-Goog-Signature=00"), h),
        lambda url, h: (url, {**h, "x-goog-meta-owner": "agent"}),
        lambda url, h: (url, {**h, "x-goog-acl": "public-read"}),
    ],
    ids=["expires", "extra-parameter", "signature", "unsigned-metadata", "unsigned-acl"],
)
def test_an_altered_query_or_an_extra_unsigned_header_does_not_pass(
    gcs: FakeGcs, signer: Any, bucket: str, change: Any
) -> None:
    url, headers = change(sign(gcs, signer, bucket, "pack", "PUT", PRECONDITION), PRECONDITION)
    status, _, body = send("PUT", url, b"x", headers)
    assert status == 403
    assert error_code(body) in ("SignatureDoesNotMatch", "AccessDenied")
    assert contents(gcs, bucket) == {}


def test_unsigned_requests_and_json_api_paths_on_the_signed_port_are_refused(
    gcs: FakeGcs, signer: Any, bucket: str
) -> None:
    assert put(gcs, signer, bucket, "kept", b"kept") == 200
    base = gcs.signed_url
    attempts = [
        ("GET", f"{base}/{bucket}/kept", None),
        ("PUT", f"{base}/{bucket}/new", b"x"),
        ("GET", f"{base}/storage/v1/b/{bucket}/o", None),
        ("GET", f"{base}/storage/v1/b/{bucket}/o/kept?alt=media", None),
        ("POST", f"{base}/upload/storage/v1/b/{bucket}/o?uploadType=media&name=new", b"x"),
        ("DELETE", sign(gcs, signer, bucket, "kept", "DELETE"), None),
        ("POST", sign(gcs, signer, bucket, "new", "POST"), b"x"),
    ]
    for method, url, data in attempts:
        status, _, body = send(method, url, data, {"Content-Type": "application/octet-stream"})
        assert (method, url, status, error_code(body)) == (method, url, 403, "AccessDenied")
    assert contents(gcs, bucket) == {"kept": b"kept"}


def test_a_refused_put_of_a_large_body_still_gets_its_answer(
    gcs: FakeGcs, signer: Any, bucket: str
) -> None:
    url = sign(gcs, signer, bucket, "pack", "PUT")
    status, _, body = send("PUT", url, os.urandom(4 << 20))
    assert (status, error_code(body)) == (403, "AccessDenied")
    assert contents(gcs, bucket) == {}


def send_chunked(method: str, url: str, pieces: list[bytes], headers: dict[str, str]) -> int:
    """Send a request whose body goes chunked (no Content-Length); its status."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.netloc, timeout=10)
    try:
        target = f"{parts.path}?{parts.query}" if parts.query else parts.path
        conn.request(method, target, body=iter(pieces), headers=headers, encode_chunked=True)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_chunked_bodies_pass_both_ports(gcs: FakeGcs, signer: Any, bucket: str) -> None:
    headers = {**PRECONDITION, "Content-Type": "text/plain"}
    url = sign(gcs, signer, bucket, "signed", "PUT", headers)  # Content-Type signed in too
    assert send_chunked("PUT", url, [b"one ", b"two"], headers) == 200
    media = f"{gcs.api_url}/upload/storage/v1/b/{bucket}/o?uploadType=media&name=relayed"
    assert send_chunked("POST", media, [b"three ", b"four"], {"Content-Type": "text/plain"}) == 200
    assert contents(gcs, bucket) == {"signed": b"one two", "relayed": b"three four"}
    blob = _client(gcs).bucket(bucket).get_blob("signed")
    assert blob is not None and blob.content_type == "text/plain"
    # The signed Content-Type is part of the signature: another one does not pass.
    again = sign(gcs, signer, bucket, "other", "PUT", headers)
    other = {**PRECONDITION, "Content-Type": "application/json"}
    assert send("PUT", again, b"{}", other)[0] == 403


class TestGcsBlobsThroughTheApiPort(BlobsConformance):
    """The control plane's backend (google-cloud-storage) through the front's API port."""

    @pytest.fixture
    def blobs(self, gcs: FakeGcs, bucket: str, monkeypatch: pytest.MonkeyPatch) -> GcsBlobs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.environment()["STORAGE_EMULATOR_HOST"])
        assert gcs.environment()["STORAGE_EMULATOR_HOST"] == gcs.api_url != gcs.url
        return GcsBlobs.from_url(f"gs://{bucket}/some/prefix")

    def test_a_resumable_upload_above_the_single_request_limit_round_trips(
        self, blobs: GcsBlobs
    ) -> None:
        chunks = [os.urandom(1 << 20) for _ in range(SINGLE_REQUEST_LIMIT // (1 << 20) + 3)]
        assert blobs.put("big", iter(chunks)) == sum(map(len, chunks))
        with blobs.open("big") as stream:
            received = b"".join(iter(lambda: stream.read(1 << 20), b""))
        assert received == b"".join(chunks)
        with pytest.raises(AlreadyExists):
            blobs.put("big", iter(chunks), if_absent=True)
