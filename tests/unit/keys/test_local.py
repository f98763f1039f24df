from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hangar.config import Settings
from hangar.errors import BackendError
from hangar.keys import open_keys
from hangar.keys.local import LocalKeys
from hangar.testing.keys import KeysConformance


class TestLocalKeys(KeysConformance):
    @pytest.fixture
    def keys(self, tmp_path: Path) -> LocalKeys:
        return LocalKeys(tmp_path / "vault.key")

    @pytest.fixture
    def other_keys(self, tmp_path: Path) -> LocalKeys:
        return LocalKeys(tmp_path / "other" / "vault.key")


def test_the_key_file_is_made_on_first_use_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "data" / "vault.key"
    keys = LocalKeys(path)
    assert not path.exists()
    keys.wrap(os.urandom(32))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_bytes()) == 32


def test_a_second_instance_on_the_same_file_unwraps_what_the_first_wrapped(tmp_path: Path) -> None:
    data_key = os.urandom(32)
    wrapped = LocalKeys(tmp_path / "vault.key").wrap(data_key)
    assert LocalKeys(tmp_path / "vault.key").unwrap(wrapped) == data_key


def test_a_key_file_of_the_wrong_size_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "vault.key").write_bytes(b"short")
    with pytest.raises(BackendError, match="32-byte"):
        LocalKeys(tmp_path / "vault.key").wrap(os.urandom(32))


def test_open_keys_picks_the_local_backend(tmp_path: Path) -> None:
    keys = open_keys(f"local://{tmp_path}/vault.key", Settings.build(data_dir=tmp_path))
    assert isinstance(keys, LocalKeys)
