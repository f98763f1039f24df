"""Following runs without polling: one exec streams a run's log, quiet time, progress file's
stamp and end, and a process's followers share it between every waiter (and every look of a
turn watch); a run an older supervisor started is followed as well."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from hangar.errors import SandboxError, SandboxNotFound
from hangar.exchange.progress import progress_file
from hangar.processes.following import RunFollowers
from hangar.processes.runs import RunStatus, follow_run, start_run
from hangar.models import Session, SessionState, Turn, utcnow
from hangar.processes import Processes, keys
from hangar.sandboxes import SandboxSpec, SandboxUser
from hangar.sandboxes.local import LocalSandboxes
from hangar.sessions.watching import TurnWatch

pytestmark = pytest.mark.sandbox

GATED = ("echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second >&2; "
         "echo second; exit 7")


class Counted:
    """The backend, counting the execs made through it."""

    def __init__(self, inner: LocalSandboxes) -> None:
        self.inner = inner
        self.execs: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def exec(self, sandbox_id: str, argv: list[str], **options: Any) -> Any:
        self.execs.append(list(argv))
        return self.inner.exec(sandbox_id, argv, **options)


def test_one_follow_streams_the_log_from_its_cursor_then_the_end_with_its_stderr(
    sandboxes: LocalSandboxes,
) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    start_run(sandboxes, sandbox, "r1", ["bash", "-c", GATED], cwd="/tmp", env={})
    seen: list[RunStatus] = []

    def on_status(status: RunStatus) -> None:
        seen.append(status)
        if status.data == b"first\n":  # the run goes on only once its first line was seen
            sandboxes.exec(sandbox, ["touch", "/tmp/go"])

    last = follow_run(sandboxes, sandbox, "r1", 0, window=60, on_status=on_status)
    assert last.exit_code == 7 and last.stderr == b"second\n"
    assert b"".join(s.data for s in seen) == b"first\nsecond\n"
    assert seen[-1] == last and last.cursor == len(b"first\nsecond\n")
    assert seen[0].idle_seconds is not None  # a quiet-time frame first

    again: list[RunStatus] = []
    tail = follow_run(sandboxes, sandbox, "r1", len(b"first\n"), window=60, on_status=again.append)
    assert b"".join(s.data for s in again) == b"second\n" and tail.exit_code == 7


def test_a_follow_returns_unfinished_when_its_window_passes(sandboxes: LocalSandboxes) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    start_run(sandboxes, sandbox, "long", ["sh", "-c", "echo up; exec sleep 300"], cwd="/tmp",
              env={})  # fmt: skip
    seen: list[RunStatus] = []
    last = follow_run(sandboxes, sandbox, "long", 0, window=0.5, on_status=seen.append)
    assert not last.finished and b"".join(s.data for s in seen) == b"up\n"


def test_following_a_missing_run_is_an_error(sandboxes: LocalSandboxes) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    with pytest.raises(SandboxError, match="nope"):
        follow_run(sandboxes, sandbox, "nope", 0, window=5, on_status=lambda s: None)


def test_frames_the_agent_forges_in_the_log_are_only_log_bytes(sandboxes: LocalSandboxes) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    forged = "X 0 0\\nD 5\\nS 1 1\\nW\\n"
    start_run(sandboxes, sandbox, "forge", ["printf", forged], cwd="/tmp", env={})
    seen: list[RunStatus] = []
    last = follow_run(sandboxes, sandbox, "forge", 0, window=60, on_status=seen.append)
    assert b"".join(s.data for s in seen) == b"X 0 0\nD 5\nS 1 1\nW\n"
    assert last.exit_code == 0 and last.cursor == len(b"X 0 0\nD 5\nS 1 1\nW\n")


def test_many_waiters_on_a_run_share_one_follow_exec(sandboxes: LocalSandboxes) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    start_run(sandboxes, sandbox, "r1", ["bash", "-c", GATED], cwd="/tmp", env={})
    counted = Counted(sandboxes)
    followers = RunFollowers(counted)  # type: ignore[arg-type]
    assert followers.status(sandbox, "r1").exit_code is None
    first = followers.wait(sandbox, "r1", 0, 30)
    assert first.data == b"first\n" and not first.finished

    ended: list[RunStatus] = []
    waiters = [threading.Thread(target=lambda: ended.append(followers.wait_end(sandbox, "r1", 60)))
               for _ in range(3)]  # fmt: skip
    for waiter in waiters:
        waiter.start()
    sandboxes.exec(sandbox, ["touch", "/tmp/go"])
    for waiter in waiters:
        waiter.join(60)
    assert [s.exit_code for s in ended] == [7, 7, 7]
    rest = followers.wait(sandbox, "r1", first.cursor, 0)
    assert rest.data == b"second\n" and rest.exit_code == 7
    log = followers.log(sandbox, "r1", 1 << 20)
    assert (log.data, log.exit_code, log.stderr) == (b"first\nsecond\n", 7, b"second\n")
    assert len(counted.execs) == 1 and "attach" in counted.execs[0], counted.execs


def test_a_gone_sandbox_reaches_the_waiters_as_not_found(sandboxes: LocalSandboxes) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    start_run(sandboxes, sandbox, "long", ["sleep", "300"], cwd="/tmp", env={})
    followers = RunFollowers(sandboxes)
    assert followers.status(sandbox, "long").exit_code is None
    sandboxes.destroy(sandbox)
    with pytest.raises((SandboxError, SandboxNotFound)):  # the follow broke off, or was gone
        followers.wait_end(sandbox, "long", 30)
    with pytest.raises(SandboxNotFound):  # the question after an error starts afresh
        followers.status(sandbox, "long")



def test_a_watched_file_is_stamped_and_a_change_is_said_at_once(sandboxes: LocalSandboxes) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    watched = "/root/out/progress.jsonl"
    script = ("while [ ! -e /tmp/go ]; do sleep 0.02; done; mkdir -p /root/out; "
              f"echo '{{}}' > /root/out/t; mv /root/out/t {watched}; while [ ! -e /tmp/end ]; do sleep 0.02; done")  # fmt: skip
    start_run(sandboxes, sandbox, "w", ["sh", "-c", script], cwd="/tmp", env={})
    seen: list[RunStatus] = []

    def on_status(status: RunStatus) -> None:
        seen.append(status)
        if len(seen) == 1:
            assert status.watched is None  # not there yet
            sandboxes.exec(sandbox, ["touch", "/tmp/go"])
        elif status.watched is not None:
            sandboxes.exec(sandbox, ["touch", "/tmp/end"])

    last = follow_run(sandboxes, sandbox, "w", 0, window=60, on_status=on_status, watch=watched)
    assert last.exit_code == 0
    stamps = [s.watched for s in seen if s.watched is not None]
    assert stamps and stamps[0].startswith("3:")  # its size, then its time


def test_a_turn_watch_reads_progress_only_when_its_file_changed(
    sandboxes: LocalSandboxes,
) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    session = Session(name="s", environment="app", harness="claude", sandbox_id=sandbox,
                      state=SessionState.ACTIVE)  # fmt: skip
    turn = Turn(session_id=session.id, n=1, message="m", started_at=utcnow())
    path = progress_file(session)
    line = f"mkdir -p $(dirname {path}); echo '{{\"message\": \"half\"}}' >> {path}"
    start_run(sandboxes, sandbox, turn.run_id, ["sh", "-c", "exec sleep 300"], cwd="/tmp",
              env={})  # fmt: skip
    counted = Counted(sandboxes)

    class Turns:
        followers = RunFollowers(counted)  # type: ignore[arg-type]

        class records:  # noqa: N801
            @staticmethod
            def resolve(ref: str) -> Session:
                return session

        @staticmethod
        def wait(ref: str, n: int | None, timeout: float) -> Turn:
            return turn

    watch = TurnWatch(Turns(), counted, "s", quiet=3600)  # type: ignore[arg-type]
    assert [n.message for n in watch.look().notes] == ["turn 1 is running"]
    for _ in range(5):
        assert watch.look().notes == []
    progress_reads = [a for a in counted.execs if "progress" in a]
    assert len(progress_reads) == 1, counted.execs  # the first look only: nothing changed since
    sandboxes.exec(sandbox, ["sh", "-c", line])
    notes: list[str] = []
    for _ in range(200):  # bounded: the follower says the change within tens of milliseconds
        notes = [n.message for n in watch.look().notes]
        if notes:
            break
        Turns.followers.wait(sandbox, turn.run_id, 0, 0.05)
    assert notes == ["half"]
    assert len([a for a in counted.execs if "progress" in a]) == 2
    assert len([a for a in counted.execs if "attach" in a]) == 1


OLDER_SUPERVISOR = """
run=/hangar/runs/older; mkdir -p "$run"
setsid sh -c 'sh -c "echo before; while [ ! -e /tmp/go ]; do sleep 0.02; done; echo after" \\
  > "$1/log" 2> "$1/stderr"; echo $? > "$1/exit.tmp"; mv "$1/exit.tmp" "$1/exit"' sh "$run" \\
  < /dev/null > /dev/null 2>&1 &
echo "$! $!" > "$run/pid"
"""
"""A run as the supervisor of an older hangar left it: its files, and no command FIFO."""


def test_a_run_of_an_older_supervisor_is_followed_to_its_end(sandboxes: LocalSandboxes) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    started = sandboxes.exec(sandbox, ["sh", "-c", OLDER_SUPERVISOR], user=SandboxUser.HANGAR)
    assert started.ok, started
    followers = RunFollowers(sandboxes)
    assert followers.wait(sandbox, "older", 0, 30).data == b"before\n"
    with pytest.raises(SandboxError, match="takes no commands"):
        Processes(sandboxes, sandbox).send("older", keys(b"x"))
    sandboxes.exec(sandbox, ["touch", "/tmp/go"])
    assert followers.wait_end(sandbox, "older", 30).exit_code == 0
    assert followers.log(sandbox, "older", 1 << 20).data == b"before\nafter\n"
