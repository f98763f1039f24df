"""Wire shapes of REST and MCP: requests and views, as pydantic models.

Views are built from the stored records by their ``of`` class methods; they never carry a
secret's value, a wrapped key or a conversation's content. Summaries in lists go through
:func:`~hangar.redact.redact`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema

from hangar.exchange.context import ContextItem
from hangar.exchange.uploads import Upload
from hangar.harnesses import get_harness
from hangar.models import ChangeSize, Checkpoint, ContextKind, ContextRef, Environment, Session
from hangar.models import PendingApproval, PermissionMode, SessionDetail, TreeStep, Turn
from hangar.models import last_good_checkpoint
from hangar.redact import redact
from hangar.sandboxes import SandboxInfo
from hangar.sessions.environments import loopback_warnings
from hangar.sessions.service import MAX_IDLE_MINUTES, SESSION_LABEL
from hangar.sessions.timeouts import MAX_TURN_MINUTES
from hangar.sessions.shells import live

MAX_TURN = 1_000_000
"""No session gets near it; numbers past it are refused before any lookup."""


def _base64(value: object) -> bytes:
    if not isinstance(value, str):
        raise ValueError("must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise ValueError("is not valid base64") from None


Base64 = Annotated[
    bytes,
    PlainValidator(_base64),
    WithJsonSchema({"type": "string", "contentEncoding": "base64"}),
]


SCHEMA_DOC = ("a JSON Schema the turn's result (out/result.json) must match; a missing or "
              "invalid result gets one repair turn, then result_error")


HOSTS_DOC = ("hosts its agents' network tools may name under the deny-risky permission mode "
             "(a name covers its subdomains)")
RULES_DOC = ("its own deny-risky rules: NAME -> a regular expression searched in what a tool "
             "would do (a command's words, a file tool's path)")
NOTIFY_DOC = ("where its sessions' events (needs_input, approval_pending, turn_failed, "
              "turn_finished) are POSTed instead of HANGAR_NOTIFY_URL, signed with "
              "HANGAR_NOTIFY_SECRET")
PERMISSION_DOC = ("who decides the turns' commands and edits: auto (nothing asked: the sandbox "
                  "is the boundary; not Claude Code's own auto mode), ask (each waits for "
                  "approve or deny; Claude Code and Codex, live turns only)")
TURN_LIMIT_DOC = ("the turn's time limit in minutes (fractions allowed, at most a week): past "
                  "it the turn is stopped and ends timed_out; default: the environment's, else "
                  "HANGAR_TURN_TIMEOUT_MINUTES (120)")
ENV_LIMIT_DOC = ("its sessions' turns' time limit in minutes (null: HANGAR_TURN_TIMEOUT_MINUTES, "
                 "120); a send may give its own")
WARM_POOL_DOC = ("ready sandboxes its warm pool keeps (within its warm_pool_hours), so a session "
                 "starts or resumes without waiting for one; a GKE feature (gke://), refused "
                 "elsewhere; 0: none of its own")
WARM_HOURS_DOC = ("when its warm pool is kept, e.g. 'Mon-Fri 08:00-20:00; Sat 10:00-14:00 "
                  "America/New_York' (windows DAYS HH:MM-HH:MM separated by ';', then one IANA "
                  "time zone); outside them it holds none; null: always")
IMAGE_DOC = ("the container image its sandboxes run ([HOST[:PORT]/]PATH[:TAG][@sha256:HEX]), "
             "on a sandbox backend that runs images (null: none, the backend's own system)")
CONTEXT_DOC = ("what comes with the message: files for $HANGAR_IO/in/<turn>/, links, a patch "
               "applied as uncommitted changes, a bundle of commits (see docs/exchange.md)")


class Body(BaseModel):
    """A request body: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class NewSession(Body):
    name: str = Field(description="a lowercase slug, unique among sessions")
    message: str = Field(description="the first turn's message")
    env: str = Field(description="the environment the session's sandboxes come from")
    harness: str = Field("claude", description="claude, codex, pi or antigravity")
    model: str | None = None
    title: str | None = Field(None, description="default: the message's first line")
    idle_minutes: float | None = Field(
        None, ge=0, le=MAX_IDLE_MINUTES, allow_inf_nan=False,
        description="suspend after this long unused (0: never; default 30; at most a week)",
    )
    output_schema: dict[str, Any] | None = Field(None, description=SCHEMA_DOC)
    context: list[ContextItem] = Field(default_factory=list, description=CONTEXT_DOC)
    turn_timeout_minutes: float | None = Field(None, gt=0, le=MAX_TURN_MINUTES,
                                               allow_inf_nan=False, description=TURN_LIMIT_DOC)
    permission_mode: PermissionMode = Field(PermissionMode.AUTO, description=PERMISSION_DOC)


class SendMessage(Body):
    message: str = Field(description="the next turn's message (the answer, when the session "
                         "needs input)")
    harness: str | None = Field(None, description="move the session to this harness first: "
                                "its first turn there carries a handoff account")
    model: str | None = Field(None, description="the model from this turn on (a new harness "
                              "clears it unless given)")
    output_schema: dict[str, Any] | None = Field(None, description=SCHEMA_DOC + "; default: "
                                                 "the session's")
    context: list[ContextItem] = Field(default_factory=list, description=CONTEXT_DOC)
    turn_timeout_minutes: float | None = Field(None, gt=0, le=MAX_TURN_MINUTES,
                                               allow_inf_nan=False, description=TURN_LIMIT_DOC)
    permission_mode: PermissionMode | None = Field(None, description=PERMISSION_DOC + "; for "
                                                   "this turn (default: the session's)")
    if_idle: bool = Field(False, description="start a turn only if none is running (else 409 "
                          "session_busy); without it a plain message to a running live turn "
                          "steers it (delivered: steer)")


class StepView(BaseModel):
    """One step of a live turn: what ended it and the working tree's git tree then."""

    step: int
    tool: str | None = Field(description="the tool that ended it; start and end: the turn's own")
    tree: str | None = Field(description="the git tree id (null: hashing had stopped)")
    ms: float | None = Field(description="how long the hash took")
    skipped: str | None = Field(description="why hashing stopped here (slow, failed)")
    size: int = Field(description="the bytes of its patch against the turn's first tree")
    cut: bool = Field(description="the patch was cut to its cap")

    @classmethod
    def of(cls, s: TreeStep) -> StepView:
        return cls(step=s.step, tool=s.tool, tree=s.tree, ms=s.ms, skipped=s.skipped,
                   size=s.size, cut=s.cut)  # fmt: skip


class TreeView(StepView):
    """A step with its patch against the turn's first tree (``git apply`` takes it)."""

    turn: int
    encoding: Literal["utf-8", "base64"]
    patch: str


class Decision(Body):
    decision: Literal["approve", "deny"]
    message: str = Field("", max_length=4000, description="with deny: why, for the agent "
                         "(Claude Code shows it to the model; Codex's answer carries no words)")


class Decided(BaseModel):
    """The decision made: what the running turn's agent was told, and the turn."""

    approval: str
    decision: Literal["approve", "deny"]
    turn: int


class ApprovalView(BaseModel):
    """What the running turn's agent waits to be allowed: answer it with its id."""

    id: str
    turn: int
    tool: str
    summary: str = Field(description="a redacted line saying what it would do")
    asked_at: datetime

    @classmethod
    def of(cls, a: PendingApproval) -> ApprovalView:
        return cls(id=a.id, turn=a.turn, tool=a.tool, summary=a.summary, asked_at=a.asked_at)


class Steer(Body):
    message: str = Field(description="what the running turn's agent is told, in the same turn")
    expected_turn: int | None = Field(None, ge=1, le=MAX_TURN, description="the turn this "
                                      "steer is meant for: 409 turn_ended when it is over, "
                                      "nothing changed; without it a session with no turn "
                                      "running gets the message as its next turn")


class Open(Body):
    harness: str | None = Field(None, description="the harness of the next turn")
    model: str | None = Field(None, description="the model of the next turn")


class Keep(Body):
    idle_minutes: float = Field(ge=0, le=MAX_IDLE_MINUTES, allow_inf_nan=False,
                                description="0: never suspend for idleness; at most a week")


class Fork(Body):
    n: int = Field(ge=1, le=10, description="how many sessions to make")


class Wait(Body):
    turn: int | None = Field(None, ge=1, le=MAX_TURN, description="default: the latest turn")
    timeout: float = Field(30, ge=0, le=600, allow_inf_nan=False, description="seconds; the turn comes back "
                           "unfinished (finished_at null) if it is still running")  # fmt: skip


class Exec(Body):
    argv: list[str] = Field(min_length=1, description="the command, run in the repo folder")
    stdin: Base64 | None = Field(None, description="the command's standard input")
    timeout: float | None = Field(None, gt=0, le=86400, allow_inf_nan=False,
                                  description="seconds")


class NewEnvironment(Body):
    name: str
    repo: str = Field(description="a git URL, or an absolute path on the server")
    branch: str | None = Field(None, description="default: the remote's HEAD")
    setup: str | None = Field(None, description="run with bash in every new sandbox")
    vars: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict, description="stored encrypted, never "
                                    "shown again, given to every turn")  # fmt: skip
    host_ports: list[int] = Field(default_factory=list, description="host loopback ports (a "
                                  "local model server) its sandboxes reach at their own "
                                  "127.0.0.1:PORT; no other host port is reachable")  # fmt: skip
    turn_timeout_minutes: float | None = Field(None, gt=0, le=MAX_TURN_MINUTES,
                                               allow_inf_nan=False, description=ENV_LIMIT_DOC)
    image: str | None = Field(None, description=IMAGE_DOC)
    warm_pool: int = Field(0, ge=0, le=100, description=WARM_POOL_DOC)
    warm_pool_hours: str | None = Field(None, max_length=1000, description=WARM_HOURS_DOC)
    allowed_hosts: list[str] = Field(default_factory=list, description=HOSTS_DOC)
    deny_rules: dict[str, str] = Field(default_factory=dict, description=RULES_DOC)
    notify_url: str | None = Field(None, description=NOTIFY_DOC)


class EnvironmentPatch(Body):
    """Only the fields given change; the repo cannot."""

    branch: str | None = Field(None, description="null: the remote's HEAD")
    setup: str | None = Field(None, description="null or empty: none")
    vars: dict[str, str] = Field(default_factory=dict, description="added or replaced")
    secrets: dict[str, str] = Field(default_factory=dict, description="added or replaced; "
                                    "stored encrypted, never shown again")  # fmt: skip
    unset: list[str] = Field(default_factory=list, description="variables or secrets to remove")
    host_ports: list[int] | None = Field(None, description="replaces the list")
    turn_timeout_minutes: float | None = Field(None, gt=0, le=MAX_TURN_MINUTES,
                                               allow_inf_nan=False, description=ENV_LIMIT_DOC)
    image: str | None = Field(None, description=f"{IMAGE_DOC}; null: none")
    warm_pool: int | None = Field(None, ge=0, le=100, description=WARM_POOL_DOC)
    warm_pool_hours: str | None = Field(None, max_length=1000,
                                        description=f"{WARM_HOURS_DOC}")  # fmt: skip
    allowed_hosts: list[str] | None = Field(None, description=f"{HOSTS_DOC}; replaces the list")
    deny_rules: dict[str, str] | None = Field(None, description=f"{RULES_DOC}; replaces them")
    notify_url: str | None = Field(None, description=f"{NOTIFY_DOC}; null: none of its own")


class TurnArtifactView(BaseModel):
    path: str
    size: int = Field(description="bytes stored (after redaction)")
    redacted: bool = Field(description="known secret shapes in it were masked")


class RepairView(BaseModel):
    reason: str = Field(description="why the result needed repair")
    started_at: datetime
    exit_code: int | None


class ContextView(BaseModel):
    kind: str
    name: str | None
    url: str | None
    base_commit: str | None
    size: int

    @classmethod
    def of(cls, ref: ContextRef) -> ContextView:
        return cls(kind=ref.kind.value, name=ref.name, url=ref.url, base_commit=ref.base_commit,
                   size=ref.size)  # fmt: skip


class NewUpload(Body):
    kind: ContextKind = Field(description="the kind of the item it is for (its limit applies)")


class CompleteUpload(Body):
    sha256: str = Field(description="of the whole, all parts in order")


class UploadView(BaseModel):
    upload_id: str
    kind: str
    part_mb: float = Field(description="the most one part may carry, in MiB")
    max_bytes: int = Field(description="the most the whole may carry")
    expires_at: datetime
    complete: bool
    size: int
    sha256: str | None

    @classmethod
    def of(cls, u: Upload) -> UploadView:
        return cls(upload_id=u.id, kind=u.kind.value, part_mb=u.part_bytes / 2**20,
                   max_bytes=u.max_bytes, expires_at=u.expires_at, complete=u.complete,
                   size=u.size, sha256=u.sha256)  # fmt: skip


class PartView(BaseModel):
    upload_id: str
    part: int
    size: int


class TurnView(BaseModel):
    n: int
    message: str
    requested_at: datetime
    started_at: datetime | None = Field(description="when the harness started; empty while "
                                        "the session starts")
    finished_at: datetime | None
    exit_code: int | None
    outcome: str | None = Field(description="exited, failed, interrupted, timed_out or "
                                "needs_input (the agent asked a question)")
    summary: str | None
    error_code: str | None
    harness_session: str | None
    handoff: bool = Field(description="its prompt carried a (lossy) account of turns its "
                          "harness did not see")
    harness: str | None = Field(description="the harness that ran it")
    usage: dict[str, int]
    output_schema: dict[str, Any] | None = Field(description="what its result is checked against")
    result: Any = Field(description="the structured result (out/result.json), checked")
    result_error: str | None = Field(description="why there is no valid result after the "
                                     "repair turn")
    question: str | None = Field(description="what the agent asked (outcome needs_input)")
    question_options: list[str] = Field(description="answers it offered to pick from")
    artifacts: list[TurnArtifactView] = Field(description="the files it handed back (new or "
                                              "changed)")
    warnings: list[str] = Field(description="what was left out, and why: of what it handed "
                                "back, or of hangar's settings in the harness's own "
                                "configuration files")
    timeout_minutes: float | None = Field(description="its time limit, fixed when it started")
    repair: RepairView | None = Field(description="the repair run its result needed")
    repair_usage: dict[str, int]
    context: list[ContextView] = Field(description="what came with its message")
    steps: list[StepView] = Field(default_factory=list, description="a live turn's steps: the "
                                  "working tree's git tree after each (show one with its patch: "
                                  "GET .../turns/{n}/trees/{step})")

    @classmethod
    def of(cls, turn: Turn) -> TurnView:
        """The turn as surfaces show it; a result kept in blobs must be loaded into ``turn``
        first (the service's reads do)."""
        repair = turn.repair
        return cls(
            n=turn.n, message=turn.message, requested_at=turn.requested_at,
            started_at=turn.started_at,
            finished_at=turn.finished_at, exit_code=turn.exit_code,
            outcome=turn.outcome.value if turn.outcome else None, summary=turn.summary,
            error_code=turn.error_code, harness_session=turn.harness_session,
            handoff=turn.handoff, harness=turn.harness, usage=turn.usage,
            output_schema=turn.output_schema, result=turn.result,
            result_error=turn.result_error, question=turn.question,
            question_options=turn.question_options,
            artifacts=[TurnArtifactView(path=a.path, size=a.size, redacted=a.redacted)
                       for a in turn.artifacts],
            warnings=turn.warnings, timeout_minutes=turn.timeout_minutes,
            repair=RepairView(reason=repair.reason, started_at=repair.started_at,
                              exit_code=repair.exit_code) if repair else None,
            repair_usage=turn.repair_usage,
            context=[ContextView.of(c) for c in turn.context],
            steps=[StepView.of(s) for s in turn.steps],
        )  # fmt: skip


class ArtifactView(BaseModel):
    path: str
    turn: int
    size: int
    uri: str = Field(description="the MCP resource that reads it")


class ProgressLineView(BaseModel):
    message: str = Field(description="redacted, at most 500 characters")
    pct: float | None = Field(description="0 to 100, when the agent said")


class ProgressView(BaseModel):
    """The running turn's progress lines after a cursor; ask again from ``cursor``."""

    lines: list[ProgressLineView]
    cursor: int


class CheckpointView(BaseModel):
    id: str
    ts: datetime
    reason: str
    head: str | None
    base: str | None
    warnings: list[str]
    size: int = Field(description="bytes this checkpoint stored (its new chunks and manifest: "
                      "what it shares with earlier checkpoints counts there)")
    verified: bool = Field(description="it passed the checks of everything its restore "
                           "depends on, when it was taken")

    @classmethod
    def of(cls, c: Checkpoint) -> CheckpointView:
        return cls(id=c.id, ts=c.ts, reason=c.reason.value, head=c.head, base=c.base,
                   warnings=c.warnings, size=c.total_size, verified=c.verified)  # fmt: skip


class SessionSummary(BaseModel):
    """A session as lists show it: no turns, no checkpoints, the last summary redacted."""

    id: str
    name: str
    title: str
    state: str
    harness: str
    model: str | None
    harness_session: str | None = Field(description="the harness's conversation id")
    sandbox_id: str | None
    environment: str
    repo: str | None
    branch: str
    idle_minutes: float
    needs_input: str | None = Field(description="the question the last turn asked; answer it "
                                    "with send")
    question_options: list[str] = Field(description="answers the agent offered to pick from")
    output_schema: dict[str, Any] | None = Field(description="what the turns' results are "
                                                 "checked against (sends inherit it)")
    last_active_at: datetime
    created_at: datetime
    error: str | None
    phase: dict[str, Any] | None = Field(description="while it starts: {step, detail, since}, "
                                         "step one of creating_sandbox, cloning, "
                                         "running_setup, restoring, starting_turn")
    start_error: dict[str, Any] | None = Field(description="why the last start failed: {step, "
                                               "what, message, code}; send or open try again")
    checkpoint_error: str | None = Field(description="the last checkpoint's failure, until one "
                                         "succeeds (its sandbox is kept meanwhile)")
    restored_from: str | None = Field(description="the checkpoint the sandbox was restored from")
    restore_skipped: list[dict[str, str]] = Field(description="newer checkpoints that restore "
                                                  "could not use, with why: "
                                                  "{checkpoint_id, code, message}")
    restore_warnings: list[str] = Field(description="what the last restore could not put back "
                                        "as it was (a branch left detached, paths git refuses)")
    resume_hint: str | None = Field(description="what to type in the terminal to carry on")
    summary: str | None = Field(description="the last turn's summary (redacted in lists)")
    turn_count: int | None = Field(description="how many turns it has")
    open_terminals: int = Field(description="shells and terminals open on it now (each keeps "
                                "it from suspending for idleness)")
    permission_mode: str = Field(description="who decides its turns' commands and edits: auto, "
                                 "ask or deny-risky")
    pending_approvals: list[ApprovalView] = Field(description="what the running turn's agent "
                                                  "waits to be allowed (approve or deny each)")
    change: ChangeSize | None = Field(description="the size of the whole change as of the "
                                      "newest checkpoint: {files, added, removed} (null: not "
                                      "counted yet)")
    progress: str | None = Field(description="while a turn runs: its latest progress line "
                                 "(a tool call, the agent's words); null otherwise")

    @classmethod
    def fields_of(cls, s: Session, summary: str | None) -> dict[str, object]:
        hint = get_harness(s.harness).resume_hint(s.harness_session) if s.harness_session else None
        return dict(
            id=s.id, name=s.name, title=s.title, state=s.state.value, harness=s.harness,
            model=s.model, harness_session=s.harness_session, sandbox_id=s.sandbox_id,
            environment=s.environment, repo=s.repo, branch=s.branch,
            idle_minutes=s.idle_minutes, needs_input=s.needs_input,
            question_options=s.question_options, output_schema=s.output_schema,
            last_active_at=s.last_active_at, created_at=s.created_at, error=s.error,
            phase=s.phase.model_dump(mode="json") if s.phase else None,
            start_error=s.start_error.model_dump(mode="json") if s.start_error else None,
            checkpoint_error=s.checkpoint_error, restored_from=s.restored_from,
            turn_count=s.turn_count,
            open_terminals=len(live(s.shells)),
            restore_skipped=[k.model_dump() for k in s.restore_skipped],
            restore_warnings=s.restore_warnings,
            resume_hint=hint, summary=summary, permission_mode=s.permission_mode.value,
            pending_approvals=[ApprovalView.of(a) for a in s.pending_approvals],
            change=s.change, progress=s.progress,
        )  # fmt: skip

    @classmethod
    def of(cls, s: Session) -> SessionSummary:
        """As lists show it: from the record alone (no query per session), redacted."""
        fields = cls.fields_of(s, redact(s.last_summary) if s.last_summary else None)
        fields["title"] = redact(s.title) or ""  # a title is the first message's first line
        return cls.model_validate(fields)


class SessionView(SessionSummary):
    """A session with its turns (oldest first) and checkpoints (newest last)."""

    turns: list[TurnView]
    checkpoints: list[CheckpointView]
    good_checkpoint: str | None = Field(description="the newest checkpoint known to restore (it "
                                        "restored, or passed the checks since no restore failed "
                                        "on it): pruning never drops it")
    conversations: dict[str, str] = Field(description="harness -> its conversation id, for "
                                          "every harness the session has used")

    @classmethod
    def detail(cls, s: SessionDetail) -> SessionView:
        fields = cls.fields_of(s, s.turns[-1].summary if s.turns else None)
        return cls.model_validate({
            **fields,
            "conversations": {h: c.id for h, c in sorted(s.conversations.items())},
            "turns": [TurnView.of(t) for t in s.turns],
            "checkpoints": [CheckpointView.of(c) for c in s.checkpoints],
            "good_checkpoint": last_good_checkpoint(s.checkpoints, s),
        })  # fmt: skip


class SessionPage(BaseModel):
    """One page of sessions, newest first; ``next_cursor`` asks for the next (null: the end)."""

    sessions: list[SessionSummary]
    next_cursor: str | None

    @classmethod
    def of(cls, sessions: list[Session], next_cursor: str | None) -> SessionPage:
        return cls(sessions=[SessionSummary.of(x) for x in sessions], next_cursor=next_cursor)


class StartedView(BaseModel):
    """What new and send answer at once: the session (STARTING while its sandbox is made) and
    the number of the turn it starts; follow it with wait or the log."""

    session: SessionView
    turn: int
    delivered: Literal["turn", "steer"] = Field(
        "turn", description="turn: the message starts turn `turn`; steer: it joined turn "
        "`turn`, which was running")


class TerminalTicket(Body):
    mode: Literal["shell", "agent"] | None = Field(
        None, description="when given, the session is checked now as that terminal will check "
        "it, so one that cannot open (no sandbox, no conversation, a turn running) is refused "
        "here with its reason (a browser is told nothing of a refused websocket)")


class TerminalResize(Body):
    """A terminal's control message (a text frame): the terminal now has this size (sizes
    above 1,000 are taken as 1,000)."""

    type: Literal["resize"]
    rows: int = Field(ge=1)
    cols: int = Field(ge=1)


class TerminalTicketView(BaseModel):
    """A ticket for one terminal of one session: pass it as ``?ticket=`` to the terminal's
    websocket. It opens one terminal, once."""

    ticket: str = Field(description="the secret; shown only here")
    expires_at: datetime = Field(description="unused by then, it is no longer valid")


class EnvironmentView(BaseModel):
    name: str
    repo: str
    branch: str | None
    setup: str | None
    vars: list[str] = Field(description="variable names; values are not shown")
    secrets: list[str] = Field(description="secret names; values are never shown")
    host_ports: list[int] = Field(description="host loopback ports its sandboxes reach")
    turn_timeout_minutes: float | None = Field(description=ENV_LIMIT_DOC)
    image: str | None = Field(description=IMAGE_DOC)
    warm_pool: int = Field(description=WARM_POOL_DOC)
    warm_pool_hours: str | None = Field(description=WARM_HOURS_DOC)
    allowed_hosts: list[str] = Field(description=HOSTS_DOC)
    deny_rules: dict[str, str] = Field(description=RULES_DOC)
    notify_url: str | None = Field(description=NOTIFY_DOC)
    warnings: list[str] = Field(description="what would keep its sandboxes from working, such "
                                "as a variable naming a loopback port they cannot reach")
    created_at: datetime

    @classmethod
    def of(cls, e: Environment, *, host_ports: bool = True) -> EnvironmentView:
        """The view; ``host_ports``: whether this hangar's sandboxes can reach host ports
        (what the warnings say of a loopback URL)."""
        return cls(name=e.name, repo=e.repo, branch=e.branch, setup=e.setup,
                   vars=sorted(e.vars), secrets=sorted(e.secrets), host_ports=e.host_ports,
                   turn_timeout_minutes=e.turn_timeout_minutes, image=e.image,
                   warm_pool=e.warm_pool, warm_pool_hours=e.warm_pool_hours,
                   allowed_hosts=e.allowed_hosts, deny_rules=e.deny_rules,
                   notify_url=e.notify_url,
                   warnings=loopback_warnings(e, host_ports=host_ports),
                   created_at=e.created_at)  # fmt: skip


class SandboxView(BaseModel):
    id: str
    labels: dict[str, str]
    created_at: datetime
    session: str | None = Field(description="the name of the session it belongs to")

    @classmethod
    def of(cls, info: SandboxInfo, names: Mapping[str, str]) -> SandboxView:
        owner = info.labels.get(SESSION_LABEL)
        return cls(id=info.id, labels=dict(info.labels), created_at=info.created_at,
                   session=names.get(owner, owner) if owner else None)  # fmt: skip


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="stable: clients match on it")
    message: str


class ErrorView(BaseModel):
    """Every error: ``{"error": {"code", "message", ...fields naming what was wrong}}``."""

    error: ErrorBody
