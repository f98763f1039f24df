"""Signed URLs of the gs:// blobs backend: V4 signatures by a key file or by the IAM Credentials
API's signBlob (the stand-in, through the official client), checked here as GCS documents its
V4 canonical request, and used against fake-gcs-server."""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from emulators.gcs import FakeGcs
from emulators.iam import IamStandIn, ServiceAccountKey
from hangar.blobs import BlobStat, SignedRequest, open_blobs, url_signer
from hangar.blobs.gcs import GcsBlobs
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.errors import BackendError, BlobNotFound, InvalidInput, InvalidSettings

ACCOUNT = "hangar-api@hangar-local.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def gcs() -> Iterator[FakeGcs]:
    with FakeGcs() as server:
        yield server


@pytest.fixture(scope="module")
def iam() -> Iterator[IamStandIn]:
    with IamStandIn(accounts=[ACCOUNT]) as stand_in:
        yield stand_in


@pytest.fixture
def bucket(gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    name = f"hangar-{uuid.uuid4().hex[:16]}"
    gcs.create_bucket(name)
    return name


@pytest.fixture(scope="module")
def key() -> ServiceAccountKey:
    return ServiceAccountKey.generate("signer@hangar-local.iam.gserviceaccount.com")


def _key_file_blobs(bucket: str, key: ServiceAccountKey, tmp_path: Path, endpoint: str) -> GcsBlobs:
    path = key.write_key_file(tmp_path / "key.json")
    settings = Settings.build(data_dir=tmp_path, signing_key_file=path,
                              signed_url_endpoint=endpoint)  # fmt: skip
    return GcsBlobs.from_url(f"gs://{bucket}/some/prefix", settings)


def verify_v4(request: SignedRequest, public_key_pem: bytes) -> dict[str, str]:
    """Check ``request``'s V4 signature as GCS does (the canonical request from the URL's
    path, its query but the signature, the signed headers with the values the request will
    send, Host its URL's); raises InvalidSignature. Returns the query parameters."""
    parts = urlsplit(request.url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    signature = bytes.fromhex(query.pop("X-Goog-Signature"))
    sent = {"host": parts.netloc, **{k.lower(): v for k, v in request.headers.items()}}
    signed = query["X-Goog-SignedHeaders"].split(";")
    assert set(signed) == set(sent), "every header sent is signed and no other"
    canonical = "\n".join([
        request.method,
        parts.path,
        "&".join(f"{quote(k, safe='~')}={quote(v, safe='~')}" for k, v in sorted(query.items())),
        "".join(f"{name}:{sent[name].strip()}\n" for name in sorted(signed)),
        ";".join(sorted(signed)),
        "UNSIGNED-PAYLOAD",
    ])  # fmt: skip
    scope = query["X-Goog-Credential"].split("/", 1)[1]
    to_sign = "\n".join(["GOOG4-RSA-SHA256", query["X-Goog-Date"], scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])  # fmt: skip
    public = serialization.load_pem_public_key(public_key_pem)
    assert isinstance(public, rsa.RSAPublicKey)
    public.verify(signature, to_sign.encode(), padding.PKCS1v15(), hashes.SHA256())
    return query


def _send(request: SignedRequest, data: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, bytes]:  # fmt: skip
    sent = urllib.request.Request(request.url, data=data, method=request.method,
                                  headers=request.headers if headers is None else headers)
    try:
        with urllib.request.urlopen(sent, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_a_put_url_signed_with_a_key_file_verifies_against_that_keys_public_key(
    bucket: str, key: ServiceAccountKey, tmp_path: Path
) -> None:
    blobs = _key_file_blobs(bucket, key, tmp_path, "https://storage.googleapis.com")
    request = blobs.sign_put("sessions/s1/packs/p1", 300)
    query = verify_v4(request, key.public_key_pem)
    assert request.method == "PUT"
    assert request.url.startswith(f"https://storage.googleapis.com/{bucket}/some/prefix/"
                                  "sessions/s1/packs/p1?")  # fmt: skip
    assert query["X-Goog-Credential"].startswith(f"{key.email}/")
    assert query["X-Goog-Expires"] == "300"
    tampered = SignedRequest("PUT", request.url.replace("/p1?", "/p2?"), request.headers)
    with pytest.raises(InvalidSignature):
        verify_v4(tampered, key.public_key_pem)


def test_the_create_only_header_is_signed_in_and_returned_with_the_put(
    bucket: str, key: ServiceAccountKey, tmp_path: Path
) -> None:
    blobs = _key_file_blobs(bucket, key, tmp_path, "https://storage.googleapis.com")
    request = blobs.sign_put("a/b", 60)
    assert request.headers == {"x-goog-if-generation-match": "0"}
    signed = dict(parse_qsl(urlsplit(request.url).query))["X-Goog-SignedHeaders"]
    assert signed.split(";") == ["host", "x-goog-if-generation-match"]
    dropped = SignedRequest("PUT", request.url, {})
    with pytest.raises(AssertionError, match="every header sent is signed"):
        verify_v4(dropped, key.public_key_pem)
    altered = SignedRequest("PUT", request.url, {"x-goog-if-generation-match": "7"})
    with pytest.raises(InvalidSignature):
        verify_v4(altered, key.public_key_pem)


def test_a_get_url_needs_no_headers_and_verifies(
    bucket: str, key: ServiceAccountKey, tmp_path: Path
) -> None:
    blobs = _key_file_blobs(bucket, key, tmp_path, "https://storage.googleapis.com")
    request = blobs.sign_get("a/b", 60)
    assert (request.method, request.headers) == ("GET", {})
    verify_v4(request, key.public_key_pem)


def test_signed_urls_name_the_configured_endpoint_and_round_trip_through_fake_gcs(
    bucket: str, gcs: FakeGcs, key: ServiceAccountKey, tmp_path: Path
) -> None:
    blobs = _key_file_blobs(bucket, key, tmp_path, gcs.url)
    put = blobs.sign_put("sessions/s1/manifest", 120)
    assert put.url.startswith(f"{gcs.url}/{bucket}/some/prefix/sessions/s1/manifest?")
    status, _ = _send(put, b"sealed bytes")
    assert status == 200
    assert blobs.get("sessions/s1/manifest") == b"sealed bytes"
    assert _send(blobs.sign_get("sessions/s1/manifest", 120)) == (200, b"sealed bytes")


def test_stat_gives_the_size_and_md5_of_an_object(bucket: str, tmp_path: Path) -> None:
    blobs = GcsBlobs.from_url(f"gs://{bucket}/p", Settings.build(data_dir=tmp_path))
    data = b"x" * 1000 + b"end"
    blobs.put("k/obj", data)
    assert blobs.stat("k/obj") == BlobStat(len(data), hashlib.md5(data).hexdigest())
    blobs.put("k/empty", b"")
    assert blobs.stat("k/empty") == BlobStat(0, hashlib.md5(b"").hexdigest())


def test_stat_of_a_missing_object_is_blob_not_found(bucket: str, tmp_path: Path) -> None:
    blobs = GcsBlobs.from_url(f"gs://{bucket}/p", Settings.build(data_dir=tmp_path))
    with pytest.raises(BlobNotFound):
        blobs.stat("k/none")
    with pytest.raises(InvalidInput):
        blobs.stat("../escape")


def test_signblob_through_the_stand_in_signs_urls_the_accounts_public_key_verifies(
    bucket: str, iam: IamStandIn, tmp_path: Path
) -> None:
    settings = Settings.build(data_dir=tmp_path, signing_service_account=ACCOUNT,
                              iam_endpoint=iam.url)  # fmt: skip
    signer = url_signer(GcsBlobs.from_url(f"gs://{bucket}/p", settings))
    assert signer is not None
    request = signer.sign_put("sessions/s/packs/x", 600)
    query = verify_v4(request, iam.public_key_pem(ACCOUNT))
    assert query["X-Goog-Credential"].startswith(f"{ACCOUNT}/")
    assert query["X-Goog-Date"].startswith(datetime.now(UTC).strftime("%Y"))
    verify_v4(signer.sign_get("sessions/s/packs/x", 600), iam.public_key_pem(ACCOUNT))


def test_an_account_the_signing_service_does_not_know_is_one_backend_error(
    bucket: str, iam: IamStandIn, tmp_path: Path
) -> None:
    settings = Settings.build(data_dir=tmp_path, iam_endpoint=iam.url,
                              signing_service_account="nobody@hangar-local.iam.gserviceaccount.com")
    signer = url_signer(GcsBlobs.from_url(f"gs://{bucket}/p", settings))
    assert signer is not None
    with pytest.raises(BackendError) as caught:
        signer.sign_put("a/b", 60)
    assert caught.value.code == "backend_error"
    assert caught.value.data["vendor"] == "NotFound"
    assert "a/b" in str(caught.value)


def test_url_signer_is_none_for_the_local_backend_and_for_gcs_without_signing_settings(
    tmp_path: Path,
) -> None:
    settings = Settings.build(data_dir=tmp_path)
    assert url_signer(open_blobs(f"file://{tmp_path}/blobs", settings)) is None
    assert url_signer(LocalBlobs(tmp_path / "other")) is None
    assert url_signer(open_blobs("gs://bucket/p", settings)) is None
    assert url_signer(GcsBlobs.from_url("gs://bucket/p")) is None
    signing = settings.replace(signing_service_account=ACCOUNT)
    assert url_signer(open_blobs("gs://bucket/p", signing)) is not None


def test_an_unusable_key_file_names_its_setting_when_the_first_url_is_signed(
    bucket: str, tmp_path: Path
) -> None:
    (tmp_path / "bad.json").write_text('{"type": "service_account"}')
    for path in (tmp_path / "bad.json", tmp_path / "missing.json"):
        settings = Settings.build(data_dir=tmp_path, signing_key_file=path)
        signer = url_signer(GcsBlobs.from_url(f"gs://{bucket}/p", settings))
        assert signer is not None
        with pytest.raises(InvalidSettings) as caught:
            signer.sign_get("a/b", 60)
        assert caught.value.data["setting"] == "HANGAR_SIGNING_KEY_FILE"


def test_a_bad_key_or_lifetime_is_refused_before_anything_is_signed(
    bucket: str, key: ServiceAccountKey, tmp_path: Path
) -> None:
    blobs = _key_file_blobs(bucket, key, tmp_path, "https://storage.googleapis.com")
    for bad_key in ("", "/abs", "a/../b", "a//b"):
        with pytest.raises(InvalidInput):
            blobs.sign_put(bad_key, 60)
    for seconds in (0, -1, 7 * 24 * 3600 + 1):
        with pytest.raises(InvalidInput):
            blobs.sign_get("a/b", seconds)
    assert blobs.sign_get("a/b", 7 * 24 * 3600).method == "GET"


def test_signing_settings_are_read_from_their_variables(tmp_path: Path) -> None:
    settings = Settings.from_env({
        "HOME": str(tmp_path),
        "HANGAR_SIGNING_KEY_FILE": "/run/key.json",
        "HANGAR_SIGNING_SERVICE_ACCOUNT": ACCOUNT,
        "HANGAR_IAM_ENDPOINT": "http://127.0.0.1:9",
        "HANGAR_SIGNED_URL_ENDPOINT": "http://127.0.0.1:8",
    })  # fmt: skip
    assert settings.signing_key_file == Path("/run/key.json")
    assert settings.signing_service_account == ACCOUNT
    assert settings.iam_endpoint == "http://127.0.0.1:9"
    assert settings.signed_url_endpoint == "http://127.0.0.1:8"
    assert Settings.build(data_dir=tmp_path).signed_url_endpoint == "https://storage.googleapis.com"
    for name, value in (("signed_url_endpoint", "storage.googleapis.com"),
                        ("signed_url_endpoint", "https://h/path"),
                        ("signing_service_account", "not an email")):  # fmt: skip
        with pytest.raises(InvalidSettings) as caught:
            Settings.build(data_dir=tmp_path, **{name: value})
        assert caught.value.data["setting"] == f"HANGAR_{name.upper()}"
