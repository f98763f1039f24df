"""The session service on the embedded backends, with real sandboxes and the Antigravity
stand-in as the agent (it runs ``run:`` lines of its prompt as shell commands and remembers its
conversation in HOME), so whole lifecycles run in seconds without a model."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.checkpoints.parts import stored_at
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys

from hangar.errors import (
    EnvironmentNotFound,
    InvalidInput,
    InvalidName,
    NameTaken,
    SandboxError,
    SessionBusy,
    SessionNotFound,
    UnknownHarness,
)
from hangar.harnesses.handoff import MARKER
from hangar.models import CheckpointReason, SessionState, TickDue, TurnOutcome, utcnow
from hangar.sessions.service import SessionService
from tests.unit.sessions.world import TURN_ONE, FakeTicks, World, start

pytestmark = pytest.mark.sandbox


def test_a_first_turn_runs_detached_then_ends_idle_with_a_turn_checkpoint(world: World) -> None:
    started = world.service.new("demo", TURN_ONE, "app", harness="antigravity")
    assert (started.session.state, started.turn) == (SessionState.STARTING, 1)
    assert started.session.phase and started.session.phase.step.value == "creating_sandbox"
    [asked] = world.service.get("demo").turns  # the turn is there from the request on
    assert asked.message == TURN_ONE and asked.started_at is None
    turn = world.service.wait("demo", timeout=60, poll=0.05)
    assert turn.outcome is TurnOutcome.EXITED
    assert turn.summary and turn.summary.startswith("Seen 0 earlier messages")
    session = world.service.get("demo")
    assert session.state is SessionState.IDLE
    assert session.harness_session == turn.harness_session
    assert [c.reason for c in session.checkpoints] == [CheckpointReason.TURN]
    assert "idle:" + session.id in world.ticks.due


def test_suspend_releases_the_sandbox_and_a_later_send_resumes_everything(world: World) -> None:
    start(world)
    first = world.service.get("demo")
    suspended = world.service.suspend("demo")
    assert suspended.state is SessionState.SUSPENDED and suspended.sandbox_id is None
    assert world.sandboxes.list() == []

    world.service.send("demo", "turn two: what do you remember")
    turn = world.service.wait("demo", timeout=60, poll=0.05)
    assert turn.summary == "Seen 2 earlier messages; the task began with: " + TURN_ONE
    session = world.service.get("demo")
    assert session.harness_session == first.harness_session
    assert session.sandbox_id and session.sandbox_id != first.sandbox_id
    assert world.sh("demo", "git log -1 --format=%s; cat notes.txt; git diff --stat | tail -1") == (
        "first change\nnote\n 1 file changed, 1 insertion(+)\n"
    )
    reasons = [c.reason for c in session.checkpoints]
    assert reasons == [CheckpointReason.TURN, CheckpointReason.SUSPEND, CheckpointReason.TURN]


def test_two_concurrent_sends_start_exactly_one_turn(world: World) -> None:
    start(world)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def send(n: int) -> None:
        barrier.wait()
        try:
            world.service.send("demo", f"wait-for: /tmp/release\nconcurrent {n}")
            outcomes.append("started")
        except SessionBusy:
            outcomes.append("busy")

    threads = [threading.Thread(target=send, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["busy", "started"]
    with pytest.raises(SessionBusy, match="busy"):
        world.service.send("demo", "a third while the turn runs")
    world.sh("demo", "touch /tmp/release")
    assert world.service.wait("demo", timeout=60, poll=0.05).outcome is TurnOutcome.EXITED
    assert len(world.service.get("demo").turns) == 2


def test_a_sandbox_destroyed_from_outside_leaves_a_destroy_checkpoint_and_resumes(
    world: World,
) -> None:
    start(world)
    sandbox = world.service.resolve("demo").sandbox_id
    assert sandbox
    world.sh("demo", "echo late > late.txt")
    world.service.sandboxes.destroy(sandbox)  # through the policy, as any caller but a suspend
    session = world.service.get("demo")
    assert session.state is SessionState.SUSPENDED and session.sandbox_id is None
    assert session.checkpoints[-1].reason is CheckpointReason.DESTROY
    world.open("demo")
    assert world.sh("demo", "cat late.txt") == "late\n"


def test_a_sandbox_lost_without_its_hook_during_a_turn_suspends_the_session_to_resume(
    world: World,
) -> None:
    start(world)
    world.service.send("demo", "wait-for: /tmp/never\nstuck turn")
    world.settle("demo")
    sandbox = world.service.resolve("demo").sandbox_id
    assert sandbox and world.service.resolve("demo").state is SessionState.ACTIVE
    world.sandboxes.destroy(sandbox)  # as a host restart would: no hook, no checkpoint
    world.service.wait("demo", timeout=60, poll=0.05)  # the watch notices (wait looks too)
    session = world.service.get("demo")
    assert session.state is SessionState.SUSPENDED and session.sandbox_id is None
    assert session.turns[-1].outcome is TurnOutcome.INTERRUPTED
    assert session.checkpoints[-1].reason is CheckpointReason.TURN  # the last good one
    world.service.send("demo", "run: cat committed.txt")
    assert world.service.wait("demo", timeout=60, poll=0.05).outcome is TurnOutcome.EXITED
    assert world.sh("demo", "cat committed.txt notes.txt") == "one\nnote\n"


def test_a_turn_that_fails_to_start_leaves_the_session_idle_with_its_housekeeping(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    start(world)
    session_id = world.service.resolve("demo").id
    world.ticks.due.clear()

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise SandboxError("the run could not start")

    monkeypatch.setattr("hangar.sessions.turns.start_turn", refuse)
    world.service.send("demo", "next")
    assert world.service.wait("demo", timeout=60, poll=0.05).error_code == "sandbox_error"
    # The turn is recorded failed first, then the session goes back to IDLE: wait for both.
    deadline = time.monotonic() + 30
    while (session := world.service.get("demo")).state is SessionState.STARTING:
        assert time.monotonic() < deadline, "the session stayed STARTING"
        time.sleep(0.02)
    assert session.state is SessionState.IDLE and session.sandbox_id
    assert session.turns[-1].outcome is TurnOutcome.FAILED
    assert {f"idle:{session_id}", "reap"} <= set(world.ticks.due)


def test_the_reaper_takes_expired_sandboxes_through_the_pre_destroy_hook(world: World) -> None:
    start(world)
    session = world.service.resolve("demo")
    world.db.update_session(session.model_copy(update={"sandbox_expires_at": utcnow()}))
    reaped = world.service.reap()
    assert reaped == [session.sandbox_id]
    after = world.service.get("demo")
    assert after.state is SessionState.SUSPENDED
    assert after.checkpoints[-1].reason is CheckpointReason.DESTROY


def test_the_reaper_takes_a_sandbox_whose_session_is_gone_once_past_its_grace(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hangar.sandboxes import SandboxSpec
    from hangar.sessions import housekeeping
    from hangar.sessions.sandbox import SESSION_LABEL

    start(world)
    own = world.service.resolve("demo").sandbox_id
    orphan = world.sandboxes.create(SandboxSpec(labels={SESSION_LABEL: "ses-deleted"}))
    unlabelled = world.sandboxes.create(SandboxSpec())
    assert world.service.reap() == []  # a start may still be about to record it
    monkeypatch.setattr(housekeeping, "ORPHAN_SECONDS", 0)
    assert world.service.reap() == [orphan.id]
    assert {i.id for i in world.sandboxes.list()} == {own, unlabelled.id}
    assert world.service.get("demo").state is SessionState.IDLE


def test_an_idle_session_suspends_itself_but_not_while_a_shell_runs(world: World) -> None:
    start(world, idle_minutes=0.0001)
    session = world.service.resolve("demo")
    ran: list[int] = []

    def shell() -> None:
        ran.append(world.service.exec("demo", ["bash", "-c", "while [ ! -e /tmp/done ]; do sleep 0.05; done"]))

    runner = threading.Thread(target=shell)
    runner.start()
    try:
        for _ in range(200):  # bounded wait until the shell has touched the session
            if world.service.resolve("demo").last_active_at > session.last_active_at:
                break
            threading.Event().wait(0.01)
        world.service.handle_tick(TickDue(key="idle:x", kind="idle", due_at=utcnow(),
                                          payload={"session": session.id}))  # fmt: skip
        assert world.service.resolve("demo").state is SessionState.IDLE, "the shell is activity"
    finally:
        world.sh("demo", "touch /tmp/done")
        runner.join()
    assert ran == [0]
    # activity_grace_seconds is 0 here, so only the running shell kept it up: once it ended
    # (and the tiny idle time passed), the idle tick suspends.
    for _ in range(200):
        world.service.handle_tick(TickDue(key="idle:x", kind="idle", due_at=utcnow(),
                                          payload={"session": session.id}))  # fmt: skip
        if world.service.resolve("demo").state is SessionState.SUSPENDED:
            break
        threading.Event().wait(0.01)
    after = world.service.get("demo")
    assert after.state is SessionState.SUSPENDED
    assert after.checkpoints[-1].reason is CheckpointReason.SUSPEND


def test_idle_zero_means_never_suspend(world: World) -> None:
    start(world, idle_minutes=0)
    session = world.service.resolve("demo")
    world.service.handle_tick(TickDue(key="idle:x", kind="idle", due_at=utcnow(),
                                      payload={"session": session.id}))  # fmt: skip
    assert world.service.resolve("demo").state is SessionState.IDLE
    assert f"idle:{session.id}" not in world.ticks.due


def test_an_interval_checkpoint_is_taken_only_when_something_changed(world: World) -> None:
    start(world)
    session = world.service.resolve("demo")
    tick = TickDue(key=f"interval:{session.id}", kind="interval", due_at=utcnow(),
                   payload={"session": session.id})  # fmt: skip
    world.service.handle_tick(tick)
    assert len(world.db.list_checkpoints(session.id)) == 1
    world.sh("demo", "echo more >> notes.txt")
    world.service.handle_tick(tick)
    checkpoints = world.db.list_checkpoints(session.id)
    assert [c.reason for c in checkpoints] == [CheckpointReason.TURN, CheckpointReason.INTERVAL]


def test_a_restarted_service_finishes_a_turn_that_ended_while_it_was_down(
    world: World, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys
) -> None:
    world.service.new("demo", "wait-for: /tmp/release\nslow turn", "app", harness="antigravity")
    world.settle("demo")
    world.ticks.stop()  # the first service goes away
    world.sh("demo", "touch /tmp/release")
    restarted = SessionService(world.service.settings, db, blobs, keys, world.sandboxes, FakeTicks())
    turn = restarted.wait("demo", timeout=60, poll=0.05)
    assert turn.outcome is TurnOutcome.EXITED
    assert restarted.get("demo").state is SessionState.IDLE


def test_archive_drops_the_checkpoints_and_keeps_the_turns(world: World) -> None:
    start(world)
    archived = world.service.archive("demo")
    assert archived.state is SessionState.ARCHIVED and archived.sandbox_id is None
    detail = world.service.get("demo")
    assert detail.checkpoints == [] and len(detail.turns) == 1 and detail.turns[0].summary
    assert not [k for k in world.blobs.list() if "/ckp-" in k]


def test_delete_removes_the_session_and_everything_it_stored(world: World) -> None:
    start(world)
    session_id = world.service.resolve("demo").id
    world.service.delete("demo")
    with pytest.raises(SessionNotFound):
        world.service.get("demo")
    assert not [k for k in world.blobs.list() if session_id in k]
    assert world.sandboxes.list() == []


def test_fork_restores_one_checkpoint_into_new_sessions_that_hand_off(world: World) -> None:
    start(world)
    forks = world.fork("demo", 2)
    assert [f.name for f in forks] == ["demo-fork-1", "demo-fork-2"]
    for fork in forks:
        detail = world.service.get(fork.name)
        assert detail.state is SessionState.IDLE and detail.fork_from
        assert [c.reason for c in detail.checkpoints] == [CheckpointReason.MANUAL]
        assert world.sh(fork.name, "git log -1 --format=%s; cat notes.txt") == "first change\nnote\n"
    world.service.send("demo-fork-1", "continue on the fork")
    turn = world.service.wait("demo-fork-1", timeout=60, poll=0.05)
    assert turn.handoff and turn.outcome is TurnOutcome.EXITED
    assert "turn one: start the work" in (turn.summary or "")


def test_a_fork_that_cannot_restore_is_failed_and_leaves_no_sandbox(world: World) -> None:
    start(world)
    world.service.suspend("demo")
    session = world.service.get("demo")
    newest = world.db.get_checkpoint(session.id, session.checkpoints[-1].id)
    for part in newest.parts:  # its manifest gone: it cannot restore
        world.blobs.delete(stored_at(newest, part))
    [asked] = world.service.fork("demo", 1)
    fork = world.settle(asked.name)
    assert fork.state is SessionState.FAILED and fork.error and fork.start_error
    assert fork.start_error.step.value == "restoring"
    assert fork.sandbox_id is None
    assert world.sandboxes.list() == []


def test_the_patch_comes_live_from_the_sandbox_or_from_the_newest_checkpoint(world: World) -> None:
    start(world)
    live = world.service.patch("demo")
    assert b"+note" in live and b"+uncommitted line" in live and b"committed.txt" in live
    world.service.suspend("demo")
    assert world.service.patch("demo") == live


def test_a_turns_log_can_be_read_after_its_sandbox_is_gone(world: World) -> None:
    start(world)
    world.service.suspend("demo")
    log = world.service.log("demo", 1)
    assert b'"type": "init"' in log and b'"type": "result"' in log


def test_secrets_reach_the_turn_but_not_the_checkpoint_or_the_record(world: World) -> None:
    start(world, message="run: echo \"$API_TOKEN\" > token-seen.txt")
    assert world.sh("demo", "cat token-seen.txt") == "tok-123456789\n"
    stored = world.db.get_environment("app").secrets["API_TOKEN"]
    assert "tok-123456789" not in stored
    world.sh("demo", "rm token-seen.txt")
    world.service.suspend("demo")
    for key in world.blobs.list():
        assert b"tok-123456789" not in world.blobs.get(key)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": "Bad Name"}, InvalidName),
        ({"harness": "cursor"}, UnknownHarness),
        ({"env": "nowhere"}, EnvironmentNotFound),
        ({"message": "   "}, InvalidInput),
        ({"idle_minutes": -1}, InvalidInput),
    ],
)
def test_bad_input_to_new_is_refused_and_creates_nothing(
    world: World, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    args: dict[str, Any] = {"name": "demo", "message": "hi", "env": "app", "harness": "antigravity"}
    args.update(kwargs)
    with pytest.raises(error):
        world.service.new(args.pop("name"), args.pop("message"), args.pop("env"), **args)
    assert world.service.list_sessions() == [] and world.sandboxes.list() == []


def test_a_taken_name_is_refused(world: World) -> None:
    start(world)
    with pytest.raises(NameTaken):
        world.service.new("demo", "again", "app", harness="antigravity")
    assert len(world.service.list_sessions()) == 1


def test_an_unreachable_repo_creates_no_environment(world: World, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot be reached"):
        world.service.environments.add("ghost", str(tmp_path / "missing.git"))
    assert [e.name for e in world.service.environments.list()] == ["app"]


def test_the_environments_setup_runs_in_every_new_sandbox_with_its_vars_and_secrets(
    world: World, remote: Path
) -> None:
    world.service.environments.add(
        "with-setup", str(remote), setup='echo "$GREETING $API_TOKEN" > ~/setup-ran && touch .built',
        vars={"GREETING": "hello"}, secrets={"API_TOKEN": "tok-secret"},
    )  # fmt: skip
    world.service.new("built", "hi", "with-setup", harness="antigravity")
    world.service.wait("built", timeout=60, poll=0.05)
    assert world.sh("built", "cat ~/setup-ran; ls .built") == "hello tok-secret\n.built\n"
    world.service.suspend("built")
    world.open("built")
    assert world.sh("built", "cat ~/setup-ran") == "hello tok-secret\n"
    [fork] = world.fork("built", 1)
    assert world.sh(fork.name, "cat ~/setup-ran") == "hello tok-secret\n"


def test_a_failing_setup_fails_the_session_with_the_reason_and_leaves_no_sandbox(
    world: World, remote: Path
) -> None:
    world.service.environments.add("broken", str(remote), setup="echo 'no such tool' >&2; exit 7")
    world.service.new("doomed", "hi", "broken", harness="antigravity")
    session = world.settle("doomed")
    assert session.state is SessionState.FAILED and session.start_error
    assert (session.start_error.step.value, session.start_error.code) == ("running_setup",
                                                                          "sandbox_error")
    assert "setup failed (exit 7): no such tool" in session.start_error.message
    assert world.service.get("doomed").turns[-1].outcome is TurnOutcome.FAILED
    assert world.sandboxes.list() == []


def test_one_turn_gets_exactly_one_turn_checkpoint_under_concurrent_readers(world: World) -> None:
    start(world)
    world.service.send("demo", "wait-for: /tmp/go\nsecond turn")
    world.settle("demo")
    stop = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        while not stop.is_set():
            try:
                world.service.get("demo")
                world.service.wait("demo", timeout=0.2, poll=0.01)
                world.service.patch("demo")
                world.service.log("demo")
            except BaseException as exc:  # reported below
                errors.append(exc)
                return

    readers = [threading.Thread(target=read) for _ in range(4)]
    for r in readers:
        r.start()
    try:
        world.sh("demo", "touch /tmp/go")
        assert world.service.wait("demo", timeout=60, poll=0.01).outcome is TurnOutcome.EXITED
    finally:
        stop.set()
        for r in readers:
            r.join()
    assert not errors, errors
    reasons = [c.reason for c in world.service.get("demo").checkpoints]
    assert reasons == [CheckpointReason.TURN, CheckpointReason.TURN]  # one for each turn


def test_reads_change_nothing(world: World) -> None:
    start(world)
    before = world.service.resolve("demo")
    world.service.get("demo")
    world.service.list_sessions()
    world.service.patch("demo")
    world.service.log("demo")
    assert world.service.resolve("demo") == before


def test_two_shells_opened_at_once_both_hold_their_leases(world: World) -> None:
    start(world)
    barrier = threading.Barrier(2)
    codes: list[int] = []

    def shell() -> None:
        barrier.wait()
        codes.append(world.service.exec("demo", ["sh", "-c", "while [ ! -e /tmp/out ]; do "
                                                 "sleep 0.02; done"]))  # fmt: skip

    shells = [threading.Thread(target=shell) for _ in range(2)]
    for s in shells:
        s.start()
    try:
        deadline = threading.Event()
        for _ in range(500):  # bounded wait for both leases
            if len(world.service.resolve("demo").shells) == 2:
                break
            deadline.wait(0.01)
        assert len(world.service.resolve("demo").shells) == 2
    finally:
        world.sh("demo", "touch /tmp/out")
        for s in shells:
            s.join()
    assert codes == [0, 0] and world.service.resolve("demo").shells == {}


def test_exec_on_a_session_with_no_sandbox_is_refused_until_it_is_opened(world: World) -> None:
    from hangar.errors import SessionNotRunning

    start(world)
    world.service.suspend("demo")
    with pytest.raises(SessionNotRunning):
        world.service.exec("demo", ["true"])
    world.open("demo")
    assert world.service.exec("demo", ["true"]) == 0


def test_deleting_a_session_whose_turn_runs_is_refused_unless_forced(world: World) -> None:
    start(world)
    world.service.send("demo", "wait-for: /tmp/never\nstuck turn")
    world.settle("demo")
    before = world.service.get("demo")
    assert before.state is SessionState.ACTIVE
    with pytest.raises(SessionBusy, match="interrupt it first, or force"):
        world.service.delete("demo")
    after = world.service.get("demo")
    assert (after.state, after.sandbox_id, len(after.turns)) == (
        SessionState.ACTIVE, before.sandbox_id, 2)  # fmt: skip
    world.service.delete("demo", force=True)
    with pytest.raises(SessionNotFound):
        world.service.get("demo")
    assert world.sandboxes.list() == []


def test_delete_destroys_every_sandbox_labelled_with_the_session(world: World) -> None:
    from hangar.sandboxes import SandboxSpec
    from hangar.sessions.sandbox import SESSION_LABEL

    start(world)
    session = world.service.resolve("demo")
    orphan = world.sandboxes.create(SandboxSpec(labels={SESSION_LABEL: session.id}))
    world.service.delete("demo")
    assert [i.id for i in world.sandboxes.list()] == []
    assert orphan.id not in {i.id for i in world.sandboxes.list()}


def test_a_session_whose_harness_cli_is_missing_carries_on_after_a_switch(world: World) -> None:
    world.service.new("lost", TURN_ONE, "app", harness="claude")  # no claude CLI here
    failed = world.service.wait("lost", timeout=60, poll=0.05)
    assert (failed.outcome, failed.error_code, failed.harness) == (
        TurnOutcome.FAILED, "harness_missing", "claude")  # fmt: skip
    assert world.service.get("lost").conversations == {}

    world.service.send("lost", "turn two: try again", harness="antigravity", model="agy-2")
    moved = world.service.wait("lost", timeout=60, poll=0.05)
    assert (moved.outcome, moved.harness, moved.handoff) == (
        TurnOutcome.EXITED, "antigravity", True)  # fmt: skip
    # the stand-in repeats the first prompt of its conversation: the handoff account
    assert MARKER in (moved.summary or "") and "Original task: turn one" in (moved.summary or "")
    session = world.service.get("lost")
    assert (session.harness, session.model) == ("antigravity", "agy-2")
    assert session.conversations["antigravity"].id == session.harness_session == (
        moved.harness_session)  # fmt: skip

    world.service.send("lost", "turn three: and on")
    native = world.service.wait("lost", timeout=60, poll=0.05)
    assert not native.handoff and (native.summary or "").startswith("Seen 2 earlier messages")


def test_a_switch_is_refused_while_a_turn_runs_and_changes_nothing(world: World) -> None:
    world.service.new("busy", "wait-for: /tmp/never\nslow", "app", harness="antigravity")
    world.settle("busy")
    before = world.service.resolve("busy")
    with pytest.raises(SessionBusy):
        world.service.open("busy", harness="codex")
    with pytest.raises(SessionBusy):
        world.service.send("busy", "more", harness="codex")
    assert world.service.resolve("busy").harness == "antigravity"
    assert world.service.resolve("busy").version == before.version


def test_a_sandbox_a_start_makes_while_its_session_is_deleted_goes_with_it(world: World) -> None:
    from hangar.sandboxes import SandboxSpec
    from hangar.sessions.sandbox import SESSION_LABEL

    start(world)
    drop_all = world.service.checkpointer.drop_all

    def racing_start(session_id: str) -> None:
        """A start step makes (and records) its sandbox after the delete's first look."""
        world.sandboxes.create(SandboxSpec(labels={SESSION_LABEL: session_id}))
        drop_all(session_id)

    world.service.checkpointer.drop_all = racing_start  # type: ignore[method-assign]
    world.service.delete("demo", force=True)
    assert world.sandboxes.list() == []
