"""No crash at any point leaves a session stuck or loses work: a fault injector on the ports
kills the work (as a dead process would) before a change it makes, for every distinct change of
each of the session's flows; a restarted service (its claims' leases run out) then carries on,
and the session ends where it should with everything in place.

A change is distinct by where hangar makes it and where it made the change before: the rounds
of a loop (a watch polling a run, the parts of one checkpoint) repeat the same pair, and a crash
in the third round leaves what a crash in the second did. An exec that only reads (a run's
status, its stderr, a ``rev-parse``) is no change: a crash before it is the crash before the
change that follows. So each flow is crashed at its distinct changes, which a timing-dependent
count of polls does not change.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import hangar
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import BackendError, CheckpointError, SourcePruned
from hangar.exchange.context import ContextItem
from hangar.processes import runs
from hangar.keys.local import LocalKeys
from hangar.models import Checkpoint, CheckpointReason, SessionState as S, TurnOutcome, utcnow
from hangar.sandboxes.local import LocalSandboxes
from hangar.checkpoints.checkpointer import PART_THREADS, Checkpointer
from hangar.checkpoints.chunks import packs_prefix
from hangar.sessions.environments import EnvironmentChange
from hangar.sessions.service import SessionService
from hangar.checkpoints.sweep import PackSweeper
from hangar.sessions.turns import MAX_FINISH_TRIES
from tests.rig import Engine, make_engine
from tests.unit.sessions.world import STANDIN, FakeTicks

pytestmark = pytest.mark.sandbox

LEASE = 0.2  # seconds: a dead worker's claim is taken over at once
CRASHES_AT_ONCE = 3  # crashes run side by side: most of their time is waits on sandboxes
CHANGES = {
    "db": {"create_session", "update_session", "add_turn", "update_turn", "record_checkpoint",
           "delete_session", "delete_checkpoints"},
    "sandboxes": {"create", "exec", "put_file", "destroy"},
    "blobs": {"put", "delete"},
    "ticks": {"schedule", "cancel"},
}  # fmt: skip
"""The calls that change something: a crash is injected before each one of them."""


class Crash(BaseException):
    """The process died here (a BaseException: nothing in hangar may catch it)."""


HANGAR_CODE = str(Path(hangar.__file__).parent)


def only_reads(port: str, name: str, args: tuple[Any, ...]) -> bool:
    """Whether the call is an exec that reads and changes nothing in the sandbox."""
    if (port, name) != ("sandboxes", "exec"):
        return False
    argv = list(args[1])
    return (argv[:2] == ["test", "-f"] or argv[:3] == ["sh", "-c", runs._READ]
            or (argv[:2] == ["sh", "-c"] and argv[2].startswith("tail -c"))
            or (argv[0].endswith("/launch") and argv[1:2] == ["attach"]
                and argv[3:4] == ["stream"])  # following a run
            or (argv[:2] == ["git", "-C"] and argv[3] == "rev-parse")
            or argv[0] in ("find", "head"))  # fmt: skip (head: a turn's steps read)


def call_site() -> tuple[tuple[str, int], ...]:
    """Where in hangar the change is made: its frames in hangar's code, innermost first."""
    frame, site = sys._getframe(2), []
    while frame is not None:
        if frame.f_code.co_filename.startswith(HANGAR_CODE):
            site.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return tuple(site)


class Fuse:
    """Numbers the distinct changes the flow makes through the ports it wraps (on the flow's own
    thread and those storing a checkpoint's parts for it: a lease keeper's renewals come and go
    with time), a change being its call site and the call site of the change before it, and
    blows before the first change numbered ``at``."""

    def __init__(self, at: int | None) -> None:
        self.at = at
        self.seen: dict[tuple[Any, ...], int] = {}
        self.last: tuple[Any, ...] = ()
        self.thread = threading.get_ident()
        self.lock = threading.Lock()

    def counts(self) -> bool:
        return (threading.get_ident() == self.thread
                or threading.current_thread().name.startswith(PART_THREADS))  # fmt: skip

    @property
    def count(self) -> int:
        return len(self.seen)

    def tick(self, port: str, name: str, args: tuple[Any, ...]) -> None:
        if not self.counts() or only_reads(port, name, args):
            return
        site = (port, name, call_site())
        with self.lock:
            change, self.last = (self.last, site), site
            if change in self.seen:
                return
            self.seen[change] = len(self.seen) + 1
            if self.at is not None and self.count == self.at:
                raise Crash(f"crashed before change {self.count}: {name} at {site[2][:1]}")


class Faulty:
    """A port whose changing calls go through the fuse first."""

    def __init__(self, inner: Any, port: str, fuse: Fuse) -> None:
        self._inner, self._port, self._fuse = inner, port, fuse

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name not in CHANGES[self._port]:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self._fuse.tick(self._port, name, args)
            return value(*args, **kwargs)

        return call


@dataclass
class Rig:
    settings: Settings
    db: SqliteDb
    blobs: LocalBlobs
    keys: LocalKeys
    sandboxes: LocalSandboxes
    ticks: FakeTicks

    def service(self, fuse: Fuse | None = None) -> SessionService:
        if fuse is None:
            return SessionService(self.settings, self.db, self.blobs, self.keys, self.sandboxes,
                                  self.ticks)  # fmt: skip
        return SessionService(self.settings, Faulty(self.db, "db", fuse),  # type: ignore[arg-type]
                              Faulty(self.blobs, "blobs", fuse), self.keys,  # type: ignore[arg-type]
                              Faulty(self.sandboxes, "sandboxes", fuse),  # type: ignore[arg-type]
                              Faulty(self.ticks, "ticks", fuse))  # type: ignore[arg-type]

    def drive(self, service: SessionService, done: Callable[[], bool], timeout: float = 60) -> None:
        """Deliver ticks until ``done`` (or a Crash): starts and watches at once (they are
        hints; early is only sooner), claims when due."""
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"never settled: {service.get('demo')!r:.2000}"
            now = utcnow()
            ready = sorted((d for d in self.ticks.due.values() if d.kind in ("start", "watch")
                            or (d.kind == "claim" and d.due_at <= now)), key=lambda d: d.due_at)
            if not ready:
                time.sleep(0.01)
                continue
            tick = ready[0]
            service.handle_tick(tick)  # a Crash propagates: the tick stays, as in a ticker
            if self.ticks.due.get(tick.key) is tick:
                del self.ticks.due[tick.key]


@pytest.fixture
def make_rig(tmp_path: Path, remote: Path) -> Iterator[Callable[[str], Rig]]:
    made: list[Rig] = []

    def make(label: str) -> Rig:
        root = tmp_path / label
        harnesses = root / "agy-harness"
        (harnesses / "bin").mkdir(parents=True)
        shutil.copy(STANDIN, harnesses / "bin" / "agy")
        (harnesses / "bin" / "agy").chmod(0o755)
        settings = Settings.build(data_dir=root / "data", harness_dir=harnesses,
                                  claim_lease_seconds=LEASE, activity_grace_seconds=0)  # fmt: skip
        db = SqliteDb.from_url(settings.db)
        rig = Rig(settings, db, LocalBlobs.from_url(settings.session_store),
                  LocalKeys.from_url(settings.keys),
                  LocalSandboxes(root / "sandboxes", harnesses), FakeTicks())  # fmt: skip
        rig.service().environments.add("app", str(remote), vars={
            "GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "A",
            "GIT_COMMITTER_EMAIL": "a@x"})  # fmt: skip
        made.append(rig)
        return rig

    yield make
    for rig in made:
        for info in rig.sandboxes.list():
            rig.sandboxes.destroy(info.id)
        rig.db.close()


FIRST = "run: echo one > one.txt && git add one.txt && git commit -qm one && echo wip > wip.txt"


def settled(service: SessionService, *states: S) -> Callable[[], bool]:
    def check() -> bool:
        session = service.resolve("demo")
        return session.state in states and session.claim is None

    return check


def new_session(rig: Rig, service: SessionService) -> None:
    service.new("demo", FIRST, "app", harness="antigravity")
    rig.drive(service, settled(service, S.IDLE, S.FAILED))


SEALED = "run: echo two > two.txt\n" + "- the rest of a long task\n" * 3000
"""A message over 64 KiB: sealed into blobs before any record names it."""


def send(rig: Rig, service: SessionService) -> None:
    """A second turn, whose message is sealed in blobs."""
    service.send("demo", SEALED)
    rig.drive(service, settled(service, S.IDLE, S.FAILED))


COUNT = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def send_with_schema(rig: Rig, service: SessionService) -> None:
    """A turn whose result does not match its schema: a repair run follows (the stand-in
    writes nothing in it), then the turn records result_error."""
    service.send("demo", "run: hangar-agent result '{\"n\": \"x\"}'", output_schema=COUNT)
    rig.drive(service, settled(service, S.IDLE, S.FAILED))


CONTEXT_PATCH = ("diff --git a/ctx.txt b/ctx.txt\nnew file mode 100644\n--- /dev/null\n"
                 "+++ b/ctx.txt\n@@ -0,0 +1 @@\n+from the laptop\n")  # fmt: skip


def send_with_context(rig: Rig, service: SessionService) -> None:
    """A turn with a file and a patch: sealed at the request, put in place before the run."""
    service.send("demo", "run: cat \"$HANGAR_IO/in/2/note.txt\" ctx.txt > seen.txt",
                 context=[ContextItem(kind="file", name="note.txt", content="a note\n"),
                          ContextItem(kind="patch", content=CONTEXT_PATCH)])  # fmt: skip
    rig.drive(service, settled(service, S.IDLE, S.FAILED))


HANG = "and now hang"


def hang_on(rig: Rig, service: SessionService) -> None:
    """The stand-in hangs, saying nothing, on a prompt holding HANG (after its run: lines)."""
    service.environments.update("app", EnvironmentChange(vars={"AGY_STANDIN_HANG_ON": HANG}))


def send_past_its_limit(rig: Rig, service: SessionService) -> None:
    """A turn that hangs past its time limit (a tenth of a second): the watch records why,
    stops its run, and the turn ends TIMED_OUT with its work checkpointed."""
    service.send("demo", f"run: echo late > late.txt\n{HANG}", turn_timeout_minutes=1 / 600)
    rig.drive(service, settled(service, S.IDLE, S.FAILED))


def fork(rig: Rig, service: SessionService) -> None:
    service.fork("demo", 1)
    rig.drive(service, lambda: service.resolve("demo-fork-1").state in (S.IDLE, S.FAILED)
              and service.resolve("demo-fork-1").claim is None)  # fmt: skip


def suspend(rig: Rig, service: SessionService) -> None:
    service.suspend("demo")


def open_(rig: Rig, service: SessionService) -> None:
    service.open("demo")
    rig.drive(service, settled(service, S.IDLE, S.FAILED))


FLOWS: dict[str, tuple[list[Callable[[Rig, SessionService], None]], Callable[[Rig, SessionService], None]]] = {
    # name: (what comes before, unharmed; the flow that crashes)
    "new and its first turn": ([], new_session),
    "a second turn, its message sealed in blobs": ([new_session], send),
    "a turn and its result's repair run": ([new_session], send_with_schema),
    "a turn with a file and a patch": ([new_session], send_with_context),
    "a turn stopped past its time limit": ([new_session, hang_on], send_past_its_limit),
    "suspend": ([new_session], suspend),
    "fork": ([new_session], fork),
    "open into a new sandbox": ([new_session, suspend], open_),
}


def recover(rig: Rig) -> SessionService:
    """A restarted service: once the dead one's claims have run out (it renews nothing now),
    it carries their work on."""
    deadline = time.monotonic() + 10
    while any(s.claim is not None and s.claim.until > utcnow() for s in rig.db.list_sessions()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    service = rig.service()
    service.recover()
    if rig.db.list_sessions():
        rig.drive(service, settled(service, S.IDLE, S.SUSPENDED, S.FAILED))
    return service


def check_usable(rig: Rig, service: SessionService) -> None:
    """The session is usable (a failed start, retried, works) and its work is all there."""
    if not rig.db.list_sessions():  # it died before the session was made: ask again
        new_session(rig, service)
    session = service.resolve("demo")
    assert session.state in (S.IDLE, S.SUSPENDED, S.FAILED) and session.claim is None
    if service.get("demo").turns[0].outcome is not TurnOutcome.EXITED:
        service.send("demo", FIRST)  # the first turn never ran: as a user would, ask again
        rig.drive(service, settled(service, S.IDLE))
        assert service.wait("demo", timeout=60, poll=0.02).outcome is TurnOutcome.EXITED
    service.send("demo", "run: cat one.txt wip.txt > both.txt")
    rig.drive(service, settled(service, S.IDLE))
    turn = service.wait("demo", timeout=60, poll=0.02)
    assert turn.outcome is TurnOutcome.EXITED, turn
    sandbox = service.resolve("demo").sandbox_id
    assert sandbox
    both = rig.sandboxes.exec(sandbox, ["cat", "/workspace/app/both.txt"]).stdout
    assert both == b"one\nwip\n", "the first turn's work came through the crash"
    for info in rig.sandboxes.list():  # no sandbox left behind: each is its session's own
        owner = rig.db.get_session(info.labels["hangar.session"])
        assert owner.sandbox_id == info.id, (info, owner.state)
    for t in rig.db.list_turns(session.id):  # context is put in place once, whatever died
        if t.stopped_for is not None:  # a turn stopped past its limit says so
            assert t.outcome is TurnOutcome.TIMED_OUT, t
        assert t.error_code != "context_rejected", t
        if t.context and t.outcome is TurnOutcome.EXITED:
            seen = rig.sandboxes.exec(sandbox, ["cat", "/workspace/app/seen.txt"]).stdout
            assert seen == b"a note\nfrom the laptop\n", seen
    for shown in service.get("demo").turns:  # no record names a message blob that is gone
        assert shown.message_ref is None or shown.message == SEALED, shown.n
    for other in rig.db.list_sessions():
        assert other.claim is None and other.state is not S.STARTING, other
        for t in rig.db.list_turns(other.id):  # a schema's turn always ends with a verdict
            if t.output_schema is not None and t.outcome is TurnOutcome.EXITED:
                assert (t.result is None) != (t.result_error is None), t


@pytest.mark.parametrize("flow", list(FLOWS))
def test_a_crash_before_any_change_of_a_flow_leaves_a_session_that_works(
    make_rig: Callable[[str], Rig], flow: str
) -> None:
    before, crashing = FLOWS[flow]
    # A clean run counts the changes the flow makes.
    rig = make_rig("count")
    for step in before:
        step(rig, rig.service())
    fuse = Fuse(None)
    crashing(rig, rig.service(fuse))
    total = fuse.count
    assert total > 3

    def crash_at(k: int) -> None:
        rig = make_rig(f"crash-{k}")
        for step in before:
            step(rig, rig.service())
        fuse = Fuse(k)
        try:
            crashing(rig, rig.service(fuse))
        except Crash:
            pass
        else:  # a flow that took another way (timing): it never made change k
            assert fuse.count < k
        check_usable(rig, recover(rig))

    # Each crash has a world of its own (its folders, database, sandboxes): they run side by
    # side, as many sessions of one hangar do, and most of their time is waits on sandboxes.
    with ThreadPoolExecutor(CRASHES_AT_ONCE) as pool:
        for _ in pool.map(crash_at, range(1, total + 1)):
            pass


def test_a_turns_checkpoint_that_outlasts_the_lease_keeps_the_finish_claim(
    make_rig: Callable[[str], Rig],
) -> None:
    rig = make_rig("slow-checkpoint")
    service = rig.service()
    new_session(rig, service)
    take = service.checkpointer.take
    seen: list[bool] = []

    def slow_take(*args: Any, **kwargs: Any) -> Any:
        """The checkpoint goes on for several leases; meanwhile the claim must stay live."""
        until = service.resolve("demo").claim.until  # type: ignore[union-attr]
        deadline = time.monotonic() + 10 * LEASE
        while (now := service.resolve("demo")).claim and now.claim.until <= until:
            if time.monotonic() > deadline:
                break
            time.sleep(LEASE / 10)
        claim = service.resolve("demo").claim
        seen.append(claim is not None and claim.until > utcnow())
        return take(*args, **kwargs)

    service.checkpointer.take = slow_take  # type: ignore[method-assign]
    service.send("demo", "run: echo two > two.txt")
    rig.drive(service, settled(service, S.IDLE, S.FAILED))
    assert seen == [True]  # renewed while it ran: nobody could take the finish over
    session = service.resolve("demo")
    assert session.state is S.IDLE and session.error is None
    assert [c.reason.value for c in rig.db.list_checkpoints(session.id)][-1] == "turn"


def test_a_finish_that_always_raises_fails_its_turn_after_its_tries_and_the_session_works(
    make_rig: Callable[[str], Rig],
) -> None:
    """Whatever a finish meets (here what reads the handback raises every time), the turn ends
    FAILED with the reason after MAX_FINISH_TRIES tries, one per take-over (by a client's
    ``wait``, or by the claim tick), and the session is IDLE with its sandbox and its work: the
    next send works."""
    rig = make_rig("finish-raises")
    service = rig.service()
    new_session(rig, service)
    tries: list[int] = []

    def broken(*args: Any, **kwargs: Any) -> Any:
        tries.append(1)
        raise RuntimeError("the handback reader broke")

    read = service.handbacks.read
    service.handbacks.read = broken  # type: ignore[method-assign]
    for n, finisher in ((2, "wait"), (3, "ticks")):
        tries.clear()
        service.send("demo", f"run: echo {n} > {n}.txt")
        if finisher == "wait":  # the client's wait finishes it (it never raises), no ticks
            rig.drive(service, lambda: service.resolve("demo").state is S.ACTIVE)
            turn = service.wait("demo", timeout=60, poll=0.02)
        else:
            rig.drive(service, settled(service, S.IDLE, S.FAILED))  # no tick raised
            turn = service.get("demo").turns[-1]
        assert len(tries) == MAX_FINISH_TRIES, finisher
        assert turn.n == n and turn.outcome is TurnOutcome.FAILED and turn.finished_at, turn
        assert turn.error_code == "internal" and "the handback reader broke" in (turn.summary or "")
        session = service.resolve("demo")
        assert session.state is S.IDLE and session.claim is None and session.sandbox_id
        assert "the handback reader broke" in (session.error or "")
        done = rig.sandboxes.exec(session.sandbox_id, ["cat", f"/workspace/app/{n}.txt"])
        assert done.stdout == f"{n}\n".encode()

    service.handbacks.read = read  # type: ignore[method-assign]
    service.send("demo", "run: cat one.txt 2.txt 3.txt > both.txt")
    rig.drive(service, settled(service, S.IDLE))
    assert service.wait("demo", timeout=60, poll=0.02).outcome is TurnOutcome.EXITED
    assert service.resolve("demo").error is None


# Format 2: a crash at each step of storing a checkpoint. The checkpointer runs over ports that
# die at the chosen call (and at every change after it, as a killed process makes none): packs
# written and no manifest; the manifest and no record; the record committed and never answered;
# the record answered and the pruned checkpoint's parts and packs never deleted. A db error
# instead of a death, after the commit or before it, is checked as format 1's are
# (test_checkpoint_record_retry). After each, every recorded checkpoint restores, what the crash
# orphaned is unreferenced packs only, swept once past their grace, and the next take works.


@dataclass
class Fault:
    """Where a take breaks: at the first changing call ``at`` matches (``"port.name"`` and its
    arguments), before the call or ``after`` it returns. With ``kills`` the process dies there
    (Crash, then again at every change after it); otherwise the call raises BackendError once
    and everything goes on."""

    at: Callable[[str, tuple[Any, ...]], bool]
    after: bool = False
    kills: bool = True
    state: str = "armed"  # "armed", "dead" or "spent"

    def port(self, inner: Any, port: str) -> Any:
        return _Breaking(inner, port, self)

    def blow(self, call_name: str) -> None:
        self.state = "dead" if self.kills else "spent"
        if self.kills:
            raise Crash(f"the process died at {call_name}")
        raise BackendError(f"deadline exceeded at {call_name}")


class _Breaking:
    def __init__(self, inner: Any, port: str, fault: Fault) -> None:
        self._inner, self._port, self._fault = inner, port, fault

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name not in CHANGES[self._port]:
            return value
        fault, call_name = self._fault, f"{self._port}.{name}"

        def call(*args: Any, **kwargs: Any) -> Any:
            if fault.state == "dead":
                raise Crash(f"{call_name} after the process died")
            hit = fault.state == "armed" and fault.at(call_name, args)
            if hit and not fault.after:
                fault.blow(call_name)
            result = value(*args, **kwargs)
            if hit:
                fault.blow(call_name)
            return result

        return call


def _is(call_name: str, key_part: str = "") -> Callable[[str, tuple[Any, ...]], bool]:
    return lambda name, args: name == call_name and (not key_part or key_part in str(args[0]))


def _root_put(name: str, args: tuple[Any, ...]) -> bool:
    """The manifest's root being stored: among the packs, the one put sealed as a stream (a
    part), where the packs' own puts are lists of sealed chunks."""
    return name == "blobs.put" and "/packs/" in str(args[0]) and not isinstance(args[1], list)


FORMAT2_FAULTS: dict[str, tuple[Callable[[], Fault], bool]] = {
    # name: (the fault, whether the breaking take ends recorded)
    "after its packs, before its manifest": (lambda: Fault(_root_put), False),
    "after its manifest, before its record": (lambda: Fault(_is("db.record_checkpoint")), False),
    "after its record's commit, before the answer": (
        lambda: Fault(_is("db.record_checkpoint"), after=True), True),
    "after its record, before the pruned checkpoint's parts are deleted": (
        lambda: Fault(_is("blobs.delete")), True),
    "after the pruned checkpoint's manifest is deleted, before its packs are swept": (
        lambda: Fault(_is("blobs.delete", "/packs/")), True),
    "a db error after the record's commit": (
        lambda: Fault(_is("db.record_checkpoint"), after=True, kills=False), True),
    "a db error before the record's commit": (
        lambda: Fault(_is("db.record_checkpoint"), kills=False), False),
}  # fmt: skip


def _packs(blobs: LocalBlobs, session_id: str) -> set[str]:
    return set(blobs.list(packs_prefix(session_id)))


def _check_restores(engine: Engine, recorded: list[Checkpoint], wrote: dict[str, str]) -> None:
    """Every one of ``recorded`` restores into a fresh sandbox with the work it was taken of."""
    fresh, workspace = engine.sandbox()
    for checkpoint in recorded:
        engine.restorer.restore_checkpoint(checkpoint, fresh, workspace.repo_dir)
        assert engine.sh(fresh, "cat edit.txt") == wrote[checkpoint.id], checkpoint.id
    engine.sandboxes.destroy(fresh)


@pytest.mark.parametrize("case", list(FORMAT2_FAULTS))
def test_a_format2_checkpoint_broken_at_any_step_leaves_every_record_restorable_and_only_packs_a_sweep_collects(
    case: str, settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
    sandboxes: LocalSandboxes, remote: Path,
) -> None:  # fmt: skip
    make_fault, recorded_anyway = FORMAT2_FAULTS[case]
    fault = make_fault()
    chosen = settings.replace(session_keep_checkpoints=1)
    assert chosen.checkpoint_format == 2
    engine = make_engine(chosen, db, blobs, keys, sandboxes, remote)
    session = engine.session.id
    sandbox, workspace = engine.sandbox()
    wrote: dict[str, str] = {}

    def take(checkpointer: Checkpointer, n: int) -> Checkpoint | None:
        engine.sh(sandbox, f"echo {n} > edit.txt && echo {n} >> README.md")
        checkpoint = checkpointer.take(engine.target(sandbox, workspace), CheckpointReason.TURN)
        if checkpoint is not None:
            wrote[checkpoint.id] = f"{n}\n"
        return checkpoint

    take(engine.checkpointer, 1)
    second = take(engine.checkpointer, 2)  # prunes the first (keep 1)
    assert second is not None and second.format == 2 and second.source is not None
    breaking = Checkpointer(fault.port(db, "db"), fault.port(blobs, "blobs"), keys, sandboxes,
                            chosen)  # fmt: skip
    try:
        third = take(breaking, 3)
    except (Crash, CheckpointError):
        third = None
    assert fault.state != "armed", "the take never reached the step"
    [kept] = db.list_checkpoints(session)
    assert (kept.id != second.id) == recorded_anyway
    if third is None and kept.id != second.id:  # it died after its commit: its work is there
        wrote[kept.id] = "3\n"
    listed = {pack for c in db.checkpoints_using(session) for pack in c.packs}
    orphans = _packs(blobs, session) - listed
    if fault.kills or recorded_anyway:  # its packs, or the pruned one's, are left behind
        assert orphans, "the case left nothing behind: it tests nothing"
    else:  # a record refused for sure: the take deleted what it wrote
        assert not orphans
    _check_restores(engine, [kept], wrote)
    # The orphans wait out their grace (a take in flight could be about to record them), then go.
    assert engine.checkpointer.sweeper.sweep(session) == 0
    assert _packs(blobs, session) == listed | orphans
    assert PackSweeper(db, blobs, timedelta(0)).sweep(session) == len(orphans)
    assert _packs(blobs, session) == listed
    _check_restores(engine, [kept], wrote)
    # The next take works, from the kept one.
    fourth = take(engine.checkpointer, 4)
    assert fourth is not None and fourth.source == kept.id
    assert [c.id for c in db.list_checkpoints(session)] == [fourth.id]
    assert _packs(blobs, session) == set(fourth.packs)
    _check_restores(engine, [fourth], wrote)


class _PrunedMeanwhile:
    """A Db whose first ``record_checkpoint`` is preceded by ``meanwhile()``: another take of
    the session records (keep 1) and so prunes the checkpoint the one recording reuses."""

    def __init__(self, inner: SqliteDb, meanwhile: Callable[[], object]) -> None:
        self.inner = inner
        self.meanwhile: Callable[[], object] | None = meanwhile
        self.refused: list[str] = []

    def record_checkpoint(self, checkpoint: Checkpoint, keep: int) -> list[Checkpoint]:
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()
        try:
            return self.inner.record_checkpoint(checkpoint, keep)
        except SourcePruned:
            self.refused.append(checkpoint.id)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_take_whose_source_is_pruned_before_its_record_is_recorded_whole_and_leaks_nothing(
    settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
    sandboxes: LocalSandboxes, remote: Path,
) -> None:  # fmt: skip
    chosen = settings.replace(session_keep_checkpoints=1)
    engine = make_engine(chosen, db, blobs, keys, sandboxes, remote)
    session = engine.session.id
    sandbox, workspace = engine.sandbox()
    target = engine.target(sandbox, workspace)
    engine.sh(sandbox, "echo 1 > edit.txt")
    first = engine.take(sandbox, workspace)
    others: list[Checkpoint | None] = []

    def another_take() -> None:  # a take of the same session, done while this one was packing
        others.append(engine.checkpointer.take(target, CheckpointReason.INTERVAL))

    racing = _PrunedMeanwhile(db, another_take)
    checkpointer = Checkpointer(racing, blobs, keys, sandboxes, chosen)
    engine.sh(sandbox, "echo 2 > edit.txt && echo 2 >> README.md")
    taken = checkpointer.take(target, CheckpointReason.TURN)
    [other] = others
    assert other is not None and other.source == first.id
    assert len(racing.refused) == 1  # its first record named the pruned source
    assert taken is not None and taken.source is None and taken.source_session is None
    assert [c.id for c in db.list_checkpoints(session)] == [taken.id]
    # Nothing leaks: what the refused try wrote, and what the pruned ones held, are all gone.
    assert set(blobs.list(f"sessions/{session}/")) == set(taken.packs)  # its manifest among them
    assert {p.key for p in taken.parts} <= set(taken.packs)
    assert all(pack.startswith(packs_prefix(session)) for pack in taken.packs)
    _check_restores(engine, [taken], {taken.id: "2\n"})
