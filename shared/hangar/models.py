"""The records hangar keeps, as pydantic v2 models.

Stored records carry a ``version``: the db port sets it (1 on create, +1 on every update) and
refuses an update whose version is not the one it stored (compare-and-set). Timestamps are
timezone-aware UTC; whoever creates or changes a record sets them, the db never does.

A session's turns and checkpoints are stored as records of their own (a session's history
grows without bound, and recording a checkpoint must not race with a change to the session);
:class:`SessionDetail` is the session with both lists filled in, as surfaces show it.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from enum import StrEnum
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

NAME_MAX = 64
"""The longest session or environment name, in characters."""

MAX_IDLE_MINUTES = 10_080
"""The longest idle timeout a session may have (a week); 0 is never."""

NAME_PATTERN = re.compile(rf"^[a-z0-9](?:[a-z0-9-]{{0,{NAME_MAX - 2}}}[a-z0-9])?$")
"""Session and environment names: lowercase slugs of 1 to NAME_MAX, what people type."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_checkpoint_id() -> str:
    return new_id("ckp", 6)


def new_id(prefix: str, nbytes: int = 4) -> str:
    """A random id such as ``ses-1a2b3c4d`` (the spec's "prefix + 8 hex")."""
    return f"{prefix}-{secrets.token_hex(nbytes)}"


class Record(BaseModel):
    """Base of every stored record: strict about unknown fields, versioned by the db."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    version: int = 0


class SessionState(StrEnum):
    STARTING = "starting"
    ACTIVE = "active"
    IDLE = "idle"
    SUSPENDING = "suspending"
    SUSPENDED = "suspended"
    ARCHIVED = "archived"
    FAILED = "failed"


class PermissionMode(StrEnum):
    """Who decides a turn's commands and edits: ``auto`` runs them unasked (the sandbox is the
    boundary: not Claude Code's own ``--permission-mode auto``), ``ask`` waits for a person's
    decision on each, ``deny-risky`` denies those a rule names and asks for the rest."""

    AUTO = "auto"
    ASK = "ask"
    DENY_RISKY = "deny-risky"


class PendingApproval(BaseModel):
    """A command or edit a running turn's agent waits to be allowed: its ``id`` (answer with
    it), its ``turn``, the ``tool`` and a redacted one-line ``summary`` of its input."""

    id: str
    turn: int
    tool: str
    summary: str
    asked_at: datetime


class TurnOutcome(StrEnum):
    EXITED = "exited"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    TIMED_OUT = "timed_out"
    NEEDS_INPUT = "needs_input"


class CheckpointReason(StrEnum):
    TURN = "turn"
    SUSPEND = "suspend"
    DESTROY = "destroy"
    MANUAL = "manual"
    INTERVAL = "interval"


class Compression(StrEnum):
    ZSTD = "zstd"
    GZIP = "gzip"
    NONE = "none"


class ClaimKind(StrEnum):
    """What a claim on a session is for: the work its holder is doing."""

    START = "start"
    SUSPEND = "suspend"
    ARCHIVE = "archive"
    FINISH_TURN = "finish_turn"


class Claim(BaseModel):
    """A lease on a session: ``by`` (a worker) does ``kind`` until ``until``, renewing it while
    it works. An expired claim is anyone's to take over (finish or undo). ``token`` changes at
    every take-over, so a worker that lost its claim notices at its next write; ``tries``
    counts the workers that took the work on (1, then one more per take-over), and ``error``
    is why the last try failed, if it said (a turn's finish gives up after a bounded number)."""

    model_config = ConfigDict(extra="forbid")

    kind: ClaimKind
    by: str
    token: str
    until: datetime
    tries: int = Field(default=1, ge=1)
    error: str | None = None


class StartKind(StrEnum):
    NEW = "new"
    SEND = "send"
    OPEN = "open"
    FORK = "fork"


class StartStep(StrEnum):
    """Where a session that is starting is: what it waits on."""

    CREATING_SANDBOX = "creating_sandbox"
    CLONING = "cloning"
    RUNNING_SETUP = "running_setup"
    RESTORING = "restoring"
    STARTING_TURN = "starting_turn"


class Phase(BaseModel):
    """What a starting session is doing, since when; ``detail`` says more (a run's last
    line, the checkpoint being restored)."""

    model_config = ConfigDict(extra="forbid")

    step: StartStep
    detail: str = ""
    since: datetime = Field(default_factory=lambda: utcnow())

    def describe(self) -> str:
        """One line for people: ``making a sandbox``, ``cloning the repo (URL)``, ..."""
        text = _STEPS[self.step]
        detail = " ".join(self.detail.split())
        detail = detail if len(detail) <= 70 else detail[:67] + "..."
        return f"{text} ({detail})" if detail else text


_STEPS = {
    StartStep.CREATING_SANDBOX: "making a sandbox",
    StartStep.CLONING: "cloning the repo",
    StartStep.RUNNING_SETUP: "running the environment's setup",
    StartStep.RESTORING: "restoring the newest checkpoint",
    StartStep.STARTING_TURN: "starting the agent",
}


class ContextKind(StrEnum):
    """What a context item is (spec 004, In): files for ``$HANGAR_IO/in/<turn>/``, a URL
    listed in the prompt, a patch applied as uncommitted changes, a bundle of commits."""

    TEXT = "text"
    FILE = "file"
    LOG = "log"
    ISSUE = "issue"
    DIFF = "diff"
    URL = "url"
    PATCH = "patch"
    BUNDLE = "bundle"


class ContextRef(BaseModel):
    """A context item as accepted: checked, and (but a URL) sealed under a data key of its own
    at ``blob`` (``sessions/<session>/context/<turn>-<request>/<index>``), so it survives the
    start-up ticks."""

    model_config = ConfigDict(extra="forbid")

    kind: ContextKind
    name: str | None = Field(default=None, description="its file name under in/<turn>/")
    url: str | None = None
    base_commit: str | None = Field(default=None, description="a bundle's base on the remote")
    size: int = Field(default=0, ge=0)
    sha256: str | None = None
    key: str | None = Field(default=None, description="its data key, wrapped (base64)")
    blob: str | None = Field(default=None, description="where it is stored (its associated "
                             "data too)")


class MessageRef(BaseModel):
    """Where a message too large for a record is kept (:mod:`hangar.sessions.messages`):
    sealed in blobs at ``blob`` (also its associated data) under a data key of its own."""

    model_config = ConfigDict(extra="forbid")

    blob: str
    key: str = Field(description="its data key, wrapped (base64)")
    size: int = Field(ge=0, description="its bytes of UTF-8")
    sha256: str = Field(description="of its bytes of UTF-8")


class StartIntent(BaseModel):
    """What a start was asked to do, kept on the session so that any worker can carry it on:
    ``turn`` and ``message`` for new and send (the turn's record exists from the request on),
    ``source`` and ``checkpoint`` for a fork (the session and checkpoint to restore), ``run`` the detached run
    (clone, setup) the current step waits on."""

    model_config = ConfigDict(extra="forbid")

    kind: StartKind
    turn: int | None = None
    message: str | None = Field(default=None, description="the message, or only its opening "
                                "when it is kept in blobs (``message_ref``)")
    message_ref: MessageRef | None = Field(default=None, description="where a message too "
                                           "large for a record is kept")
    checkpoint: str | None = None
    source: str | None = None
    run: str | None = None
    attempts: int = 0
    context: list[ContextRef] = Field(default_factory=list)
    timeout_minutes: float | None = Field(
        default=None, description="the turn's time limit the send asked for (None: its "
        "environment's, else HANGAR_TURN_TIMEOUT_MINUTES)")
    permission_mode: PermissionMode | None = Field(
        default=None, description="the turn's permission mode the send asked for (None: the "
        "session's)")


class StartError(BaseModel):
    """Why the last start failed: ``step`` it failed at, ``what`` failed, ``message``, and
    the error's stable ``code``."""

    model_config = ConfigDict(extra="forbid")

    step: StartStep
    what: str
    message: str
    code: str


class Conversation(BaseModel):
    """A harness's own conversation in a session: its id, and the last turn it ran (later
    turns on other harnesses are what it missed)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    last_turn: int = Field(0, ge=0)


class ChangeSize(BaseModel):
    """The size of a session's whole change, base commit to working tree, as its session
    patch counts it (untracked files included, what the patch leaves out left out): the files
    it touches and the lines it adds and removes (a binary file counts as a file, no lines).
    Counted in the sandbox when a checkpoint is taken, so it is the agent's word: bounded, not
    trusted for anything but showing."""

    model_config = ConfigDict(extra="forbid")

    files: int = Field(ge=0, le=1 << 40)
    added: int = Field(ge=0, le=1 << 40)
    removed: int = Field(ge=0, le=1 << 40)


class Session(Record):
    """A stream of work you can come back to (spec 000 §5.1). ``harness_session`` is the
    current harness's conversation; ``conversations`` keeps every harness's it has used."""

    id: str = Field(default_factory=lambda: new_id("ses"))
    name: str
    title: str = ""
    owner: str = "admin"
    environment: str
    harness: str
    model: str | None = None
    repo: str | None = None
    base_branch: str | None = None
    branch: str = ""
    base_commit: str | None = None
    harness_session: str | None = None
    conversations: dict[str, Conversation] = Field(
        default_factory=dict, description="harness -> its conversation in this session"
    )
    fork_from: str | None = Field(
        default=None, description="the conversation the first turn forks (a session made by fork)"
    )
    forked_from: str | None = Field(default=None, description="the session it was forked from")
    sandbox_id: str | None = None
    sandbox_expires_at: datetime | None = None
    state: SessionState = SessionState.STARTING
    idle_minutes: float = Field(30, ge=0)
    needs_input: str | None = Field(
        default=None, description="the question the last turn ended on, until a turn answers it"
    )
    question_options: list[str] = Field(
        default_factory=list, description="answers the agent offered to pick from (redacted)"
    )
    output_schema: dict[str, Any] | None = Field(
        default=None, description="the JSON Schema of the turns' results (sends inherit it)"
    )
    permission_mode: PermissionMode = Field(
        default=PermissionMode.AUTO, description="who decides the turns' commands and edits "
        "(sends may ask for another for their turn)")
    pending_approvals: list[PendingApproval] = Field(
        default_factory=list, description="what the running turn's agent waits to be allowed")
    shells: dict[str, datetime] = Field(
        default_factory=dict,
        description="open shells and terminals: lease id -> lease expiry (activity while held)",
    )
    claim: Claim | None = Field(default=None, description="the lease of whoever works on it")
    start: StartIntent | None = Field(default=None, description="what a start is to do")
    phase: Phase | None = Field(default=None, description="where a start is")
    start_error: StartError | None = Field(default=None, description="why the last start failed")
    restored_from: str | None = Field(default=None, description="the checkpoint the sandbox came from")
    restore_skipped: list[SkippedCheckpoint] = Field(
        default_factory=list, description="newer checkpoints the last restore could not use"
    )
    restore_warnings: list[str] = Field(
        default_factory=list, description="what the last restore could not put back as it was"
    )
    turn_count: int | None = Field(default=None, description="how many turns it has (None: a "
                                   "record from before it was kept here)")
    last_summary: str | None = Field(default=None, description="the last finished turn's summary")
    change: ChangeSize | None = Field(
        default=None, description="the size of the whole change as of the newest checkpoint "
        "(None: none counted yet)")
    progress: str | None = Field(
        default=None, description="the running turn's latest progress line (redacted), kept "
        "by the turn's watch; None when no turn runs")
    checkpoint_error: str | None = Field(
        default=None,
        description="the last checkpoint's failure, until one succeeds; a sandbox whose "
        "checkpoint failed is kept (destroys wait for a good checkpoint)",
    )
    error: str | None = None
    job_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    last_active_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    def model_post_init(self, context: Any, /) -> None:
        if not self.branch:
            self.branch = f"hangar/session/{self.name}"


class TreeStep(BaseModel):
    """One step of a live turn as its driver recorded it (spec 002 "Trees"): ``step`` (0-based),
    the ``tool`` that ended it (``start``, ``end``), the working tree's git ``tree`` id then,
    how long the hash took (``ms``), or why hashing stopped (``skipped``); ``size`` the bytes of
    its patch against the turn's first tree (kept sealed with the turn), ``cut`` when the patch
    was cut to its cap."""

    step: int
    tool: str | None = None
    tree: str | None = None
    ms: float | None = None
    skipped: str | None = None
    size: int = 0
    cut: bool = False


class QueuedMessage(BaseModel):
    """A message that joined a turn before it started: as a record holds a message (all of it,
    or its opening with where the whole is sealed: :mod:`hangar.sessions.messages`)."""

    message: str
    message_ref: MessageRef | None = None


class SteerRecord(BaseModel):
    """A steer a live turn's agent was given (its driver answered ``delivered``): as a record
    holds a message (all of it, or its opening with where the whole is sealed:
    :mod:`hangar.sessions.messages`), when it was delivered, and how long the turn's run log
    was then (a byte offset: the transcript shows it before the first line starting at or
    after it)."""

    message: str
    message_ref: MessageRef | None = None
    at: datetime = Field(default_factory=utcnow)
    offset: int = Field(default=0, ge=0, description="the run log's size when it was delivered")


class Turn(Record):
    """One agent turn of a session; ``n`` counts from 1."""

    session_id: str
    n: int = Field(ge=1)
    message: str = Field(description="the message, or only its opening when it is kept in "
                         "blobs (``message_ref``; surfaces show the whole of it)")
    message_ref: MessageRef | None = Field(default=None, description="where a message too "
                                           "large for a record is kept")
    run_id: str = Field(default_factory=lambda: new_id("run"))
    requested_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = Field(
        default=None, description="when the harness started (empty while the session starts)"
    )
    finished_at: datetime | None = None
    exit_code: int | None = None
    outcome: TurnOutcome | None = None
    summary: str | None = None
    harness_session: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    log_cursor: int = 0
    error_code: str | None = None
    log_key: str | None = Field(
        default=None, description="the stored run log's data key, wrapped (base64); set once stored"
    )
    handoff: bool = Field(default=False, description="the prompt carried a lossy handoff account")
    harness: str | None = Field(default=None, description="the harness that ran it (None: a "
                                "record from before it was kept)")
    output_schema: dict[str, Any] | None = Field(
        default=None, description="the JSON Schema its result is checked against"
    )
    collected: bool = Field(
        default=False, description="what the agent handed back ($HANGAR_IO) has been read"
    )
    result: Any = Field(default=None, description="the structured result (out/result.json)")
    result_key: str | None = Field(
        default=None, description="a large result's data key, wrapped: the result is in blobs"
    )
    result_error: str | None = Field(
        default=None, description="why there is no valid result, after the repair turn"
    )
    question: str | None = Field(default=None, description="out/QUESTION.md: why it needs input")
    question_options: list[str] = Field(default_factory=list)
    artifacts: list[Artifact] = Field(
        default_factory=list, description="the new or changed files it handed back, stored"
    )
    warnings: list[str] = Field(
        default_factory=list, description="what was left out of what it handed back, and why"
    )
    repair: Repair | None = Field(
        default=None, description="the repair run asked for a missing or invalid result"
    )
    repair_usage: dict[str, int] = Field(default_factory=dict)
    context: list[ContextRef] = Field(
        default_factory=list, description="what came with its message (spec 004, In)"
    )
    command_key: str | None = Field(
        default=None, repr=False, description="a live turn's command key, wrapped (base64): "
        "steers and interrupts are signed with it (None: a one-shot turn)")
    commands_sent: int = Field(default=0, ge=0, description="the last command's seq given out")
    permission_mode: PermissionMode = Field(default=PermissionMode.AUTO,
                                            description="who decided its commands and edits")
    events_cursor: int = Field(default=0, ge=0, description="how far the run log was read for "
                               "the driver's signed events (approvals)")
    steps: list[TreeStep] = Field(default_factory=list, description="its steps' trees, "
                                  "recorded by a live turn's driver")
    steps_key: str | None = Field(default=None, repr=False, description="the data key of its "
                                  "steps' patches, sealed in blobs, wrapped (base64)")
    queued: list[QueuedMessage] = Field(
        default_factory=list, description="messages sent for it while its session was starting "
        "(before its run began): they follow its message, in order, in its prompt")
    steers: list[SteerRecord] = Field(
        default_factory=list, description="the steers delivered to it while it ran, in the "
        "order they were delivered (at most hangar.sessions.steering.MAX_STEERS)")
    context_base: str | None = Field(
        default=None, description="the session's new base, when a bundle started it fresh"
    )
    timeout_minutes: float | None = Field(
        default=None, description="its time limit, fixed when it starts (None: a record from "
        "before limits were kept, HANGAR_TURN_TIMEOUT_MINUTES holds)")
    stopped_for: str | None = Field(
        default=None, description="why hangar stopped its run (a limit ran out), recorded "
        "before the stop: the turn ends timed_out with it as its summary")

    @property
    def active_run_id(self) -> str:
        """The run the turn waits on: its repair run once one was started, else its own."""
        return self.repair.run_id if self.repair else self.run_id


class Artifact(BaseModel):
    """A file a turn handed back (``out/artifacts/<path>``), stored sealed under a data key of
    its own at ``sessions/<session>/artifacts/<turn>/<path>``."""

    model_config = ConfigDict(extra="forbid")

    path: str
    size: int = Field(ge=0, description="the stored bytes (after redaction)")
    sha256: str = Field(description="of the file as the agent left it (an unchanged one is not "
                        "stored again)")
    key: str = Field(description="its data key, wrapped (base64)")
    redacted: bool = False


class Repair(BaseModel):
    """The one repair run of a turn whose result was missing or invalid: the same conversation,
    asked to write a valid ``out/result.json``."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    reason: str
    started_at: datetime = Field(default_factory=utcnow)
    exit_code: int | None = None


class CheckpointPart(BaseModel):
    """One stored part. ``size`` is the packed (pre-encryption) size; ``stored_size`` is what the
    blob holds after encryption."""

    model_config = ConfigDict(extra="forbid")

    name: str
    size: int
    stored_size: int
    compression: Compression = Compression.NONE
    sha256: str
    key: str | None = Field(
        default=None, description="where it is stored, when not sessions/<session>/<checkpoint>/"
        "<name> (format 2's manifest: among the packs, so that a sweep collects it after a crash)")


class Checkpoint(Record):
    """A recorded checkpoint: every part listed here is stored, encrypted, under
    ``sessions/<session_id>/<id>/<part>`` in blobs."""

    id: str = Field(default_factory=new_checkpoint_id)
    session_id: str
    ts: datetime = Field(default_factory=utcnow)
    reason: CheckpointReason
    head: str | None = None
    base: str | None = None
    branch: str | None = None
    harness: str | None = None
    harness_session: str | None = None
    cwd: str | None = None
    conversation_dirs: list[str] = Field(
        default_factory=list, description="the folders under HOME the agent archive may hold"
    )
    exchange_dir: str | None = Field(
        default=None, description="the session's exchange folder under HOME ($HANGAR_IO)"
    )
    parts: list[CheckpointPart] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    fingerprint: str | None = None
    verified: bool = Field(
        default=False,
        description="it passed, in the sandbox, the checks of everything its restore depends on "
        "(False: an older hangar's, or one over the restore cap)",
    )
    wrapped_key: str = Field(description="the checkpoint's data key, wrapped by the keys port, base64")
    format: int = Field(
        default=1,
        description="1: each part stored whole under sessions/<session>/<id>/; 2: one sealed "
        "manifest part over content-addressed chunks kept in packs (see docs/architecture.md)",
    )
    source: str | None = Field(
        default=None,
        description="format 2: the checkpoint whose chunks this one reuses (of this session, "
        "or of the session it was forked from: source_session); recording refuses it once that "
        "one is pruned",
    )
    source_session: str | None = None
    packs: list[str] = Field(
        default_factory=list,
        description="format 2: the blob keys of every pack its manifest refers to, its own "
        "and other sessions' (a pack is alive while a kept checkpoint lists it)",
    )
    uses: list[str] = Field(
        default_factory=list, description="format 2: the sessions owning those packs"
    )
    written: int = Field(default=0, description="format 2: the bytes of the packs it wrote")
    change: ChangeSize | None = Field(
        default=None, description="the size of the session's change it holds (None: not "
        "counted: no session patch, or an older hangar's)")

    def part(self, name: str) -> CheckpointPart | None:
        return next((p for p in self.parts if p.name == name), None)

    @property
    def total_size(self) -> int:
        """The bytes this checkpoint stored: its parts and, format 2, the packs it wrote (the
        chunks it shares with earlier checkpoints count where they were first stored)."""
        return sum(p.stored_size for p in self.parts) + self.written


def takes_no_checkpoints(session: Session) -> bool:
    """Whether the session is archived or being archived: its checkpoints are dropped, and the
    record refuses any more (one in flight meanwhile would outlive the archive and name packs
    it swept)."""
    archiving = session.claim is not None and session.claim.kind is ClaimKind.ARCHIVE
    return archiving or session.state is SessionState.ARCHIVED


def last_good_checkpoint(checkpoints: Sequence[Checkpoint], session: Session) -> str | None:
    """The id of the newest of ``checkpoints`` (oldest first) known to restore: the one the
    session's sandbox was last restored from, or a newer one that passed the checks and that
    no restore has failed on since; None when none is known. Pruning never drops it."""
    failed = {s.checkpoint_id for s in session.restore_skipped}
    for checkpoint in reversed(checkpoints):
        if checkpoint.id == session.restored_from or (
            checkpoint.verified and checkpoint.id not in failed
        ):
            return checkpoint.id
    return None


def pruned(checkpoints: Sequence[Checkpoint], keep: int, session: Session) -> list[Checkpoint]:
    """Which of ``checkpoints`` (oldest first) pruning to ``keep`` drops, oldest first: all but
    the newest ``keep``, except the last good one (:func:`last_good_checkpoint`) and the one
    the session was last restored from, whatever ``keep`` says: a run of checkpoints the agent
    made unrestorable must never push out the last one that restores."""
    spared = {last_good_checkpoint(checkpoints, session), session.restored_from}
    return [c for c in checkpoints[: max(0, len(checkpoints) - keep)] if c.id not in spared]


class SkippedCheckpoint(BaseModel):
    """A checkpoint a restore tried and could not use, and why."""

    model_config = ConfigDict(extra="forbid")

    checkpoint_id: str
    code: str
    message: str


class SessionDetail(Session):
    """A session with its turns (oldest first) and checkpoints (newest last), as surfaces show it."""

    turns: list[Turn] = Field(default_factory=list)
    checkpoints: list[Checkpoint] = Field(default_factory=list)


class Environment(Record):
    """Where a session's sandbox comes from: a repo, a branch, setup, vars and sealed secrets,
    and optionally the container image it runs."""

    name: str
    repo: str
    branch: str | None = None
    setup: str | None = None
    vars: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(
        default_factory=dict, description="name -> ciphertext (base64); never the plain value"
    )
    host_ports: list[int] = Field(
        default_factory=list,
        description="host loopback ports its sandboxes reach at their own 127.0.0.1:PORT",
    )
    turn_timeout_minutes: float | None = Field(
        default=None, description="its sessions' turns' time limit (None: "
        "HANGAR_TURN_TIMEOUT_MINUTES); a send may give its own")
    image: str | None = Field(
        default=None, description="the container image its sandboxes run, on a backend that "
        "runs images (None, as in a record made before the field: the backend's own system)")
    warm_pool: int = Field(
        default=0, ge=0, description="ready sandboxes its warm pool keeps, on a sandbox backend "
        "with warm pools (gke://); 0: none of its own")
    warm_pool_hours: str | None = Field(
        default=None, description="when the warm pool is kept (hangar.sessions.warmhours; "
        "outside them it holds none); None: always, while warm_pool > 0")
    allowed_hosts: list[str] = Field(
        default_factory=list, description="hosts its agents' network tools may name under the "
        "deny-risky permission mode (a name covers its subdomains; hangar.sessions.rules)")
    deny_rules: dict[str, str] = Field(
        default_factory=dict, description="its own deny-risky rules: name -> a regular "
        "expression searched in what a tool would do")
    notify_url: str | None = Field(
        default=None, description="where its sessions' events are POSTed instead of "
        "HANGAR_NOTIFY_URL (signed with HANGAR_NOTIFY_SECRET)")
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class Token(Record):
    """An API token. Only the SHA-256 of the secret is kept. One with ``expires_at`` is not
    valid from then on (terminal tickets: :mod:`hangar.api.tickets`); records made before the
    field existed have none and never expire."""

    id: str = Field(default_factory=lambda: new_id("tok"))
    secret_hash: str
    scopes: list[str] = Field(default_factory=list)
    label: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None

    def expired(self, now: datetime) -> bool:
        """Whether the token is past its ``expires_at`` at ``now``."""
        return self.expires_at is not None and now >= self.expires_at


class TickDue(Record):
    """A due-time for a tick (idle check, checkpoint interval, turn watch, reap), keyed by
    ``key`` so that setting it again moves it rather than adding another."""

    key: str
    kind: str
    due_at: datetime
    payload: dict[str, Any] = Field(default_factory=dict)
