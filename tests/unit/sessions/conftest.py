"""The ``world`` fixture: a session service over real sandboxes (see :mod:`.world`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from tests.unit.sessions.world import World, make_world


@pytest.fixture
def world(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path
) -> Iterator[World]:
    yield from make_world(tmp_path, db, blobs, keys, remote)
