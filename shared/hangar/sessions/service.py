"""The session service (spec 000 §5): new, send, open, wait, keep, suspend, archive, delete,
fork, patch, log and exec, over the ports.

Nothing lives in memory between calls. Every change of state is a named transition
(:mod:`hangar.sessions.transitions`), compare-and-set, and claimed states carry a lease, so no
crash leaves a session stuck. Slow work never runs in a call: ``new``, ``send``, ``open`` and
``fork`` check everything, claim the session for a start and answer at once (STARTING, with
``phase`` saying where it is); the start goes on in ``start`` ticks
(:mod:`hangar.sessions.startup`). A turn runs detached; the watch tick or ``wait`` finishes it
(:mod:`hangar.sessions.turns`). Reads (``get``, ``list_sessions``, ``patch``, ``log``) change
nothing.

The parts, each owning one concept: :mod:`.records` (lookups, read-modify-writes),
:mod:`.transitions`, :mod:`.schedule` (the ticks), :mod:`.sandbox` (a session's sandbox and the
pieces of a start), :mod:`.turns`, :mod:`.startup`, :mod:`.suspends`, :mod:`.forks`,
:mod:`.housekeeping` (the ticks' handlers). Two concurrent transitions of one session: exactly
one wins, the other gets SessionBusy; an action the session's state never allows: InvalidState.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO, Literal

from hangar import agent
from hangar.blobs import Blobs
from hangar.config import Settings
from hangar.db import Db, SessionOrder
from hangar.errors import (
    HangarError,
    InvalidInput,
    InvalidState,
    MessageTooLarge,
    NotFound,
    SandboxError,
    SandboxNotFound,
    SessionBusy,
    SessionNotFound,
    TurnEnded,
)
from hangar.exchange.artifacts import Listed
from hangar.exchange.progress import ProgressLine, read_progress
from hangar.exchange.context import Accepted, ContextItem, ContextStore
from hangar.exchange.uploads import Uploads
from hangar.exchange.results import result_key, result_of
from hangar.exchange.schemas import check_schema
from hangar.harnesses import Invocation, get_harness
from hangar.processes.following import RunFollowers
from hangar.processes.runs import stop_run
from hangar.keys import Keys
from hangar.models import (
    MAX_IDLE_MINUTES,
    NAME_MAX,
    CheckpointReason,
    PermissionMode,
    Session,
    SessionDetail,
    SessionState as S,
    StartIntent,
    StartKind,
    TickDue,
    Turn,
)
from hangar.sandboxes import HANGAR_TMP, Sandboxes, SandboxInfo, SandboxUser
from hangar.sandboxes.policy import guarded
from hangar.checkpoints.checkpointer import Checkpointer
from hangar.sessions.conversations import switch
from hangar.sessions.environments import Environments, check_name
from hangar.sessions.forks import Forks
from hangar.sessions.handbacks import HandBacks
from hangar.sessions.housekeeping import Housekeeping
from hangar.sessions.pools import PoolKeeper
from hangar.sessions.messages import Kept, MessageStore
from hangar.sessions import pull
from hangar.sessions.pull import PullAnswer
from hangar.sessions.records import Records
from hangar.checkpoints.restore import Restorer
from hangar.sessions.sandbox import SESSION_LABEL, Provisioner, sandbox_alive, take_checkpoint
from hangar.sessions.schedule import Schedule
from hangar.sessions.shells import Shells, talking
from hangar.sessions.startup import Startup
from hangar.sessions.approvals import Approvals
from hangar.sessions.steering import Steering
from hangar.sessions.steps import Shown, steps_key
from hangar.sessions.suspends import Suspends
from hangar.sessions.timeouts import check_minutes
from hangar.sessions.transitions import Transitions
from hangar.sessions.turns import Turns, run_log_key
from hangar.sessions.watching import TurnWatch
from hangar.sessions.workspace import repo_dir_for
from hangar.ticks import Ticks

# SESSION_LABEL is re-exported: the API reads a sandbox's owner by it.
__all__ = ["MAX_IDLE_MINUTES", "SESSION_LABEL", "SessionService", "Started"]

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class Started:
    """What ``new`` and ``send`` answer at once: the session (STARTING, or ACTIVE when its
    sandbox was ready) and the number of the turn it starts, whose record exists already."""

    session: Session
    turn: int
    delivered: Literal["turn", "steer"] = "turn"
    """``steer``: the message joined turn ``turn``, which was running (a live turn)."""


ENDING_SECONDS = 120.0
"""How long a steer that came as its turn ended waits for the turn to be finished (its
checkpoint taken) before it starts the next turn with the message."""


class SessionService:
    """Sessions over the ports. Construct once per process; register :meth:`handle_tick` with
    the ticker (``ticks.start(service.handle_tick)``)."""

    def __init__(
        self,
        settings: Settings,
        db: Db,
        blobs: Blobs,
        keys: Keys,
        sandboxes: Sandboxes,
        ticks: Ticks,
    ) -> None:
        self.settings = settings
        self.db = db
        self.blobs = blobs
        self.keys = keys
        # The policy (pre-destroy hooks, the veto) over the port: the runtime's own, or made
        # here over a bare backend.
        self.sandboxes = sandboxes = guarded(sandboxes)
        self.ticks = ticks
        self.environments = Environments(db, keys)
        self.checkpointer = Checkpointer(db, blobs, keys, sandboxes, settings)
        self.restorer = Restorer(db, blobs, keys, sandboxes, settings)
        self._records = Records(db)
        self._transitions = Transitions(db, settings.claim_lease_seconds)
        self._schedule = Schedule(settings, ticks)
        self.followers = RunFollowers(sandboxes)
        """Who follows the runs in sandboxes for this process (a turn's, a start's clone and
        setup): every wait, watch and poll reads what they saw instead of calling in."""
        self._provisioner = Provisioner(settings, sandboxes, self.environments, self.restorer,
                                        self.followers)  # fmt: skip
        self.handbacks = HandBacks(settings, db, blobs, keys, sandboxes)
        self.uploads = Uploads(settings, blobs, keys)
        self.context = ContextStore(settings, blobs, keys, self.uploads)
        self.messages = MessageStore(blobs, keys)
        self._turns = Turns(
            settings, db, blobs, keys, sandboxes, self.environments, self.checkpointer,
            self._records, self._transitions, self._schedule, self.handbacks, self.context,
            self.messages, self.followers,
        )  # fmt: skip
        self._startup = Startup(
            settings, db, sandboxes, self.environments, self._provisioner, self.restorer,
            self.checkpointer, self._records, self._transitions, self._schedule, self._turns,
        )  # fmt: skip
        self._suspends = Suspends(sandboxes, self.checkpointer, self._provisioner,
                                  self._records, self._transitions, self._schedule)  # fmt: skip
        self._shells = Shells(settings, sandboxes, self.environments, self._records,
                              self._schedule, self._turns)  # fmt: skip
        self._forks = Forks(db, sandboxes, self.checkpointer, self._records, self._startup)
        self._steering = Steering(settings, db, sandboxes, self._turns, self._transitions,
                                  self.messages)  # fmt: skip
        self._approvals = Approvals(settings, db, self._turns, self._steering, self.followers,
                                    self.environments, self._schedule)  # fmt: skip
        self.pools = PoolKeeper(settings, db, sandboxes, self._schedule)
        """The environments' warm pools on their hours (:mod:`.pools`); its ``clock`` is the
        seam tests set."""
        self._housekeeping = Housekeeping(
            settings, db, sandboxes, self.checkpointer, self._records, self._transitions,
            self._schedule, self._turns, self._startup, self._suspends, self.pools,
            self._approvals,
        )  # fmt: skip
        sandboxes.add_pre_destroy_hook(self._before_destroy)

    # -- lookups (reads change nothing) -----------------------------------------------------

    def resolve(self, ref: str) -> Session:
        """A session by id or by name; SessionNotFound naming ``ref`` otherwise."""
        return self._records.resolve(ref)

    def get(self, ref: str) -> SessionDetail:
        """The session with its turns (each with its result, wherever it is kept) and
        checkpoints, as they are."""
        session = self.resolve(ref)
        turns = [self.with_result(t) for t in self.db.list_turns(session.id)]
        return SessionDetail(
            **session.model_dump(),
            turns=turns,
            checkpoints=self.db.list_checkpoints(session.id),
        )

    def list_sessions(self) -> list[Session]:
        """Every session, newest first (every page of them)."""
        out: list[Session] = []
        cursor: str | None = None
        while True:
            page, cursor = self.page(PAGE, cursor)
            out += page
            if cursor is None:
                return out

    def names_of(self, session_ids: list[str]) -> dict[str, str]:
        """The names of the sessions with these ids (those that exist), by id."""
        names: dict[str, str] = {}
        for session_id in session_ids:
            with contextlib.suppress(SessionNotFound):
                names[session_id] = self.db.get_session(session_id).name
        return names

    def page(
        self, limit: int, cursor: str | None = None, *, state: S | None = None,
        prefix: str | None = None, order: SessionOrder = "created",
    ) -> tuple[list[Session], str | None]:
        """One page of sessions, newest first by creation or, with ``order`` ``"activity"``,
        by last activity, and the cursor of the next (None: the last); only those in
        ``state``, and only those whose name starts with ``prefix`` (case-sensitive; empty:
        every name), when given. A cursor goes on after the session it names, and holds the
        order and filters it was made with: paging never shows a session twice (see
        :meth:`~hangar.db.Db.page_sessions`). InvalidInput (naming the field) for a cursor
        this service did not make or made for another order or other filters, or a prefix
        with a NUL byte or longer than a name can be."""
        if prefix:
            _check_prefix(prefix)
        filters = (None if state is None else S(state).value, prefix or None)
        after = _decode_cursor(cursor, filters, order) if cursor else None
        sessions = self.db.page_sessions(limit + 1, after, state=state, prefix=prefix or None,
                                         order=order)  # fmt: skip
        more = len(sessions) > limit
        sessions = sessions[:limit]
        last = _encode_cursor(sessions[-1], filters, order) if more and sessions else None
        return sessions, last

    # -- starting work ----------------------------------------------------------------------

    def new(
        self,
        name: str,
        message: str,
        env: str,
        *,
        harness: str = "claude",
        model: str | None = None,
        title: str | None = None,
        idle_minutes: float | None = None,
        output_schema: dict[str, Any] | None = None,
        context: Sequence[ContextItem] = (),
        turn_timeout_minutes: float | None = None,
        permission_mode: PermissionMode = PermissionMode.AUTO,
    ) -> Started:
        """Create a session and ask for its first turn; answers at once (STARTING). Everything
        is checked before anything is created (name, harness, environment, message, schema,
        context, time limit). ``output_schema``: the JSON Schema of the turns' results (later
        sends inherit it); ``context``: what comes with the message
        (:mod:`hangar.exchange.context`), sealed before this answers; ``turn_timeout_minutes``:
        the turn's time limit (default: the environment's, else the setting's; see
        :mod:`.timeouts`); ``permission_mode``: who decides its turns' commands and edits
        (:meth:`_check_permissions`). CapacityExhausted, nothing made, when no sandbox place is
        left (:mod:`hangar.sessions.capacity`)."""
        check_name("session", name)
        get_harness(harness)
        self._check_permissions(harness, permission_mode)
        environment = self.environments.require(env)
        _check_message(message, self._message_limit(harness))
        schema = None if output_schema is None else check_schema(output_schema)
        minutes = 30 if idle_minutes is None else _check_idle(idle_minutes)
        limit = check_minutes(turn_timeout_minutes, "turn_timeout_minutes")
        self._startup.capacity.check()
        session = Session(
            name=name,
            title=title or _title(message),
            environment=environment.name,
            harness=harness,
            model=model,
            repo=environment.repo,
            base_branch=environment.branch,
            idle_minutes=minutes,
            output_schema=schema,
            permission_mode=permission_mode,
        )
        with self._storing(session.id, 1, message, context) as (kept, accepted):
            intent = StartIntent(kind=StartKind.NEW, turn=1, message=kept.message,
                                 message_ref=kept.ref, context=accepted.refs,
                                 timeout_minutes=limit)  # fmt: skip
            made = self._startup.create(session, intent)
        self._turns.ensure(made)
        self.context.settle(accepted)
        return Started(made, 1)

    def _check_permissions(self, harness: str, mode: PermissionMode) -> None:
        """InvalidInput, naming why, for a permission mode the turns on ``harness`` cannot
        have: asking needs a live turn on a CLI whose requests hangar's driver answers (Claude
        Code, Codex)."""
        if mode is PermissionMode.AUTO:
            return
        if not get_harness(harness).can_ask:
            raise InvalidInput(f"permission mode {mode.value} needs a harness whose requests "
                               f"hangar can answer (claude, codex), not {harness}",
                               field="permission_mode")  # fmt: skip
        if not self.settings.live_turns:
            raise InvalidInput(f"permission mode {mode.value} needs live turns, and "
                               "HANGAR_LIVE_TURNS is false here", field="permission_mode")

    def approve(self, ref: str, approval_id: str, *, allow: bool, message: str = "") -> Turn:
        """Allow (or deny, with ``message`` for the agent) what the running turn's agent waits
        to do; the turn. ApprovalNotFound for an approval that does not wait (unknown,
        answered already, or its turn over); TurnEnded when the turn ended meanwhile."""
        return self._approvals.decide(self.resolve(ref), approval_id, allow, message)

    def _message_limit(self, harness: str) -> tuple[int, str]:
        """The largest message a turn on ``harness`` takes, in bytes, and what sets it."""
        most = self.settings.max_message_kb << 10
        own = get_harness(harness).max_message_bytes
        if own is not None and own < most:
            return own, f"what the {harness} CLI can be given"
        return most, "HANGAR_MAX_MESSAGE_KB"

    def send(self, ref: str, message: str, *, harness: str | None = None,
             model: str | None = None, output_schema: dict[str, Any] | None = None,
             context: Sequence[ContextItem] = (),
             turn_timeout_minutes: float | None = None, if_idle: bool = False,
             permission_mode: PermissionMode | None = None) -> Started:  # fmt: skip
        """Ask for the next turn (resuming the session first when it is suspended), on
        ``harness`` and ``model`` when given (see :func:`conversations.switch`), its result
        checked against ``output_schema`` (default: the session's), with ``context`` and
        ``turn_timeout_minutes`` (as for :meth:`new`); answers at once. Exactly
        one of two concurrent sends wins; the other gets SessionBusy. The send is the answer
        to a question the last turn asked (``needs_input``), cleared once the turn starts.
        SessionBusy while someone talks to the agent in a terminal (a turn would write the
        same conversation). CapacityExhausted, nothing changed, when the session needs a
        sandbox and no place is left (so does :meth:`open`). While a live turn runs, a plain
        send (no switch, schema, context or time limit) steers it (:meth:`steer`) unless
        ``if_idle``; else a send while a turn runs is SessionBusy."""
        _check_message(message, (self.settings.max_message_kb << 10, "HANGAR_MAX_MESSAGE_KB"))
        limit = check_minutes(turn_timeout_minutes, "turn_timeout_minutes")
        session = self.resolve(ref)
        plain = (harness, model, output_schema, limit, permission_mode) == (
            None, None, None, None, None) and not context  # fmt: skip
        steerable = session.state is S.STARTING or self._steering.running(session) is not None
        if plain and not if_idle and steerable:
            return self.steer(ref, message)
        if talking(session):
            raise SessionBusy(
                f"someone is talking to session {session.name}'s agent in a terminal: a turn "
                "would write the same conversation; close that terminal first",
                session=session.name,
            )  # fmt: skip
        changes = switch(session, harness, model)
        _check_message(message, self._message_limit(changes.get("harness", session.harness)))
        self._check_permissions(changes.get("harness", session.harness),
                                permission_mode or session.permission_mode)  # fmt: skip
        if output_schema is not None:
            changes["output_schema"] = check_schema(output_schema)
        self.environments.require(session.environment)
        self._startup.capacity.check_for(session)
        n = len(self.db.list_turns(session.id)) + 1
        with self._storing(session.id, n, message, context) as (kept, accepted):
            intent = StartIntent(kind=StartKind.SEND, turn=n, message=kept.message,
                                 message_ref=kept.ref, context=accepted.refs,
                                 timeout_minutes=limit,
                                 permission_mode=permission_mode)  # fmt: skip
            claimed = self._startup.begin(session, intent, **changes)
        self._turns.ensure(claimed)
        self.context.settle(accepted)
        return Started(claimed, n)

    @contextlib.contextmanager
    def _storing(self, session_id: str, n: int, message: str,
                 context: Sequence[ContextItem]) -> Iterator[tuple[Kept, Accepted]]:  # fmt: skip
        """Turn ``n``'s context accepted and its message kept (a large one sealed into blobs,
        :mod:`.messages`), before any record names them; both removed again if the block fails
        before a record names them (a busy session, a name taken), kept if it failed after
        (say, scheduling a tick once the claim was written): the start then owns them."""
        accepted = self.context.accept(session_id, n, context)
        kept: Kept | None = None
        try:
            kept = self.messages.keep(session_id, n, message)
            yield kept, accepted
        except BaseException:
            if kept is None or not self._named(session_id, n, kept, accepted):
                if kept is not None:
                    self.messages.release(kept)
                self.context.release(accepted)
            raise

    def _named(self, session_id: str, n: int, kept: Kept, accepted: Accepted) -> bool:
        """Whether the session's start intent or turn ``n`` names what a request stored for
        that turn; True when the db cannot say (a blob no record names is harmless, a named
        one removed loses the turn's message)."""
        if kept.ref is None and not accepted.refs:
            return False  # nothing stored
        try:
            session = self.db.get_session(session_id)
            named: list[StartIntent | Turn] = [session.start] if session.start else []
            named += [t for t in self.db.list_turns(session_id) if t.n == n]
        except SessionNotFound:
            return False
        except HangarError:
            return True
        return any(r.message_ref == kept.ref and r.context == accepted.refs for r in named)

    def open(self, ref: str, *, harness: str | None = None, model: str | None = None) -> Session:
        """Make sure the session has a sandbox with its work restored, its next turn on
        ``harness`` and ``model`` when given: answers at once, the session IDLE (or ACTIVE,
        when no switch is asked for) when it has a sandbox already, STARTING otherwise (``get``
        follows its phase). A switch while a turn runs or a start is under way is
        SessionBusy."""
        session = self.resolve(ref)
        self._startup.capacity.check_for(session)  # before the switch: a refusal changes nothing
        changes = switch(session, harness, model)
        if changes:
            session = self._transitions.switch_harness(session, **changes)
        if session.state in (S.IDLE, S.ACTIVE) and sandbox_alive(self.sandboxes, session):
            self._shells.touch(session.id)
            return self.resolve(ref)
        if session.state is S.STARTING:
            return session  # on its way already
        self.environments.require(session.environment)
        return self._startup.begin(session, StartIntent(kind=StartKind.OPEN))

    def keep(self, ref: str, idle_minutes: float) -> Session:
        """Set the idle timeout (0: never suspend for idleness)."""
        minutes = _check_idle(idle_minutes)
        session = self._records.update(self.resolve(ref).id, idle_minutes=minutes)
        self._schedule.idle(session)
        return session

    def fork(self, ref: str, n: int) -> list[Session]:
        """Restore one checkpoint of the session into ``n`` new sessions, each STARTING; the
        first turn of each forks the conversation with the harness's fork flag (or hands
        off)."""
        return self._forks.fork(ref, n)

    # -- turns ------------------------------------------------------------------------------

    def wait(
        self,
        ref: str,
        n: int | None = None,
        *,
        timeout: float = 600,
        on_output: Callable[[bytes], None] | None = None,
        poll: float = 0.5,
    ) -> Turn:
        """Wait for turn ``n`` (default: the latest) to be over, feeding new run-log bytes to
        ``on_output`` as they come; returns the turn (with its result), unfinished if
        ``timeout`` passed first."""
        return self.with_result(
            self._turns.wait(ref, n, timeout=timeout, on_output=on_output, poll=poll))

    def watch_turn(self, ref: str, n: int | None = None) -> TurnWatch:
        """A follower of turn ``n`` (default: the latest) that says what happened since its
        last look (start-up phases, the agent's progress lines, run-log events)."""
        self.resolve(ref)
        return TurnWatch(self._turns, self.sandboxes, ref, n)

    def steer(self, ref: str, message: str, *, expected_turn: int | None = None) -> Started:
        """Give ``message`` to the running live turn, which carries it on (``delivered``
        ``steer``). With ``expected_turn``, TurnEnded (nothing changed) unless that turn is the
        one running. Without it, a session with no turn running gets the message as a
        :meth:`send` would, and a steer that came as its turn ended (its driver had stopped
        taking commands) waits for that turn to be finished, then starts the next turn with
        it: a steer is never lost, and never delivered twice. A message for a turn the session
        is starting joins it (queued, or steered once it runs). SessionBusy while a one-shot
        turn runs or starts."""
        _check_message(message, (self.settings.max_message_kb << 10, "HANGAR_MAX_MESSAGE_KB"))
        session = self.resolve(ref)
        if expected_turn is not None:
            expected = self._turns.turn(session.id, expected_turn)
            if expected.finished_at is not None:
                raise TurnEnded(f"turn {expected_turn} of {session.name} is over",
                                session=session.name, turn=expected_turn)  # fmt: skip
        starting = session.start.turn if session.start and session.state is S.STARTING else None
        if starting is not None and expected_turn in (None, starting):
            try:
                joined = self._steering.join(session, starting, message)
                return Started(self.resolve(ref), joined.turn, delivered="steer")
            except TurnEnded:
                if expected_turn is not None:
                    raise
            self._turns.wait(ref, starting, timeout=ENDING_SECONDS)
            return self.send(ref, message, if_idle=True)
        live = self._steering.live_turn(session)
        if live is not None:
            turn, key = live
            if expected_turn is not None and turn.n != expected_turn:
                raise TurnEnded(f"turn {expected_turn} of {session.name} is over",
                                session=session.name, turn=expected_turn)  # fmt: skip
            try:
                self._steering.steer(session, turn, key, message)
                return Started(self.resolve(ref), turn.n, delivered="steer")
            except TurnEnded:
                if expected_turn is not None:
                    raise
            self._turns.wait(ref, turn.n, timeout=ENDING_SECONDS)
        elif expected_turn is None and self._steering.ending(session):
            self._turns.wait(ref, None, timeout=ENDING_SECONDS)
        elif expected_turn is not None or session.state is S.ACTIVE:
            raise SessionBusy(f"session {session.name} is running a turn that cannot be "
                              f"steered ({session.state.value}); wait for it or interrupt it",
                              session=session.name)  # fmt: skip
        return self.send(ref, message, if_idle=True)

    def interrupt(self, ref: str) -> Started:
        """Stop the session's running turn: the turn ends INTERRUPTED and its work is
        checkpointed, as at any turn's end. A live turn is asked to stop (its agent ends the
        turn, its conversation kept); a one-shot turn, or a live one that does not answer,
        has its harness stopped. InvalidState when no turn runs."""
        session = self.resolve(ref)
        if session.state is not S.ACTIVE or not session.sandbox_id:
            raise InvalidState(f"session {session.name} has no running turn (it is "
                               f"{session.state.value})", session=session.name,
                               state=session.state.value)  # fmt: skip
        turn = self._turns.turn(session.id, None)
        live = self._steering.live_turn(session)
        if live is not None:
            try:
                self._steering.interrupt(session, *live)
            except TurnEnded:
                pass  # over already: the watch finishes it
            except SandboxError:
                stop_run(self.sandboxes, session.sandbox_id, turn.active_run_id)
            self._turns.seen_stopped(session, turn.active_run_id)
        elif turn.finished_at is None:
            stop_run(self.sandboxes, session.sandbox_id, turn.active_run_id)
            self._turns.seen_stopped(session, turn.active_run_id)
        return Started(self._turns.watch(self.db.get_session(session.id)), turn.n)

    def tree(self, ref: str, n: int, step: int) -> Shown:
        """Step ``step`` of turn ``n`` (the 0-based ordinal of its recorded trees) with its
        patch against the turn's first tree, from what the turn kept (no sandbox, no git).
        InvalidInput for a turn or step it does not have; NotFound when the turn recorded
        none (a one-shot turn)."""
        session = self.resolve(ref)
        return self._turns.steps.show(session, self._turns.turn(session.id, n), step)

    def log(self, ref: str, n: int | None = None) -> bytes:
        """A turn's run log (default: the latest turn): live while it runs, stored after."""
        return self._turns.log(ref, n)

    def with_result(self, turn: Turn) -> Turn:
        """``turn`` as surfaces show it: its structured result in ``result`` and its whole
        message in ``message``, wherever each is kept (large ones are in blobs)."""
        changes: dict[str, Any] = {}
        if turn.result_key is not None:
            changes["result"] = result_of(self.blobs, self.keys, turn)
        if turn.message_ref is not None:
            changes["message"] = self.messages.text(turn.message, turn.message_ref)
        return turn.model_copy(update=changes) if changes else turn

    def progress(self, ref: str, cursor: int = 0) -> tuple[list[ProgressLine], int]:
        """The progress lines the running turn wrote after byte ``cursor`` of its
        ``out/progress.jsonl``, and the cursor after them (nothing without a sandbox)."""
        session = self.resolve(ref)
        if session.sandbox_id is None:
            return [], cursor
        try:
            return read_progress(self.sandboxes, session, cursor)
        except (SandboxError, SandboxNotFound):
            return [], cursor  # it went away meanwhile: the turn's end says the rest

    # -- artifacts --------------------------------------------------------------------------

    def artifacts(self, ref: str, turn: int | None = None) -> list[Listed]:
        """The session's stored artifacts (of turn ``turn`` only, if given), by turn."""
        session = self.resolve(ref)
        if turn is not None:
            self._turns.turn(session.id, turn)  # InvalidInput for a turn it does not have
        return self.handbacks.artifacts.listing(session, self.db.list_turns(session.id), turn)

    def artifact(self, ref: str, turn: int, path: str) -> bytes:
        """The stored bytes of turn ``turn``'s artifact ``path`` (ArtifactNotFound: none)."""
        session = self.resolve(ref)
        return self.handbacks.artifacts.read(session, self._turns.turn(session.id, turn), path)

    # -- losing the sandbox: the pre-destroy hook, suspend, archive, delete -----------------

    def _before_destroy(self, info: SandboxInfo) -> None:
        """The pre-destroy hook: a session losing its sandbox any other way than by suspend is
        checkpointed first (reason ``destroy``) and becomes SUSPENDED. A checkpoint that fails
        raises, which vetoes the destroy (unless forced): no work goes with a sandbox unless
        someone chose to lose it."""
        session = self._owner(info)
        if session is None:
            return
        take_checkpoint(self.checkpointer, self._records, session, CheckpointReason.DESTROY)
        self._turns.lose_sandbox(session, "the sandbox was destroyed during the turn")

    def _owner(self, info: SandboxInfo) -> Session | None:
        """The session whose own sandbox ``info`` is, when it is IDLE or ACTIVE."""
        session_id = info.labels.get(SESSION_LABEL)
        if not session_id:
            return None
        try:
            session = self.db.get_session(session_id)
        except SessionNotFound:
            return None
        if session.sandbox_id != info.id or session.state not in (S.IDLE, S.ACTIVE):
            return None
        return session

    def destroy_sandbox(self, sandbox_id: str, *, force: bool = False) -> None:
        """Destroy a sandbox by hand, through the pre-destroy hook: DestroyVetoed when its
        session's checkpoint fails, unless ``force``; a forced destroy still leaves the session
        SUSPENDED (to resume from its last good checkpoint), never pointing at a sandbox that
        is gone."""
        info = self.sandboxes.get(sandbox_id)
        self.sandboxes.destroy(sandbox_id, force=force)
        session = self._owner(info)
        if session is not None:
            self._turns.lose_sandbox(session, "the sandbox was destroyed during the turn")

    def replace_outdated_sandboxes(self) -> list[str]:
        """Checkpoint (reason ``destroy``) and destroy every sandbox made by an older, weaker
        layout of the backend (``hangar serve`` calls this at start); each session loses its
        sandbox to SUSPENDED, and its next use makes a current one. A sandbox whose checkpoint
        fails is kept (its work must not be lost) and logged. Returns those destroyed."""
        replaced = []
        for info in self.sandboxes.list():
            if not info.outdated:
                continue
            try:
                self.sandboxes.destroy(info.id)
            except HangarError as exc:
                logger.error("sandbox %s is of an older layout, but its checkpoint failed, so "
                             "it is kept: %s", info.id, exc.message)  # fmt: skip
                continue
            replaced.append(info.id)
        return replaced

    def suspend(self, ref: str) -> Session:
        """Checkpoint, destroy the sandbox, SUSPENDED; answers when it is done. A checkpoint
        that fails leaves the session IDLE with its sandbox (nothing is destroyed without a
        checkpoint) and raises."""
        return self._suspends.suspend(self.resolve(ref))

    def archive(self, ref: str) -> Session:
        """Drop the sandbox and the checkpoints; keep the record, its turns and summaries."""
        return self._suspends.archive(self.resolve(ref))

    def delete(self, ref: str, *, force: bool = False) -> None:
        """Delete the session with every sandbox labelled with it, its checkpoints, turns,
        stored logs and sealed messages. SessionBusy while a turn starts or runs (its work
        would be lost), unless ``force``: then it works in any state (the way out of
        anything)."""
        session = self.resolve(ref)
        if session.state in (S.STARTING, S.ACTIVE) and not force:
            raise SessionBusy(f"session {session.name} is {session.state.value}: deleting it now "
                              "loses the turn's work; interrupt it first, or force the delete",
                              session=session.name, state=session.state.value)  # fmt: skip
        self._schedule.cancel_all(session.id)
        self._provisioner.destroy_all(session.id)
        self.checkpointer.drop_all(session.id)
        turns = self.db.list_turns(session.id)
        for turn in turns:
            self.blobs.delete(run_log_key(session.id, turn.n))
            if turn.result_key:
                self.blobs.delete(result_key(session.id, turn.n))
            if turn.steps_key:
                self.blobs.delete(steps_key(session.id, turn.n))
        self.handbacks.artifacts.delete(session.id, turns)
        self.context.delete_all(session.id)
        self.messages.delete_all(session.id)
        self.db.delete_session(session.id)
        # A start step that made its sandbox after the first look and recorded it before the
        # record went: no later step finds the session to remove it, so look once more. (One
        # that records it after finds no session and removes it itself.)
        self._provisioner.destroy_all(session.id)

    # -- using the sandbox ------------------------------------------------------------------

    def _running(self, ref: str) -> Session:
        return self._shells.running(ref)

    def patch(self, ref: str) -> bytes:
        """The session's change, base to working tree with untracked files: live from the
        sandbox when there is one, else from the newest checkpoint that has it. Reads only."""
        session = self.resolve(ref)
        if session.sandbox_id and sandbox_alive(self.sandboxes, session):
            config = {"repo": repo_dir_for(session.repo or ""), "base": session.base_commit,
                      "max_patch": self.settings.max_patch_bytes, "mode": "patch",
                      "tmp": HANGAR_TMP}  # fmt: skip
            result = agent.run_script(self.sandboxes, session.sandbox_id, "checkpoint",
                                      json.dumps(config), user=SandboxUser.HANGAR)  # fmt: skip
            if not result.ok:
                raise SandboxError(f"cannot make the patch: {result.stderr.decode(errors='replace').strip()}")
            return result.stdout
        for checkpoint in reversed(self.db.list_checkpoints(session.id)):
            contents = self.checkpointer.contents(checkpoint)
            if contents.has("session.patch"):
                return b"".join(contents.read("session.patch"))
        raise NotFound(f"session {session.name} has no patch to show", session=session.name)

    def pull(self, ref: str) -> PullAnswer:
        """The newest checkpoint's commits and uncommitted changes, as ``hangar session pull``
        takes them (:mod:`hangar.sessions.pull`). Reads only; no git runs here."""
        session = self.resolve(ref)
        return pull.package(self.checkpointer, session, self.db.list_checkpoints(session.id))

    def exec(
        self,
        ref: str,
        argv: list[str],
        *,
        stdin: bytes | BinaryIO | Iterator[bytes] | None = None,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        agent: bool = False,
        cancel: threading.Event | None = None,
    ) -> int:
        """Run a command in the session's repo folder, as the agent, holding a lease while it
        runs (see :meth:`Shells.exec <hangar.sessions.shells.Shells.exec>`); its exit status."""
        return self._shells.exec(ref, argv, stdin=stdin, stdout=stdout, stderr=stderr,
                                 timeout=timeout, env=env, agent=agent,
                                 cancel=cancel)  # fmt: skip

    def lease(self, ref: str, *, agent: bool = False) -> contextlib.AbstractContextManager[None]:
        """Hold a lease on the session (the agent's with ``agent``) while the block runs, as
        :meth:`exec` does for its command: a terminal holds one while it is open. See
        :meth:`Shells.lease <hangar.sessions.shells.Shells.lease>`."""
        return self._shells.lease(self.resolve(ref).id, agent=agent)

    def require_running(self, ref: str, *, agent: bool = False) -> Session:
        """The session, if a terminal (the agent's with ``agent``) can open on it now; see
        :meth:`Shells.require <hangar.sessions.shells.Shells.require>`."""
        return self._shells.require(ref, agent=agent)

    def agent_command(self, ref: str) -> Invocation:
        """What the terminal's agent mode runs (through :meth:`exec` with ``agent``); see
        :meth:`Shells.agent_command <hangar.sessions.shells.Shells.agent_command>`."""
        return self._shells.agent_command(ref)

    # -- housekeeping -----------------------------------------------------------------------

    def handle_tick(self, due: TickDue) -> None:
        """Deliver a tick (see :mod:`hangar.sessions.housekeeping`). Ticks are hints: each
        re-reads state and does only what is still due."""
        self._housekeeping.handle_tick(due)

    def recover(self) -> list[str]:
        """Take over every claim whose worker died (its lease ran out); ``hangar serve`` calls
        this at start, the reaper on each pass. Returns the sessions taken over."""
        recovered = self._housekeeping.recover()
        self._schedule.reap()
        return recovered

    def prebuild(self) -> list[str]:
        """``hangar serve`` at start: the templates and pools of the environments
        HANGAR_PREBUILD_ENVIRONMENTS names made, each kept pool applied (an unknown name is a
        warning in the log). Returns the environments applied."""
        return self.pools.prebuild()

    def reap(self) -> list[str]:
        """Destroy every sandbox whose session's TTL has passed (not during a turn), each
        through the pre-destroy hook, concurrently. Returns the destroyed sandboxes' ids."""
        return self._housekeeping.reap()


PAGE = 500


_Filters = tuple[str | None, str | None]
"""A list's state (its value) and name prefix, None where not given."""


def _encode_cursor(last: Session, filters: _Filters, order: SessionOrder) -> str:
    at = last.last_active_at if order == "activity" else last.created_at
    raw = json.dumps([at.isoformat(), last.id, *filters, order]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _check_prefix(prefix: str) -> None:
    """InvalidInput unless ``prefix`` could begin a name: no NUL byte, at most NAME_MAX."""
    if "\x00" in prefix:
        raise InvalidInput("prefix must not contain a NUL byte", field="prefix")
    if len(prefix) > NAME_MAX:
        raise InvalidInput(f"prefix is {len(prefix)} characters; a name has at most {NAME_MAX}",
                           field="prefix", limit=NAME_MAX)  # fmt: skip


def _decode_cursor(cursor: str, filters: _Filters, order: SessionOrder) -> tuple[datetime, str]:
    """Where ``cursor`` goes on from; InvalidInput if this service did not make it, or made it
    for a list in another order or with other filters (it would go on from a place that list
    never showed). A cursor without an order (an older hangar's) is one by creation."""
    try:
        at, session_id, *made_for = json.loads(
            base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        after = datetime.fromisoformat(at), str(session_id)
        state, prefix, made_in = (*(made_for or (None, None)), "created")[:3]
        was = dict(zip(("state", "prefix"), (state, prefix), strict=True))
    except (ValueError, TypeError, binascii.Error):
        raise InvalidInput(f"cursor {cursor[:40]!r} is not one this server made",
                           field="cursor") from None  # fmt: skip
    if made_in != order:
        raise InvalidInput(f"cursor was made for a list in order {made_in!r}, not {order!r}; "
                           "ask in the same order, or start again without a cursor",
                           field="cursor", made_for={**was, "order": made_in})  # fmt: skip
    if (was["state"], was["prefix"]) != filters:
        raise InvalidInput(
            "cursor was made for a list with other filters (" +
            ", ".join(f"{k}={v!r}" for k, v in was.items()) + "); ask with the same ones, "
            "or start again without a cursor", field="cursor", made_for=was)
    return after


def _title(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= 60 else line[:57] + "..."


def _check_message(message: str, limit: tuple[int, str]) -> None:
    """InvalidInput for an empty message or one that is not text (a lone surrogate, which a
    str can hold and UTF-8 cannot; REST's JSON parser refuses it first), MessageTooLarge for
    one over ``limit``: its bytes of UTF-8 and what sets it (the message reaches the agent
    byte for byte, whatever it holds)."""
    if not message.strip():
        raise InvalidInput("the message is empty")
    try:
        size = len(message.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"the message is not text: a lone surrogate "
                           f"({message[exc.start]!r}) at character {exc.start}",
                           field="message") from None  # fmt: skip
    most, why = limit
    if size > most:
        raise MessageTooLarge(f"the message is {size} bytes, over the limit of {most >> 10} KiB "
                              f"({why})", size=size, limit=most)  # fmt: skip


def _check_idle(minutes: float) -> float:
    if not 0 <= minutes <= MAX_IDLE_MINUTES:
        raise InvalidInput(f"idle minutes must be from 0 to {MAX_IDLE_MINUTES} (a week), not "
                           f"{minutes:g}", field="idle_minutes")  # fmt: skip
    return minutes

