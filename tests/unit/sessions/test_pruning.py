"""Pruning never loses the last good checkpoint: a property test over random sequences of good
and broken checkpoints, prunes and restores, run on the rule itself and through SQLite."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from hangar.db.sqlite import SqliteDb
from hangar.models import Checkpoint, Session, SkippedCheckpoint, last_good_checkpoint, pruned
from hangar.testing.db import make_checkpoint, make_session


@dataclass
class Story:
    """One session's history: which checkpoints really restore (``good``), what is kept."""

    session: Session
    kept: list[Checkpoint] = field(default_factory=list)
    good: set[str] = field(default_factory=set)
    restored_once: bool = False

    def restore(self) -> bool:
        """Try the kept checkpoints newest first, as the restorer does; record the outcome on
        the session as startup does. True when one restored."""
        skipped = []
        for checkpoint in reversed(self.kept):
            if checkpoint.id in self.good:
                self.session = self.session.model_copy(update={
                    "restored_from": checkpoint.id,
                    "restore_skipped": skipped,
                })  # fmt: skip
                self.restored_once = True
                return True
            skipped.append(SkippedCheckpoint(checkpoint_id=checkpoint.id, code="restore_failed",
                                             message="broken"))  # fmt: skip
        self.session = self.session.model_copy(update={"restore_skipped": skipped})
        return False


def play(rng: random.Random, story: Story, steps: int, record) -> None:  # noqa: ANN001
    """Random steps: record a checkpoint (good or broken; a broken one passes the checks as
    often as not, the case the checks missed) under a random keep, or restore."""
    minute = 0
    for _ in range(steps):
        if rng.random() < 0.75:
            minute += 1
            good = rng.random() < 0.4
            checkpoint = make_checkpoint(story.session.id, minute,
                                         verified=good or rng.random() < 0.5)  # fmt: skip
            if good:
                story.good.add(checkpoint.id)
            keep = rng.randint(1, 5)
            story.kept = record(story, checkpoint, keep)
            assert len(story.kept) <= keep + 2
            if story.restored_once:  # a restore worked once: one that restores is still kept
                assert story.good & {c.id for c in story.kept}
            newest_checked = next((c for c in reversed(story.kept) if c.verified), None)
            failed = {s.checkpoint_id for s in story.session.restore_skipped}
            if newest_checked and newest_checked.id not in failed:
                assert last_good_checkpoint(story.kept, story.session) in (
                    newest_checked.id, story.session.restored_from)
        else:
            restored = story.restore()
            if story.restored_once:
                assert restored, "a checkpoint that restored before was pruned"


def record_with_rule(story: Story, checkpoint: Checkpoint, keep: int) -> list[Checkpoint]:
    history = story.kept + [checkpoint]
    gone = {c.id for c in pruned(history, keep, story.session)}
    return [c for c in history if c.id not in gone]


def test_random_histories_always_keep_a_checkpoint_that_restored_once_and_the_newest_checked() -> None:
    for seed in range(400):
        rng = random.Random(seed)
        story = Story(session=make_session("owner", id="ses-1"))
        play(rng, story, rng.randint(5, 40), record_with_rule)


def test_random_histories_through_sqlite_prune_exactly_as_the_rule_says(tmp_path: Path) -> None:
    db = SqliteDb(tmp_path / "hangar.db")
    for seed in range(40):
        rng = random.Random(1000 + seed)
        session = db.create_session(make_session(f"s{seed}", id=f"ses-{seed}"))
        story = Story(session=session)

        def record(story: Story, checkpoint: Checkpoint, keep: int) -> list[Checkpoint]:
            stored = db.get_session(story.session.id)
            db.update_session(stored.model_copy(update={
                "restored_from": story.session.restored_from,
                "restore_skipped": story.session.restore_skipped,
            }))  # fmt: skip
            expected = record_with_rule(story, checkpoint, keep)
            db.record_checkpoint(checkpoint, keep)
            kept = db.list_checkpoints(story.session.id)
            assert [c.id for c in kept] == [c.id for c in expected]
            return kept

        play(rng, story, rng.randint(5, 25), record)
