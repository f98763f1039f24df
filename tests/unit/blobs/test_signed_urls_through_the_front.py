"""The URLs GcsBlobs signs, used as a sandbox uses them, against fake-gcs-server behind our
verifying front (which checks V4 signatures as GCS documents): signed through the IAM
Credentials stand-in with the official client, and with a key file."""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.gcs import FakeGcs
from emulators.iam import IamStandIn, ServiceAccountKey
from hangar.blobs import BlobStat, SignedRequest, SignsUrls, url_signer
from hangar.blobs.gcs import GcsBlobs
from hangar.config import Settings

ACCOUNT = "hangar-ticks@hangar-local.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def iam() -> Iterator[IamStandIn]:
    with IamStandIn(accounts=[ACCOUNT]) as stand_in:
        yield stand_in


@pytest.fixture(scope="module")
def gcs(iam: IamStandIn) -> Iterator[FakeGcs]:
    with FakeGcs(front=True) as server:
        server.trust(ACCOUNT, iam.public_key_pem(ACCOUNT))
        yield server


@pytest.fixture
def bucket(gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.api_url)
    name = f"hangar-{uuid.uuid4().hex[:16]}"
    gcs.create_bucket(name)
    return name


def _send(request: SignedRequest, data: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, bytes]:  # fmt: skip
    sent = urllib.request.Request(request.url, data=data, method=request.method,
                                  headers=request.headers if headers is None else headers)
    try:
        with urllib.request.urlopen(sent, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _iam_signer(bucket: str, gcs: FakeGcs, iam: IamStandIn, tmp_path: Path) -> SignsUrls:
    settings = Settings.build(data_dir=tmp_path, signing_service_account=ACCOUNT,
                              iam_endpoint=iam.url, signed_url_endpoint=gcs.signed_url)
    signer = url_signer(GcsBlobs.from_url(f"gs://{bucket}/hangar", settings))
    assert signer is not None
    return signer


def test_a_put_signed_through_signblob_lands_once_and_stat_reports_it(
    bucket: str, gcs: FakeGcs, iam: IamStandIn, tmp_path: Path
) -> None:
    signer = _iam_signer(bucket, gcs, iam, tmp_path)
    data = b"sealed pack " * 1000
    put = signer.sign_put("sessions/s1/packs/p1", 300)
    assert _send(put, data)[0] == 200
    assert signer.stat("sessions/s1/packs/p1") == BlobStat(len(data), hashlib.md5(data).hexdigest())
    assert _send(put, b"another body")[0] == 412, "the create-only URL writes once"
    assert _send(signer.sign_get("sessions/s1/packs/p1", 300)) == (200, data)


def test_a_put_without_its_signed_precondition_is_refused_and_writes_nothing(
    bucket: str, gcs: FakeGcs, iam: IamStandIn, tmp_path: Path
) -> None:
    signer = _iam_signer(bucket, gcs, iam, tmp_path)
    put = signer.sign_put("sessions/s1/manifest", 300)
    status, body = _send(put, b"x", headers={})
    assert (status, b"MissingSecurityHeader" in body) == (400, True)
    assert _send(put, b"x", headers={"x-goog-if-generation-match": "1"})[0] == 403
    get = signer.sign_get("sessions/s1/manifest", 300)
    assert _send(get)[0] == 404


def test_a_url_signed_for_one_object_does_not_read_another(
    bucket: str, gcs: FakeGcs, iam: IamStandIn, tmp_path: Path
) -> None:
    signer = _iam_signer(bucket, gcs, iam, tmp_path)
    assert _send(signer.sign_put("a/one", 60), b"1")[0] == 200
    assert _send(signer.sign_put("a/two", 60), b"2")[0] == 200
    get = signer.sign_get("a/one", 60)
    moved = SignedRequest("GET", get.url.replace("/a/one?", "/a/two?"), {})
    assert _send(moved)[0] == 403


def test_a_key_file_signs_urls_the_front_accepts(
    bucket: str, gcs: FakeGcs, tmp_path: Path
) -> None:
    key = ServiceAccountKey.generate("filed@hangar-local.iam.gserviceaccount.com")
    gcs.trust(key.email, key.public_key_pem)
    settings = Settings.build(data_dir=tmp_path, signed_url_endpoint=gcs.signed_url,
                              signing_key_file=key.write_key_file(tmp_path / "key.json"))
    signer = url_signer(GcsBlobs.from_url(f"gs://{bucket}", settings))
    assert signer is not None
    assert _send(signer.sign_put("k", 60), b"body")[0] == 200
    assert _send(signer.sign_get("k", 60)) == (200, b"body")
