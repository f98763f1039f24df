"""The db conformance suite's part on checkpoints that reuse others' chunks (format 2): a record
naming a ``source`` is refused once that source is pruned, and ``checkpoints_using`` finds every
kept record that refers to a session's chunks. Every backend runs it beside
:class:`~hangar.testing.db.DbConformance`, with the same ``db`` fixture::

    class TestSqliteCheckpointReuse(CheckpointReuseConformance):
        @pytest.fixture
        def db(self) -> Iterator[Db]: ...
"""

from __future__ import annotations

from typing import Any

import pytest

from hangar.db import Db
from hangar.errors import CheckpointNotFound, SourcePruned
from hangar.models import Checkpoint
from hangar.testing.db import make_checkpoint, make_session


def _sessions(db: Db, *ids: str) -> None:
    for n, session_id in enumerate(ids):
        db.create_session(make_session(f"reuse-{n}", id=session_id))


def _reusing(session_id: str, minute: float, source: Checkpoint, **fields: Any) -> Checkpoint:
    """A format-2 checkpoint of ``session_id`` reusing ``source``'s chunks (of its session)."""
    owner = None if source.session_id == session_id else source.session_id
    uses = sorted({session_id, source.session_id})
    return make_checkpoint(session_id, minute, format=2, source=source.id,
                           source_session=owner, uses=uses, **fields)  # fmt: skip


def _ids(records: list[Checkpoint]) -> list[str]:
    return [record.id for record in records]


class CheckpointReuseConformance:
    """Behaviour every :class:`~hangar.db.Db` backend must show. Needs a ``db`` fixture."""

    def test_a_checkpoint_whose_source_was_pruned_raises_source_pruned_and_records_nothing(
        self, db: Db
    ) -> None:
        _sessions(db, "ses-1")
        first, second, third = (make_checkpoint("ses-1", minute) for minute in (1, 2, 3))
        for checkpoint in (first, second, third):
            db.record_checkpoint(checkpoint, keep=2)
        late = _reusing("ses-1", 4, first)
        with pytest.raises(SourcePruned) as caught:
            db.record_checkpoint(late, keep=1)
        assert caught.value.code == "checkpoint_source_pruned"
        assert _ids(db.list_checkpoints("ses-1")) == [second.id, third.id]  # nothing pruned
        with pytest.raises(CheckpointNotFound):
            db.get_checkpoint("ses-1", late.id)
        assert db.checkpoints_using("ses-1") == []

    def test_a_source_never_recorded_raises_source_pruned(self, db: Db) -> None:
        _sessions(db, "ses-1")
        ghost = make_checkpoint("ses-1", 1)
        with pytest.raises(SourcePruned):
            db.record_checkpoint(_reusing("ses-1", 2, ghost), keep=5)
        assert db.list_checkpoints("ses-1") == []

    def test_a_source_of_another_session_is_looked_up_in_source_session(self, db: Db) -> None:
        _sessions(db, "ses-parent", "ses-child")
        parent = make_checkpoint("ses-parent", 1)
        db.record_checkpoint(parent, keep=5)
        child = _reusing("ses-child", 2, parent)
        assert db.record_checkpoint(child, keep=5) == []
        assert db.get_checkpoint("ses-child", child.id).source_session == "ses-parent"
        # The same id looked up in the child's own session is not there.
        mislabelled = make_checkpoint("ses-child", 3, format=2, source=parent.id)
        with pytest.raises(SourcePruned):
            db.record_checkpoint(mislabelled, keep=5)
        db.delete_checkpoints("ses-parent")
        orphan = _reusing("ses-child", 4, parent)
        with pytest.raises(SourcePruned):
            db.record_checkpoint(orphan, keep=5)
        assert _ids(db.list_checkpoints("ses-child")) == [child.id]

    def test_a_checkpoint_that_prunes_its_own_source_is_recorded(self, db: Db) -> None:
        _sessions(db, "ses-1")
        first, second = make_checkpoint("ses-1", 1), make_checkpoint("ses-1", 2)
        db.record_checkpoint(first, keep=2)
        db.record_checkpoint(second, keep=2)
        newest = _reusing("ses-1", 3, first)
        assert _ids(db.record_checkpoint(newest, keep=2)) == [first.id]
        assert _ids(db.list_checkpoints("ses-1")) == [second.id, newest.id]

    def test_checkpoints_using_a_session_are_every_sessions_records_that_list_it(
        self, db: Db
    ) -> None:
        _sessions(db, "ses-parent", "ses-child", "ses-other")
        parent = make_checkpoint("ses-parent", 1, format=2, uses=["ses-parent"])
        other = make_checkpoint("ses-other", 2, format=2, uses=["ses-other"])
        old_format = make_checkpoint("ses-parent", 3)
        child = _reusing("ses-child", 4, parent)
        for checkpoint in (parent, other, old_format, child):
            db.record_checkpoint(checkpoint, keep=5)
        using_parent = db.checkpoints_using("ses-parent")
        assert _ids(using_parent) == [parent.id, child.id]  # oldest first, across sessions
        assert using_parent[1] == child.model_copy(update={"version": 1})
        assert _ids(db.checkpoints_using("ses-child")) == [child.id]
        assert _ids(db.checkpoints_using("ses-other")) == [other.id]
        assert db.checkpoints_using("ses-none") == []

    def test_checkpoints_using_forgets_deleted_and_pruned_records(self, db: Db) -> None:
        _sessions(db, "ses-parent", "ses-child", "ses-late")
        parent = make_checkpoint("ses-parent", 1, format=2, uses=["ses-parent"])
        db.record_checkpoint(parent, keep=5)
        child = _reusing("ses-child", 2, parent)
        late = _reusing("ses-late", 3, parent)
        db.record_checkpoint(child, keep=5)
        db.record_checkpoint(late, keep=5)
        db.delete_checkpoints("ses-child")
        assert _ids(db.checkpoints_using("ses-parent")) == [parent.id, late.id]
        db.delete_session("ses-late")
        assert _ids(db.checkpoints_using("ses-parent")) == [parent.id]
        newer = _reusing("ses-parent", 4, parent)
        assert _ids(db.record_checkpoint(newer, keep=1)) == [parent.id]
        assert _ids(db.checkpoints_using("ses-parent")) == [newer.id]
