"""An environment's container image: a reference checked by the distribution grammar (one
error naming the field and what is wrong, nothing changed), set, changed and cleared by an
update, and none in a record written before the field existed."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import InvalidInput
from hangar.keys.local import LocalKeys
from hangar.sessions.environments import EnvironmentChange, Environments
from hangar.sessions.images import check_image

DIGEST = "sha256:" + "0123456789abcdef" * 4
GOOD = [
    "ubuntu",
    "ubuntu:24.04",
    "docker.io/library/python:3.12-slim",
    "localhost/team/agent",
    "registry.example:5000/team/agent_base__v2.x-y:1.2.3",
    f"us-docker.pkg.dev/proj/repo/agent@{DIGEST}",
    f"registry.example/agent:stable@{DIGEST}",
    "[::1]:5000/agent:dev",
    "a" * 255,
]
BAD = [
    ("", "names no image"),
    ("Ubuntu", "must be lowercase"),
    ("registry.example/Team/agent", "must be lowercase"),
    ("ubuntu:", "a tag is"),
    ("ubuntu:-rc", "a tag is"),
    ("ubuntu:" + "t" * 129, "a tag is"),
    ("ubuntu@sha256:abc", "sha256: and 64 lowercase hex"),
    ("ubuntu@md5:" + "a" * 32, "sha256: and 64 lowercase hex"),
    ("team//agent", "path component ''"),
    ("-agent", "path component '-agent'"),
    ("agent image", "path component 'agent image'"),
    ("bad_host.example/agent", "'bad_host.example' is not a registry host"),
    ("a" * 256, "longer than 255 characters"),
]


@pytest.mark.parametrize("image", GOOD)
def test_a_container_image_reference_is_taken_as_given(image: str) -> None:
    assert check_image(image) == image


@pytest.mark.parametrize(("image", "why"), BAD)
def test_a_bad_image_reference_is_invalid_input_naming_the_field_and_what_is_wrong(
    image: str, why: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_image(image)
    assert refused.value.code == "invalid_input" and refused.value.data["field"] == "image"
    assert refused.value.message.startswith("image ") and why in refused.value.message


def test_an_environment_with_a_bad_image_is_not_made_and_one_is_not_changed(
    db: SqliteDb, keys: LocalKeys, remote: Path
) -> None:
    envs = Environments(db, keys)
    with pytest.raises(InvalidInput, match="must be lowercase"):
        envs.add("app", str(remote), image="Team/Agent")
    assert envs.list() == []

    before = envs.add("app", str(remote), image="team/agent:1")
    with pytest.raises(InvalidInput, match="a tag is"):
        envs.update("app", EnvironmentChange(image="team/agent:", setup="make"))
    assert envs.get("app") == before


def test_an_update_sets_changes_and_clears_the_image_and_leaves_it_when_not_given(
    db: SqliteDb, keys: LocalKeys, remote: Path
) -> None:
    envs = Environments(db, keys)
    assert envs.add("app", str(remote)).image is None
    assert envs.update("app", EnvironmentChange(image="team/agent:1")).image == "team/agent:1"
    changed = envs.update("app", EnvironmentChange(image=f"team/agent@{DIGEST}"))
    assert changed.image == f"team/agent@{DIGEST}"
    assert envs.update("app", EnvironmentChange(setup="make")).image == f"team/agent@{DIGEST}"
    assert envs.update("app", EnvironmentChange(image=None)).image is None
    assert envs.get("app").image is None


def test_an_environment_recorded_before_images_existed_reads_as_naming_none(
    settings: Settings, db: SqliteDb, keys: LocalKeys, remote: Path
) -> None:
    Environments(db, keys).add("app", str(remote), image="team/agent:1")
    with closing(sqlite3.connect(settings.data_dir / "hangar.db")) as conn, conn:
        conn.execute("UPDATE environments SET doc = json_remove(doc, '$.image')")
        (doc,) = conn.execute("SELECT doc FROM environments").fetchone()
    assert '"image"' not in doc
    assert db.get_environment("app").image is None
