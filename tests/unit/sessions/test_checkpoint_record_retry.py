"""A db error from recording a checkpoint is checked against the db: a commit can land and still
report an error (Firestore: a deadline after the write), and then the checkpoint is recorded and
its parts must stay."""

from __future__ import annotations

import logging
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import BackendError, CheckpointError
from hangar.keys.local import LocalKeys
from hangar.models import Checkpoint
from hangar.sandboxes.local import LocalSandboxes
from tests.rig import Engine, make_engine

pytestmark = pytest.mark.sandbox


class FlakyDb:
    """A Db that delegates to a SqliteDb, except that ``record_checkpoint`` raises BackendError:
    after recording (``lands=True``, the answer was lost) or instead of it; and, with
    ``reads_fail``, reading a checkpoint back fails too."""

    def __init__(self, inner: SqliteDb, *, lands: bool, reads_fail: bool = False) -> None:
        self.inner = inner
        self.lands = lands
        self.reads_fail = reads_fail
        self.failures = 0

    def record_checkpoint(self, checkpoint: Checkpoint, keep: int) -> list[Checkpoint]:
        if self.failures == 0:
            self.failures += 1
            if self.lands:
                self.inner.record_checkpoint(checkpoint, keep)
            raise BackendError("firestore: deadline exceeded")
        return self.inner.record_checkpoint(checkpoint, keep)

    def get_checkpoint(self, session_id: str, checkpoint_id: str) -> Checkpoint:
        if self.reads_fail:
            raise BackendError("firestore: unavailable")
        return self.inner.get_checkpoint(session_id, checkpoint_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


EngineFor = Callable[..., Engine]


@pytest.fixture
def engine_for(
    settings: Settings, blobs: LocalBlobs, keys: LocalKeys, sandboxes: LocalSandboxes,
    remote: Path,
) -> EngineFor:
    """``engine_for(flaky, **settings_changes)``: the checkpoint engine over ``flaky``, taking
    format-1 checkpoints (their parts are found by the checkpoint's folder; format 2 goes
    through the same recording, and its db errors are in test_crashes.py)."""

    def make(flaky: FlakyDb, **changes: Any) -> Engine:
        chosen = settings.replace(**{"checkpoint_format": 1, **changes})
        return make_engine(chosen, flaky, blobs, keys, sandboxes, remote)  # type: ignore[arg-type]

    return make


def _parts_of(blobs: LocalBlobs, checkpoint_id: str) -> list[str]:
    return [key for key in blobs.list() if f"/{checkpoint_id}/" in key]


def test_a_record_that_landed_before_the_backend_error_counts_as_recorded_and_keeps_its_parts(
    engine_for: EngineFor, db: SqliteDb, blobs: LocalBlobs, caplog: pytest.LogCaptureFixture
) -> None:
    flaky = FlakyDb(db, lands=True)
    engine = engine_for(flaky)
    sandbox, workspace = engine.sandbox()
    engine.sh(sandbox, "echo changed >> README.md")
    with caplog.at_level(logging.WARNING, logger="hangar.checkpoints.checkpointer"):
        checkpoint = engine.take(sandbox, workspace)
    assert [c.id for c in db.list_checkpoints(engine.session.id)] == [checkpoint.id]
    assert db.get_checkpoint(engine.session.id, checkpoint.id) == checkpoint
    assert sorted(_parts_of(blobs, checkpoint.id)) == sorted(
        f"sessions/{engine.session.id}/{checkpoint.id}/{part.name}" for part in checkpoint.parts
    )
    assert any("recorded although" in r.getMessage() for r in caplog.records)
    # It restores: its parts are all there.
    engine.sandboxes.destroy(sandbox)
    fresh, again = engine.sandbox()
    report = engine.restorer.restore(engine.session.id, fresh, again.repo_dir)
    assert report is not None and report.checkpoint.id == checkpoint.id


def test_a_backend_error_when_nothing_was_recorded_deletes_the_parts(
    engine_for: EngineFor, db: SqliteDb, blobs: LocalBlobs
) -> None:
    flaky = FlakyDb(db, lands=False)
    engine = engine_for(flaky)
    sandbox, workspace = engine.sandbox()
    with pytest.raises(CheckpointError, match="deadline exceeded"):
        engine.take(sandbox, workspace)
    assert db.list_checkpoints(engine.session.id) == []
    assert blobs.list() == []


def test_when_the_record_cannot_be_read_back_the_parts_are_kept_and_the_error_says_so(
    engine_for: EngineFor, db: SqliteDb, blobs: LocalBlobs
) -> None:
    flaky = FlakyDb(db, lands=True, reads_fail=True)
    engine = engine_for(flaky)
    sandbox, workspace = engine.sandbox()
    with pytest.raises(CheckpointError, match="may not have been recorded"):
        engine.take(sandbox, workspace)
    (recorded,) = db.list_checkpoints(engine.session.id)
    assert len(_parts_of(blobs, recorded.id)) == len(recorded.parts) > 0


def test_pruned_parts_are_left_behind_when_the_pruning_answer_was_lost(
    engine_for: EngineFor, db: SqliteDb, blobs: LocalBlobs
) -> None:
    flaky = FlakyDb(db, lands=False)
    flaky.failures = 1  # the first recording goes through
    engine = engine_for(flaky, session_keep_checkpoints=1)
    sandbox, workspace = engine.sandbox()
    first = engine.take(sandbox, workspace)
    flaky.failures, flaky.lands = 0, True
    engine.sh(sandbox, "echo changed >> README.md")
    second = engine.take(sandbox, workspace)
    assert [c.id for c in db.list_checkpoints(engine.session.id)] == [second.id]
    assert _parts_of(blobs, first.id), "the pruned checkpoint's parts are left (and logged)"
    assert _parts_of(blobs, second.id)
