"""Artifacts against real sandboxes (the stand-in runs the turn's ``run:`` lines): the caps
skip files with a warning rather than failing the turn, unchanged files are not stored again,
and artifacts go with the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import TurnOutcome
from tests.unit.sessions.world import World, make_world

pytestmark = pytest.mark.sandbox

OUT = "$HANGAR_IO/out/artifacts"
FOUR = (f"run: head -c 600 /dev/zero | tr '\\0' a > {OUT}/a.txt && "
        f"head -c 600 /dev/zero | tr '\\0' b > {OUT}/b.txt && "
        f"echo c > {OUT}/c.txt && echo d > {OUT}/d.txt")  # fmt: skip


@pytest.fixture
def world(tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
          remote: Path) -> Iterator[World]:  # fmt: skip
    yield from make_world(tmp_path, db, blobs, keys, remote, exchange_max_artifacts=2,
                          exchange_max_artifacts_mb=1100 / 2**20)  # fmt: skip


def test_caps_skip_artifacts_with_a_warning_and_unchanged_ones_are_not_stored_again(
    world: World,
) -> None:
    service = world.service
    service.new("arts", FOUR, "app", harness="antigravity")
    first = service.wait("arts", timeout=60, poll=0.05)
    assert first.outcome is TurnOutcome.EXITED, first
    assert [a.path for a in first.artifacts] == ["a.txt", "c.txt"]
    assert any(w.startswith("out/artifacts/b.txt: over the turn's") for w in first.warnings)
    assert any(w.startswith("out/artifacts/d.txt: over 2 new") for w in first.warnings)
    assert service.artifact("arts", 1, "a.txt") == b"a" * 600

    service.send("arts", f"run: echo changed > {OUT}/c.txt")
    second = service.wait("arts", timeout=60, poll=0.05)
    # a.txt is unchanged (not stored again); c.txt changed; b.txt and d.txt were never stored
    assert [a.path for a in second.artifacts] == ["b.txt", "c.txt"]
    assert any(w.startswith("out/artifacts/d.txt: over 2 new") for w in second.warnings)
    assert service.artifact("arts", 2, "c.txt") == b"changed\n"
    assert service.artifact("arts", 1, "c.txt") == b"c\n"  # each turn keeps its version
    assert [(a.path, a.turn) for a in service.artifacts("arts")] == [
        ("a.txt", 1), ("c.txt", 1), ("b.txt", 2), ("c.txt", 2)]  # fmt: skip

    session_id = service.resolve("arts").id
    assert world.blobs.list(f"sessions/{session_id}/artifacts/")
    service.delete("arts")
    assert world.blobs.list(f"sessions/{session_id}/artifacts/") == []
