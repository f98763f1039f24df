"""A checkpoint is only kept if it restores: each way the agent can make a checkpoint's restore
fail, done as the agent in a real sandbox, then five more turns (as many as are kept), suspend
and open: the commits, the uncommitted changes and the conversation are all back, and the
checkpoint says what stands in for what could not be put back as it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import last_good_checkpoint
from tests.unit.sessions.world import World, make_world, start

pytestmark = pytest.mark.sandbox

WORK = ("echo one > committed.txt && git add committed.txt && git commit -qm 'first change' && "
        "echo kept > kept.txt && echo edit >> README.md")  # fmt: skip

BAD_TREE = (
    'blob=$(echo hook | git hash-object -w --stdin) && '
    'hooks=$(printf "100644 blob $blob\\tx\\n" | git mktree) && '
    'dotgit=$(printf "040000 tree $hooks\\thooks\\n" | git mktree) && '
    'root=$( (git ls-tree HEAD; printf "040000 tree $dotgit\\t.GIT\\n") | git mktree) && '
    'c=$(git commit-tree "$root" -p HEAD -m planted) && git update-ref HEAD "$c"'
)

ATTACKS = {
    # git refuses to create this branch at restore: the checkpoint records a detached head
    "a branch name git refuses": (
        'sha=$(git rev-parse HEAD) && printf %s "$sha" > ".git/refs/heads/a b" && '
        'echo "ref: refs/heads/a b" > .git/HEAD',
        "detached head",
    ),
    # a tree a checkout refuses: the commits are bundled, the path is left out of the tree
    "a commit whose tree holds .GIT/hooks/x": (BAD_TREE, "refuses to check out"),
    # a shallow file would cut the bundle short of the commits a restore needs
    "a shallow file at HEAD": (
        "echo two > second.txt && git add second.txt && git commit -qm second && "
        "git rev-parse HEAD > .git/shallow",
        None,
    ),
    # HEAD names no commit: the session's base stands in, the changes saved against it
    "a HEAD on an unborn branch": ("echo 'ref: refs/heads/nowhere' > .git/HEAD", "names no commit"),
    # a branch that clashes with one a fresh clone has: the restore leaves HEAD detached
    "a branch that clashes with the clone's main": (
        "git branch -q -D main && git checkout -q -b main/x", None),
}


@pytest.fixture
def small_world(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path
) -> Iterator[World]:
    yield from make_world(tmp_path, db, blobs, keys, remote, session_keep_checkpoints=3,
                          session_max_restore_mb=1)  # fmt: skip


def five_more_turns(world: World) -> None:
    for n in range(5):
        world.service.send("demo", f"run: echo {n} >> later.txt")
        world.service.wait("demo", timeout=60, poll=0.05)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_attack_on_restore_is_normalised_and_every_later_checkpoint_restores(
    world: World, attack: str
) -> None:
    script, warned = ATTACKS[attack]
    start(world, message=f"run: {WORK} && {script}")
    five_more_turns(world)
    session = world.service.get("demo")
    assert session.error is None and session.checkpoint_error is None
    assert all(c.verified for c in session.checkpoints)
    if warned:
        assert all(any(warned in w for w in c.warnings) for c in session.checkpoints), (
            [c.warnings for c in session.checkpoints])
    newest = session.checkpoints[-1]
    world.service.suspend("demo")
    opened = world.open("demo")
    assert opened.restored_from != newest.id  # the suspend's own checkpoint, newer still
    assert opened.restore_skipped == [], opened.restore_skipped
    assert world.sh("demo", "cat kept.txt; tail -1 README.md; cat later.txt") == (
        "kept\nedit\n0\n1\n2\n3\n4\n")
    if attack != "a HEAD on an unborn branch":  # there the commits stand on the base instead
        assert world.sh("demo", "git log --format=%s | grep -c 'first change'") == "1\n"
    assert world.sh("demo", "cat committed.txt") == "one\n"
    assert world.sh("demo", "ls -a ~/.gemini/antigravity-cli/conversations | grep -c db") != "0\n"
    if attack == "a commit whose tree holds .GIT/hooks/x":
        assert world.sh("demo", "ls -a; git cat-file -p HEAD:.GIT/hooks/x").endswith("hook\n")
        assert ".GIT\n" not in world.sh("demo", "ls -a")
        assert any("refuses" in w for w in opened.restore_warnings), opened.restore_warnings
    if attack == "a branch that clashes with the clone's main":
        assert world.sh("demo", "git rev-parse --abbrev-ref HEAD") == "HEAD\n"
        assert any("detached" in w for w in opened.restore_warnings), opened.restore_warnings
    if attack == "a shallow file at HEAD":
        assert world.sh("demo", "cat second.txt") == "two\n"


def test_a_conversation_file_of_compressed_zeros_is_left_out_not_restored_as_gigabytes(
    small_world: World,
) -> None:
    world = small_world
    start(world, message="run: echo kept > kept.txt && "
          "truncate -s 3G ~/.gemini/antigravity-cli/conversations/zeros")  # fmt: skip
    [checkpoint] = world.service.get("demo").checkpoints
    assert any("zeros" in w and "restore cap" in w for w in checkpoint.warnings), (
        checkpoint.warnings)
    assert checkpoint.verified
    world.service.suspend("demo")
    world.open("demo")
    assert world.sh("demo", "cat kept.txt") == "kept\n"
    listed = world.sh("demo", "ls ~/.gemini/antigravity-cli/conversations")
    assert "zeros" not in listed and ".db" in listed


def test_a_restore_stops_at_its_cap_and_falls_back_to_the_last_checkpoint_known_to_restore(
    small_world: World,
) -> None:
    world = small_world
    start(world, message="run: echo kept > kept.txt")
    good = world.service.get("demo").checkpoints[-1]
    assert good.verified
    # Two megabytes of zeros committed: a tiny bundle that a checkout would write in full.
    world.service.send("demo", "run: head -c 2M /dev/zero > zeros && git add zeros && "
                       "git commit -qm zeros")  # fmt: skip
    world.service.wait("demo", timeout=60, poll=0.05)
    five_more_turns(world)
    session = world.service.get("demo")
    assert not any(c.verified for c in session.checkpoints[1:])
    assert session.checkpoints[0].id == good.id  # spared by pruning: keep is 3
    assert len(session.checkpoints) == 4
    assert last_good_checkpoint(session.checkpoints, session) == good.id
    world.service.suspend("demo")
    opened = world.open("demo")
    assert opened.restored_from == good.id
    assert all("past its cap" in s.message for s in opened.restore_skipped), opened.restore_skipped
    assert world.sh("demo", "cat kept.txt; ls zeros 2>&1 || true").startswith("kept\nls: ")


def test_edits_to_files_the_index_hides_are_saved_and_restored(world: World) -> None:
    start(world, message="run: git update-index --skip-worktree README.md && "
          "git update-index --assume-unchanged src/main.py && echo hidden >> README.md && "
          "echo also >> src/main.py")  # fmt: skip
    [checkpoint] = world.service.get("demo").checkpoints
    assert any("hid the changes of 2 tracked files" in w for w in checkpoint.warnings), (
        checkpoint.warnings)
    world.service.suspend("demo")
    world.open("demo")
    assert world.sh("demo", "tail -1 README.md; tail -1 src/main.py") == "hidden\nalso\n"
    assert world.sh("demo", "git status --short") == " M README.md\n M src/main.py\n"
