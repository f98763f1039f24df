"""The MCP tools: each one's input and output model and what it does on the session service.

Each tool adapts an operation of :mod:`hangar.operations`, the same one the matching REST call
adapts. Inputs are pydantic models that forbid unknown fields (their JSON Schema is the tool's
``inputSchema``: the operation's request model with the session's ``ref``); outputs are the
operation's views, so a tool answers the same JSON as the
matching REST call, as ``structuredContent`` and as text. A tool's error is a result with
``isError``, no ``structuredContent`` (it would contradict the tool's ``outputSchema``), and two
texts: the message with its stable code, and REST's body ``{"error": {"code", "message", ...}}``
(:func:`error_body`).
Tool functions block; the server runs them in worker threads.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, Field

from hangar.operations import environments, sessions as ops, transcripts, wire as s
from hangar.errors import ArtifactTooLarge, HangarError
from hangar.exchange import is_text
from hangar.exchange.artifacts import artifact_uri
from hangar.models import SessionState
from hangar.sessions.watching import Note

if TYPE_CHECKING:
    from hangar.runtime import Runtime

MAX_WAIT = 600
LOOK_EVERY = 1.0
"""Seconds between looks at a turn while ``wait_for_turn`` waits."""

Report = Callable[[Note], Awaitable[None]]
T = TypeVar("T")


class Ref(s.Body):
    ref: str = Field(description="the session's name or id")


class NewSessionIn(s.NewSession):
    pass


class ListIn(s.Body):
    limit: int = Field(50, ge=1, le=500, description="sessions a page")
    cursor: str | None = Field(None, description="the previous page's next_cursor")
    state: SessionState | None = Field(None, description="only sessions in this state")
    prefix: str | None = Field(None, description="only sessions whose name starts with this")
    order: Literal["created", "activity"] = Field(
        "created", description="newest first by creation, or by last activity")


class OpenIn(Ref, s.Open):
    pass


class SendIn(Ref, s.SendMessage):
    pass


class SteerIn(Ref, s.Steer):
    pass


class ApproveIn(Ref):
    approval: str = Field(description="the approval's id, from the session's pending_approvals")


class DenyIn(ApproveIn):
    message: str = Field("", max_length=4000, description="why, for the agent")


class TreeIn(Ref):
    turn: int = Field(ge=1, le=s.MAX_TURN, description="the turn's number")
    step: int = Field(ge=0, le=1 << 20, description="the step: 0-based, as get_session lists "
                      "a turn's steps")


class TranscriptIn(Ref):
    turn: int | None = Field(None, ge=1, le=s.MAX_TURN, description="the turn (default: the "
                             "latest)")
    cursor: str | None = Field(None, description="the previous page's next_cursor (default: "
                               "the turn's first event)")
    limit: int = Field(transcripts.DEFAULT_LIMIT, ge=1, le=transcripts.MAX_LIMIT,
                       description="events a page")  # fmt: skip


class KeepIn(Ref, s.Keep):
    pass


class ForkIn(Ref, s.Fork):
    pass


class WaitIn(Ref):
    timeout_seconds: float = Field(MAX_WAIT, ge=0, le=MAX_WAIT, allow_inf_nan=False,
                                   description="how long to wait; done false: call again")  # fmt: skip


class DeleteIn(Ref):
    force: bool = Field(False, description="delete it even while a turn runs (its work is lost)")


class NoArguments(s.Body):
    pass


class EnvironmentsOut(BaseModel):
    environments: list[s.EnvironmentView] = Field(
        description="what new_session's env names: repo, branch, setup, variables and the "
        "names of secrets (never their values)")


class DeletedOut(BaseModel):
    deleted: str = Field(description="the session's name")


class ArtifactIn(Ref):
    turn: int = Field(ge=1, le=s.MAX_TURN)
    path: str = Field(description="its path under out/artifacts")


class ForkOut(BaseModel):
    sessions: list[s.SessionSummary]


class ArtifactRef(BaseModel):
    path: str
    turn: int
    uri: str = Field(description="the resource that reads it")
    size: int


class WaitOut(BaseModel):
    """Where the turn is: ``done`` false means it still runs (call again)."""

    done: bool
    turn: int
    outcome: str | None = Field(description="exited, failed, interrupted, timed_out or "
                                "needs_input")
    summary: str | None
    result: Any = Field(description="the structured result, checked against the schema")
    result_error: str | None
    artifacts: list[ArtifactRef]
    question: str | None = Field(description="needs_input: answer with send_to_session")
    question_options: list[str]
    pending_approvals: list[s.ApprovalView] = Field(
        default_factory=list, description="what the running turn waits to be allowed: the "
        "wait returns (done false) as soon as there is any; answer with approve or deny")


class ArtifactOut(BaseModel):
    path: str
    turn: int
    size: int
    encoding: Literal["utf-8", "base64"]
    content: str


class PatchOut(BaseModel):
    patch: str = Field(description="git apply it: base to working tree, untracked files too")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input: type[s.Body]
    output: type[BaseModel]
    run: Callable[[Runtime, Any, Report], Awaitable[BaseModel]]


def error_body(exc: HangarError) -> dict[str, Any]:
    """The REST API's error body for ``exc``: its code, message and data fields."""
    return exc.to_dict()


async def _thread(func: Callable[[], T]) -> T:
    import anyio.to_thread

    return await anyio.to_thread.run_sync(func)


async def new_session(runtime: Runtime, a: NewSessionIn, report: Report) -> BaseModel:
    return await _thread(lambda: ops.new(runtime, a))


async def list_sessions(runtime: Runtime, a: ListIn, report: Report) -> BaseModel:
    return await _thread(lambda: ops.page(runtime, a.limit, a.cursor, state=a.state,
                                          prefix=a.prefix, order=a.order))  # fmt: skip


async def get_session(runtime: Runtime, a: Ref, report: Report) -> BaseModel:
    return await _thread(lambda: ops.get(runtime, a.ref))


async def open_session(runtime: Runtime, a: OpenIn, report: Report) -> BaseModel:
    return await _thread(lambda: ops.open_(runtime, a.ref, a))


async def send_to_session(runtime: Runtime, a: SendIn, report: Report) -> BaseModel:
    return await _thread(lambda: ops.send(runtime, a.ref, a))


async def steer_session(runtime: Runtime, a: SteerIn, report: Report) -> BaseModel:
    return await _thread(lambda: ops.steer(runtime, a.ref, a))


async def approve(runtime: Runtime, a: ApproveIn, report: Report) -> BaseModel:
    return await _thread(lambda: ops.decide(runtime, a.ref, a.approval,
                                            s.Decision(decision="approve", message="")))  # fmt: skip


async def deny(runtime: Runtime, a: DenyIn, report: Report) -> BaseModel:
    return await _thread(lambda: ops.decide(runtime, a.ref, a.approval,
                                            s.Decision(decision="deny", message=a.message)))


async def get_tree(runtime: Runtime, a: TreeIn, report: Report) -> BaseModel:
    return await _thread(lambda: ops.tree(runtime, a.ref, a.turn, a.step))


async def get_transcript(runtime: Runtime, a: TranscriptIn, report: Report) -> BaseModel:
    return await _thread(lambda: transcripts.page(runtime, a.ref, a.turn, a.cursor, a.limit))


async def keep_session(runtime: Runtime, a: KeepIn, report: Report) -> BaseModel:
    return await _thread(lambda: ops.keep(runtime, a.ref, a))


async def suspend_session(runtime: Runtime, a: Ref, report: Report) -> BaseModel:
    return await _thread(lambda: ops.suspend(runtime, a.ref))


async def list_environments(runtime: Runtime, a: NoArguments, report: Report) -> BaseModel:
    return EnvironmentsOut(environments=await _thread(lambda: environments.list_all(runtime)))


async def archive_session(runtime: Runtime, a: Ref, report: Report) -> BaseModel:
    return await _thread(lambda: ops.archive(runtime, a.ref))


async def delete_session(runtime: Runtime, a: DeleteIn, report: Report) -> BaseModel:
    return DeletedOut(deleted=await _thread(lambda: ops.delete(runtime, a.ref, force=a.force)))


async def interrupt_session(runtime: Runtime, a: Ref, report: Report) -> BaseModel:
    return await _thread(lambda: ops.interrupt(runtime, a.ref))


async def fork_session(runtime: Runtime, a: ForkIn, report: Report) -> BaseModel:
    return ForkOut(sessions=await _thread(lambda: ops.fork(runtime, a.ref, a)))


async def wait_for_turn(runtime: Runtime, a: WaitIn, report: Report) -> BaseModel:
    """Look at the latest turn every :data:`LOOK_EVERY` seconds until it is over or the
    timeout, reporting each note as progress."""
    import anyio

    watch = await _thread(lambda: runtime.sessions.watch_turn(a.ref))
    deadline = time.monotonic() + a.timeout_seconds
    while True:
        look = await _thread(watch.look)
        for note in look.notes:
            await report(note)
        if look.done or time.monotonic() >= deadline or look.session.pending_approvals:
            break
        await anyio.sleep(min(LOOK_EVERY, max(0.0, deadline - time.monotonic())))
    session = look.session
    turn = await _thread(lambda: runtime.sessions.with_result(look.turn))
    return WaitOut(
        done=look.done, turn=turn.n, outcome=turn.outcome.value if turn.outcome else None,
        summary=turn.summary, result=turn.result, result_error=turn.result_error,
        artifacts=[ArtifactRef(path=x.path, turn=turn.n, size=x.size,
                               uri=artifact_uri(session, turn.n, x.path)) for x in turn.artifacts],
        question=turn.question, question_options=turn.question_options,
        pending_approvals=[s.ApprovalView.of(x) for x in session.pending_approvals],
    )  # fmt: skip


async def get_artifact(runtime: Runtime, a: ArtifactIn, report: Report) -> BaseModel:
    data = await _thread(lambda: ops.artifact(runtime, a.ref, a.turn, a.path))
    cap = runtime.settings.inline_artifact_bytes
    if len(data) > cap:
        raise ArtifactTooLarge(
            f"artifact {a.path!r} of turn {a.turn} is {len(data)} bytes, over the "
            f"{cap >> 10} KiB an answer holds (HANGAR_EXCHANGE_INLINE_ARTIFACT_KB); download it "
            f"with GET /api/sessions/{a.ref}/artifacts/{a.turn}/{a.path}",
            path=a.path, turn=a.turn, size=len(data),
        )  # fmt: skip
    text = is_text(data)
    return ArtifactOut(path=a.path, turn=a.turn, size=len(data),
                       encoding="utf-8" if text else "base64",
                       content=data.decode() if text else base64.b64encode(data).decode())  # fmt: skip


async def get_session_patch(runtime: Runtime, a: Ref, report: Report) -> BaseModel:
    data = await _thread(lambda: ops.patch(runtime, a.ref))
    return PatchOut(patch=data.decode(errors="replace"))


TOOLS = [
    Tool("new_session", "Create a session and start its first turn; answers at once "
         "(STARTING). context: files, links, a patch of local changes, a bundle of local "
         "commits. Follow it with wait_for_turn.", NewSessionIn, s.StartedView, new_session),
    Tool("list_sessions", "One page of sessions, newest first (by creation, or order "
         "'activity': by last activity), optionally only one state or names starting with a "
         "prefix; next_cursor asks for the next (with the same order and filters).",
         ListIn, s.SessionPage, list_sessions),
    Tool("get_session", "A session with its turns and checkpoints.", Ref, s.SessionView,
         get_session),
    Tool("open_session", "Resume a session into a sandbox with its work restored (STARTING "
         "while it restores).", OpenIn, s.SessionView, open_session),
    Tool("send_to_session", "Start the next turn (the answer, when the session needs input), "
         "with context as for new_session; answers at once. Follow it with wait_for_turn. A "
         "plain message to a running live turn steers it (delivered: steer) unless if_idle.",
         SendIn, s.StartedView, send_to_session),
    Tool("approve", "Allow what the session's running turn waits to do (an id of its "
         "pending_approvals); it runs once.", ApproveIn, s.Decided, approve),
    Tool("deny", "Deny what the session's running turn waits to do; the agent is told (with "
         "message, on Claude Code) and goes on without it.", DenyIn, s.Decided, deny),
    Tool("get_tree", "One step of a live turn: the working tree's git tree after it and its "
         "patch against the turn's first tree.", TreeIn, s.TreeView, get_tree),
    Tool("get_transcript", "One page of a turn's transcript, the same events for every "
         "harness: message, tool_call, tool_result, usage, notice, outcome (last, once the "
         "turn is over). more: call again now with next_cursor; finished false: the turn "
         "runs, call again later.", TranscriptIn, transcripts.TranscriptPage, get_transcript),
    Tool("steer_session", "Tell the running turn's agent something in the same turn "
         "(delivered: steer); expected_turn refuses (turn_ended) when that turn is over.",
         SteerIn, s.StartedView, steer_session),
    Tool("keep_session", "Set how long the session idles before it suspends (0: never).",
         KeepIn, s.SessionSummary, keep_session),
    Tool("suspend_session", "Checkpoint the session and release its sandbox.", Ref,
         s.SessionSummary, suspend_session),
    Tool("fork_session", "Restore the session's newest checkpoint into n new sessions.",
         ForkIn, ForkOut, fork_session),
    Tool("interrupt_session", "Stop the session's running turn: it ends interrupted and its "
         "work is checkpointed; the session stays, ready for the next send.", Ref,
         s.StartedView, interrupt_session),
    Tool("archive_session", "Drop the session's sandbox and checkpoints; keep its record, "
         "turns and summaries.", Ref, s.SessionSummary, archive_session),
    Tool("delete_session", "Delete the session and everything it stored; refused "
         "(session_busy) while a turn starts or runs, unless force.", DeleteIn, DeletedOut,
         delete_session),
    Tool("list_environments", "The environments sessions can be made from (new_session's "
         "env): each one's repo, branch and setup.", NoArguments, EnvironmentsOut,
         list_environments),
    Tool("wait_for_turn", "Wait for the session's latest turn to end (up to timeout_seconds, "
         "at most 600), sending progress notifications; done false means call again. It also "
         "returns when the turn waits for an approval (pending_approvals).",
         WaitIn, WaitOut, wait_for_turn),
    Tool("get_artifact", "A file a turn handed back: text inline, binary as base64, up to "
         "HANGAR_EXCHANGE_INLINE_ARTIFACT_KB.", ArtifactIn, ArtifactOut, get_artifact),
    Tool("get_session_patch", "The session's whole change as one patch (base to working "
         "tree, untracked files included).", Ref, PatchOut, get_session_patch),
]  # fmt: skip
