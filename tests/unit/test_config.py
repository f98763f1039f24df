from __future__ import annotations

from pathlib import Path

import pytest

from hangar.config import Settings
from hangar.errors import InvalidSettings


def test_defaults_put_every_embedded_backend_under_the_data_dir() -> None:
    settings = Settings.from_env({"HOME": "/home/u"})
    assert settings.data_dir == Path("/home/u/.hangar")
    assert settings.db == "sqlite:///home/u/.hangar/hangar.db"
    assert settings.session_store == "file:///home/u/.hangar/blobs"
    assert settings.keys == "local:///home/u/.hangar/vault.key"
    assert settings.sandboxes == "local:///home/u/.hangar/sandboxes"
    assert settings.ticks == "local:"
    assert settings.harness_dir == Path("/home/u/.local/share/hangar/harnesses")
    assert settings.url == "http://127.0.0.1:8080"


def test_the_spec_settings_keep_their_names_and_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.session_keep_checkpoints == 5
    assert settings.session_max_part_mb == 100
    assert settings.session_max_untracked_mb == 20
    assert settings.session_checkpoint_minutes == 10
    assert settings.exchange_max_patch_mb == 10


def test_settings_are_read_from_hangar_variables() -> None:
    settings = Settings.from_env(
        {
            "HANGAR_DATA_DIR": "/srv/h",
            "HANGAR_SESSION_KEEP_CHECKPOINTS": "3",
            "HANGAR_DB": "sqlite:////elsewhere/x.db",
            "HANGAR_UNRELATED": "ignored",
        }
    )
    assert settings.data_dir == Path("/srv/h")
    assert settings.session_keep_checkpoints == 3
    assert settings.db == "sqlite:////elsewhere/x.db"
    assert settings.session_store == "file:///srv/h/blobs"


def test_a_bad_value_names_the_variable() -> None:
    with pytest.raises(InvalidSettings, match="HANGAR_SESSION_KEEP_CHECKPOINTS") as info:
        Settings.from_env({"HANGAR_SESSION_KEEP_CHECKPOINTS": "zero"})
    assert info.value.data["setting"] == "HANGAR_SESSION_KEEP_CHECKPOINTS"


def test_settings_are_frozen_and_replace_makes_a_checked_copy() -> None:
    settings = Settings.from_env({})
    with pytest.raises(ValueError):
        settings.session_keep_checkpoints = 9  # type: ignore[misc]
    changed = settings.replace(session_keep_checkpoints=2)
    assert changed.session_keep_checkpoints == 2
    assert settings.session_keep_checkpoints == 5
    with pytest.raises(InvalidSettings):
        settings.replace(session_keep_checkpoints=0)
