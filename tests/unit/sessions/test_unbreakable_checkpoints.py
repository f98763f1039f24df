"""Checkpoints the agent cannot break or block: each trick a hostile or careless agent has
played, run from inside a real sandbox as the agent, and after it the newest checkpoint still
restores with every other file in place."""

from __future__ import annotations

import pytest

from hangar.models import CheckpointReason, utcnow
from hangar.sandboxes import SandboxUser
from hangar.sessions.sandbox import checkpoint_target
from tests.unit.sessions.world import World, start

pytestmark = pytest.mark.sandbox

KEEP = "echo kept > kept.txt && echo edit >> README.md"

BRICKS = {
    "an untracked link into .git": "ln -s .git/HEAD gitlink",
    "an untracked .GIT folder": "mkdir -p sub/.GIT && echo '[core]' > sub/.GIT/config",
    "a conversation link elsewhere in HOME": (
        "echo secret > ~/.netrc && mkdir -p ~/.gemini/antigravity-cli/conversations && "
        "ln -s ../../../.netrc ~/.gemini/antigravity-cli/conversations/leak"
    ),
}


def suspend_and_open(world: World, ref: str) -> None:
    newest = world.db.list_checkpoints(world.service.resolve(ref).id)[-1]
    world.service.suspend(ref)
    world.open(ref)
    suspended = world.db.list_checkpoints(world.service.resolve(ref).id)[-1]
    assert suspended.reason is CheckpointReason.SUSPEND and suspended.id != newest.id
    assert world.service.resolve(ref).restored_from == suspended.id  # the newest, no fallback


@pytest.mark.parametrize("trick", list(BRICKS))
def test_a_brick_is_left_out_by_name_and_the_newest_checkpoint_restores(
    world: World, trick: str
) -> None:
    start(world, message=f"run: {KEEP} && {BRICKS[trick]}")
    for _ in range(5):  # as many turns as checkpoints are kept: every one of them restores
        world.service.send("demo", "another turn")
        world.service.wait("demo", timeout=60, poll=0.05)
    checkpoints = world.service.get("demo").checkpoints
    assert all(any("left out" in w for w in c.warnings) for c in checkpoints), trick
    suspend_and_open(world, "demo")
    assert world.sh("demo", "cat kept.txt; tail -1 README.md") == "kept\nedit\n"
    assert world.sh("demo", "ls -a ~/.gemini/antigravity-cli/conversations | grep -c db") != "0\n"


@pytest.mark.parametrize(
    "trick",
    [
        "chmod 000 README.md && echo more > new.txt && chmod 000 new.txt",
        "rm src/main.py && mkfifo src/main.py",
        "mkfifo pipe && python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"",
    ],
)
def test_nothing_the_agent_leaves_in_its_tree_fails_a_checkpoint(world: World, trick: str) -> None:
    start(world, message=f"run: {KEEP} && {trick}")
    session = world.service.get("demo")
    [checkpoint] = session.checkpoints
    assert checkpoint.reason is CheckpointReason.TURN and session.error is None
    if "mkfifo" in trick:
        assert any("FIFO" in w for w in checkpoint.warnings), checkpoint.warnings
    world.service.suspend("demo")
    world.open("demo")
    assert world.sh("demo", "cat kept.txt; tail -1 README.md 2>/dev/null || true").startswith("kept")
    if "chmod 000" in trick:  # saved as they were: the agent finds its unreadable file back
        assert world.sh("demo", "stat -c %a new.txt") == "0\n"
        assert world.sh("demo", "chmod 644 README.md new.txt; tail -1 README.md; cat new.txt") == (
            "edit\nmore\n")


def test_a_lock_held_by_the_agent_does_not_delay_a_checkpoint(world: World) -> None:
    start(world)
    hold = ("exec 9>/tmp/.hangar-checkpoint.lock; flock 9; "
            "sleep 300 </dev/null >/dev/null 2>&1")  # fmt: skip
    world.sh("demo", f"setsid sh -c '{hold}' </dev/null >/dev/null 2>&1 &")
    target = checkpoint_target(world.service.resolve("demo"))
    checkpoint = world.service.checkpointer.take(target, CheckpointReason.MANUAL)
    assert checkpoint is not None


def test_the_agent_cannot_reach_hangars_scratch_space(world: World) -> None:
    start(world)
    session = world.service.resolve("demo")
    assert session.sandbox_id
    for script in ("ls /hangar/tmp", "touch /hangar/tmp/x", "ls /hangar/lib"):
        result = world.sandboxes.exec(session.sandbox_id, ["sh", "-c", script])
        assert not result.ok, script
    listed = world.sandboxes.exec(session.sandbox_id, ["ls", "/hangar/lib"], user=SandboxUser.HANGAR)
    assert listed.ok and listed.stdout.strip()  # the scripts' copies, out of the agent's reach


def _expire(world: World, ref: str) -> None:
    from datetime import timedelta

    session = world.service.resolve(ref)
    world.service._records.update(session.id, sandbox_expires_at=utcnow() - timedelta(seconds=1))


def test_the_reaper_keeps_a_sandbox_whose_checkpoint_fails_and_takes_it_once_it_succeeds(
    world: World,
) -> None:
    start(world)
    sandbox = world.service.resolve("demo").sandbox_id
    world.sh("demo", "echo unsaved > unsaved.txt && mv .git .git-away")
    _expire(world, "demo")
    assert world.service.reap() == []
    kept = world.service.get("demo")
    assert kept.sandbox_id == sandbox and kept.state.value == "idle"
    assert kept.checkpoint_error and "destroy checkpoint failed" in kept.checkpoint_error
    assert kept.sandbox_expires_at is not None and kept.sandbox_expires_at > utcnow()
    assert world.sandboxes.get(sandbox).id == sandbox
    world.sh("demo", "mv .git-away .git")
    _expire(world, "demo")
    assert world.service.reap() == [sandbox]
    gone = world.service.get("demo")
    assert gone.state.value == "suspended" and gone.checkpoint_error is None
    assert gone.checkpoints[-1].reason is CheckpointReason.DESTROY
    world.open("demo")
    assert world.sh("demo", "cat unsaved.txt") == "unsaved\n"


def test_a_forced_destroy_goes_ahead_and_the_session_resumes_from_its_last_good_checkpoint(
    world: World,
) -> None:
    from hangar.errors import DestroyVetoed

    start(world)
    sandbox = world.service.resolve("demo").sandbox_id
    assert sandbox
    world.sh("demo", "echo lost > lost.txt && mv .git .git-away")
    with pytest.raises(DestroyVetoed):
        world.service.destroy_sandbox(sandbox)
    assert world.sandboxes.get(sandbox).id == sandbox
    world.service.destroy_sandbox(sandbox, force=True)
    forced = world.service.get("demo")
    assert forced.state.value == "suspended" and forced.sandbox_id is None
    world.open("demo")
    assert world.sh("demo", "cat committed.txt; ls lost.txt 2>/dev/null; true") == "one\n"


class ForgingSandboxes:
    """Our sandboxes with the checkpoint's answer replaced by ``answer``: what an agent able to
    write into the checkpoint's output would do."""

    def __init__(self, inner: object, answer: bytes) -> None:
        self.inner, self.answer = inner, answer

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def exec(self, sandbox_id: str, argv: list[str], **kw: object) -> object:
        from hangar.sandboxes import ExecResult

        out = kw.get("stdout")
        if out is not None and hasattr(out, "write"):
            out.write(self.answer)
        return ExecResult(0, b"" if out is not None else self.answer, b"")


def test_an_unchanged_answer_that_was_not_asked_for_fails_the_checkpoint(world: World) -> None:
    import json

    from hangar.errors import CheckpointError
    from hangar.checkpoints.checkpointer import Checkpointer

    start(world)
    target = checkpoint_target(world.service.resolve("demo"))
    before = world.db.list_checkpoints(target.session_id)
    forged = json.dumps({"fingerprint": "f" * 64, "head": "0" * 40, "branch": "x",
                         "unchanged": True}).encode() + b"\n"  # fmt: skip
    checkpointer = Checkpointer(world.db, world.blobs, world.service.keys,
                                ForgingSandboxes(world.sandboxes, forged),  # type: ignore[arg-type]
                                world.service.settings)  # fmt: skip
    for skip in (False, True):  # asked for none; asked for a skip against another fingerprint
        with pytest.raises(CheckpointError, match="answered 'unchanged'"):
            checkpointer.take(target, CheckpointReason.INTERVAL, skip_if_unchanged=skip)
    assert world.db.list_checkpoints(target.session_id) == before


def test_a_head_with_100000_paths_a_checkout_refuses_still_checkpoints_and_restores(
    world: World,
) -> None:
    # Each name is refused on its own (".git:N"), so none stands for another: left out one by
    # one, they would be 100,000 pathspecs on a git command line.
    plant = (
        "blob=$(echo x | git hash-object -w --stdin) && "
        "root=$( (git ls-tree HEAD; python3 -c 'import sys; [print(\"100644 blob %s\\t.git:%d\" "
        "% (sys.argv[1], i)) for i in range(100000)]' $blob)"
        " | git mktree) && "
        'c=$(git commit-tree "$root" -p HEAD -m planted) && git update-ref HEAD "$c"'
    )
    start(world, message=f"run: {plant} && {KEEP}")
    [checkpoint] = world.service.get("demo").checkpoints
    [refused] = [w for w in checkpoint.warnings if "refuses" in w]
    assert ".git:0 " in refused and "and 99992 more" in refused, refused
    suspend_and_open(world, "demo")
    assert world.sh("demo", "cat kept.txt; tail -1 README.md") == "kept\nedit\n"
    assert world.sh("demo", "git log -1 --format=%s") == "planted\n"
