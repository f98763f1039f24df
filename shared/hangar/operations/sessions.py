"""The session operations, each written once for REST and MCP: what it asks of the session
service and the view it answers.

An operation takes the runtime, the session's ref (its id or name) where it acts on one, and
its checked request (a model of :mod:`.wire`); it answers a view of :mod:`.wire` (or bytes).
Each blocks (the service reads and writes the db, and may wait on a sandbox), so a surface runs
it in a worker thread. A surface only adapts: REST reads the arguments from the path, query and
body and picks the status; MCP reads them from a tool's arguments and shapes the result.
Errors are the service's :class:`~hangar.errors.HangarError`, passed through as they are.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from hangar.models import SessionState
from hangar.operations import wire as w

if TYPE_CHECKING:
    from hangar.db import SessionOrder
    from hangar.runtime import Runtime
    from hangar.sessions.service import Started


def _started(runtime: Runtime, started: Started) -> w.StartedView:
    """What new, send and interrupt answer: the session as it is now, and the turn's number."""
    detail = runtime.sessions.get(started.session.id)
    return w.StartedView(session=w.SessionView.detail(detail), turn=started.turn,
                         delivered=started.delivered)


def new(runtime: Runtime, a: w.NewSession) -> w.StartedView:
    """Create a session and ask for its first turn; answers at once, the session STARTING."""
    return _started(runtime, runtime.sessions.new(
        a.name, a.message, a.env, harness=a.harness, model=a.model, title=a.title,
        idle_minutes=a.idle_minutes, output_schema=a.output_schema, context=a.context,
        turn_timeout_minutes=a.turn_timeout_minutes,
        permission_mode=a.permission_mode))  # fmt: skip


def page(runtime: Runtime, limit: int, cursor: str | None = None, *,
         state: SessionState | None = None, prefix: str | None = None,
         order: SessionOrder = "created") -> w.SessionPage:  # fmt: skip
    """One page of sessions, newest first by creation or (``order`` ``"activity"``) by last
    activity, only those ``state`` and ``prefix`` keep."""
    return w.SessionPage.of(*runtime.sessions.page(limit, cursor, state=state, prefix=prefix,
                                                   order=order))  # fmt: skip


def get(runtime: Runtime, ref: str) -> w.SessionView:
    """The session with its turns and checkpoints."""
    return w.SessionView.detail(runtime.sessions.get(ref))


def open_(runtime: Runtime, ref: str, a: w.Open) -> w.SessionView:
    """Resume the session into a sandbox (STARTING while it restores), on another harness or
    model when given."""
    session = runtime.sessions.open(ref, harness=a.harness, model=a.model)
    return w.SessionView.detail(runtime.sessions.get(session.id))


def send(runtime: Runtime, ref: str, a: w.SendMessage) -> w.StartedView:
    """Ask for the next turn, or steer the running live turn with a plain message (unless
    ``if_idle``); answers at once."""
    return _started(runtime, runtime.sessions.send(
        ref, a.message, harness=a.harness, model=a.model, output_schema=a.output_schema,
        context=a.context, turn_timeout_minutes=a.turn_timeout_minutes,
        if_idle=a.if_idle, permission_mode=a.permission_mode))  # fmt: skip


def steer(runtime: Runtime, ref: str, a: w.Steer) -> w.StartedView:
    """Tell the running turn's agent ``a.message`` in the same turn (or start the next turn
    with it when none runs and no turn was expected)."""
    return _started(runtime, runtime.sessions.steer(ref, a.message,
                                                    expected_turn=a.expected_turn))  # fmt: skip


def tree(runtime: Runtime, ref: str, n: int, step: int) -> w.TreeView:
    """Step ``step`` of turn ``n`` with its patch against the turn's first tree."""
    shown = runtime.sessions.tree(ref, n, step)
    view = w.StepView.of(shown.step).model_dump()
    try:
        return w.TreeView(**view, turn=n, encoding="utf-8", patch=shown.patch.decode())
    except UnicodeDecodeError:
        return w.TreeView(**view, turn=n, encoding="base64",
                          patch=base64.b64encode(shown.patch).decode())


def decide(runtime: Runtime, ref: str, approval: str, a: w.Decision) -> w.Decided:
    """Approve or deny what the running turn's agent waits to do."""
    turn = runtime.sessions.approve(ref, approval, allow=a.decision == "approve",
                                    message=a.message)  # fmt: skip
    return w.Decided(approval=approval, decision=a.decision, turn=turn.n)


def interrupt(runtime: Runtime, ref: str) -> w.StartedView:
    """Stop the running turn: it ends interrupted and its work is checkpointed."""
    return _started(runtime, runtime.sessions.interrupt(ref))


def wait(runtime: Runtime, ref: str, a: w.Wait) -> w.TurnView:
    """Turn ``a.turn`` (default: the latest) once it is over, or as it is after ``a.timeout``
    seconds."""
    return w.TurnView.of(runtime.sessions.wait(ref, a.turn, timeout=a.timeout))


def keep(runtime: Runtime, ref: str, a: w.Keep) -> w.SessionSummary:
    """Set how long the session idles before it suspends (0: never)."""
    return w.SessionSummary.of(runtime.sessions.keep(ref, a.idle_minutes))


def suspend(runtime: Runtime, ref: str) -> w.SessionSummary:
    """Checkpoint the session and release its sandbox."""
    return w.SessionSummary.of(runtime.sessions.suspend(ref))


def archive(runtime: Runtime, ref: str) -> w.SessionSummary:
    """Drop the session's sandbox and checkpoints; keep its record."""
    return w.SessionSummary.of(runtime.sessions.archive(ref))


def delete(runtime: Runtime, ref: str, *, force: bool = False) -> str:
    """Delete the session and everything it stored (SessionBusy while a turn starts or runs,
    unless ``force``); answers the name it had."""
    name = runtime.sessions.resolve(ref).name
    runtime.sessions.delete(ref, force=force)
    return name


def fork(runtime: Runtime, ref: str, a: w.Fork) -> list[w.SessionSummary]:
    """Restore the session's newest checkpoint into ``a.n`` new sessions, each STARTING."""
    return [w.SessionSummary.of(f) for f in runtime.sessions.fork(ref, a.n)]


def artifacts(runtime: Runtime, ref: str, turn: int | None = None) -> list[w.ArtifactView]:
    """The files the session's turns handed back (only turn ``turn``'s when given)."""
    return [w.ArtifactView(path=a.path, turn=a.turn, size=a.size, uri=a.uri)
            for a in runtime.sessions.artifacts(ref, turn)]  # fmt: skip


def artifact(runtime: Runtime, ref: str, turn: int, path: str) -> bytes:
    """One artifact's bytes."""
    return runtime.sessions.artifact(ref, turn, path)


def progress(runtime: Runtime, ref: str, cursor: int) -> w.ProgressView:
    """The running turn's progress lines after ``cursor``, and the cursor to ask from next."""
    lines, after = runtime.sessions.progress(ref, cursor)
    return w.ProgressView(lines=[w.ProgressLineView(message=p.message, pct=p.pct)
                                 for p in lines], cursor=after)  # fmt: skip


def patch(runtime: Runtime, ref: str) -> bytes:
    """The session's whole change as one patch: live from its sandbox, else from its newest
    checkpoint."""
    return runtime.sessions.patch(ref)
