"""The ``world`` fixture: a session service over real sandboxes (see :mod:`.world`); the
``engine`` fixture: the checkpoint and restore engine over one (see :mod:`tests.rig`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.sandboxes.local import LocalSandboxes
from tests.rig import Engine, make_engine
from tests.unit.sessions.world import World, make_world


@pytest.fixture
def world(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path
) -> Iterator[World]:
    yield from make_world(tmp_path, db, blobs, keys, remote)


@pytest.fixture
def engine(
    settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
    sandboxes: LocalSandboxes, remote: Path,
) -> Engine:  # fmt: skip
    return make_engine(settings, db, blobs, keys, sandboxes, remote)
