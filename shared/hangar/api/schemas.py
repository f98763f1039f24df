"""Wire shapes of the REST API: requests and views, as pydantic models."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from hangar.harnesses import get_harness
from hangar.models import Checkpoint, Environment, Session, SessionDetail, Turn
from hangar.redact import redact


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NewSession(Request):
    name: str
    message: str
    env: str
    harness: str = "claude"
    model: str | None = None
    title: str | None = None
    idle_minutes: float | None = None


class SendMessage(Request):
    message: str


class Keep(Request):
    idle_minutes: float = Field(ge=0)


class Fork(Request):
    n: int = Field(ge=1, le=10)


class Wait(Request):
    turn: int | None = None
    timeout: float = Field(30, ge=0, le=600)


class Exec(Request):
    argv: list[str] = Field(min_length=1)
    stdin: str | None = Field(default=None, description="base64 bytes for the command's stdin")
    timeout: float | None = Field(default=None, gt=0)


class NewEnvironment(Request):
    name: str
    repo: str
    branch: str | None = None
    setup: str | None = None
    vars: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict)


class TurnView(BaseModel):
    n: int
    message: str
    started_at: datetime
    finished_at: datetime | None
    exit_code: int | None
    outcome: str | None
    summary: str | None
    error_code: str | None
    handoff: bool
    usage: dict[str, int]

    @classmethod
    def of(cls, turn: Turn) -> TurnView:
        return cls(
            n=turn.n, message=turn.message, started_at=turn.started_at,
            finished_at=turn.finished_at, exit_code=turn.exit_code,
            outcome=turn.outcome.value if turn.outcome else None, summary=turn.summary,
            error_code=turn.error_code, handoff=turn.handoff, usage=turn.usage,
        )  # fmt: skip


class CheckpointView(BaseModel):
    id: str
    ts: datetime
    reason: str
    head: str | None
    base: str | None
    warnings: list[str]
    size: int

    @classmethod
    def of(cls, c: Checkpoint) -> CheckpointView:
        return cls(id=c.id, ts=c.ts, reason=c.reason.value, head=c.head, base=c.base,
                   warnings=c.warnings, size=c.total_size)  # fmt: skip


class SessionView(BaseModel):
    id: str
    name: str
    title: str
    state: str
    harness: str
    model: str | None
    harness_session: str | None
    sandbox_id: str | None
    environment: str
    repo: str | None
    branch: str
    idle_minutes: float
    needs_input: str | None
    last_active_at: datetime
    created_at: datetime
    error: str | None
    summary: str | None = Field(default=None, description="the last turn's summary, redacted")
    resume_hint: str | None
    turns: list[TurnView] | None = None
    checkpoints: list[CheckpointView] | None = None

    @classmethod
    def of(cls, s: Session, *, summary: str | None = None) -> SessionView:
        hint = get_harness(s.harness).resume_hint(s.harness_session) if s.harness_session else None
        view = cls(
            id=s.id, name=s.name, title=s.title, state=s.state.value, harness=s.harness,
            model=s.model, harness_session=s.harness_session, sandbox_id=s.sandbox_id,
            environment=s.environment, repo=s.repo, branch=s.branch,
            idle_minutes=s.idle_minutes, needs_input=s.needs_input,
            last_active_at=s.last_active_at, created_at=s.created_at, error=s.error,
            summary=redact(summary), resume_hint=hint,
        )  # fmt: skip
        if isinstance(s, SessionDetail):
            view.turns = [TurnView.of(t) for t in s.turns]
            view.checkpoints = [CheckpointView.of(c) for c in s.checkpoints]
            view.summary = s.turns[-1].summary if s.turns else None
        return view


class EnvironmentView(BaseModel):
    name: str
    repo: str
    branch: str | None
    setup: str | None
    vars: list[str] = Field(description="variable names; values are not shown")
    secrets: list[str] = Field(description="secret names; values are never shown")

    @classmethod
    def of(cls, e: Environment) -> EnvironmentView:
        return cls(name=e.name, repo=e.repo, branch=e.branch, setup=e.setup,
                   vars=sorted(e.vars), secrets=sorted(e.secrets))  # fmt: skip


class SandboxView(BaseModel):
    id: str
    labels: dict[str, str]
    created_at: datetime


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorView(BaseModel):
    error: ErrorBody
