from __future__ import annotations

import os
from pathlib import Path

import pytest

from hangar.blobs import open_blobs
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.errors import InvalidSettings
from hangar.testing.blobs import BlobsConformance


class TestLocalBlobs(BlobsConformance):
    @pytest.fixture
    def blobs(self, tmp_path: Path) -> LocalBlobs:
        return LocalBlobs(tmp_path / "blobs")


def test_open_blobs_picks_the_local_backend_for_a_file_url(tmp_path: Path) -> None:
    settings = Settings.build(data_dir=tmp_path)
    blobs = open_blobs(f"file://{tmp_path}/store", settings)
    assert isinstance(blobs, LocalBlobs)
    assert blobs.root == tmp_path / "store"


def test_open_blobs_refuses_an_unknown_scheme(tmp_path: Path) -> None:
    with pytest.raises(InvalidSettings, match="HANGAR_SESSION_STORE"):
        open_blobs("s3://bucket", Settings.build(data_dir=tmp_path))


def test_a_relative_file_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidSettings):
        LocalBlobs.from_url("file://relative/path")


def test_deleting_the_last_object_leaves_no_empty_folders(tmp_path: Path) -> None:
    blobs = LocalBlobs(tmp_path / "b")
    blobs.put("sessions/s1/c1/part", b"x")
    blobs.delete("sessions/s1/c1/part")
    assert os.listdir(tmp_path / "b") == []
