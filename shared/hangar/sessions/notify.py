"""Being told: a small signed JSON event POSTed to ``HANGAR_NOTIFY_URL`` when a session needs
input, an approval is pending, a turn failed or a turn finished (docs/sessions.md "Being told").

An event travels as a ``notify`` tick (:class:`~hangar.sessions.schedule.NotifyTick`, scheduled
by :meth:`~hangar.sessions.schedule.Schedule.notify`), so a turn never waits on a receiver.
Its handler, :func:`handle`, makes one POST (at most :data:`TIMEOUT_SECONDS`); a 2xx answer
delivers it. Anything else is :class:`~hangar.errors.NotifyFailed`, and the handler schedules
the same event again after the next of :data:`BACKOFF_SECONDS`; after :data:`MAX_TRIES` tries
it is dropped with a warning. Delivery is at least once: a receiver may get an event more than
once (a tick delivered twice, an answer lost) and de-duplicates by its ``id``, which is stable
(the same session, turn and kind give the same id).

Signing: the body is signed with HMAC-SHA256 under ``HANGAR_NOTIFY_SECRET`` over
``TIMESTAMP + "." + BODY`` (the timestamp in Unix seconds as decimal ASCII, the body's bytes as
sent), sent as ``X-Hangar-Timestamp: TIMESTAMP`` and ``X-Hangar-Signature: sha256=HEX``. Each
try signs afresh, so a receiver may refuse a timestamp older than a few minutes (a replay)
without refusing a retry. :func:`verify` is what a receiver does.

The URL and the secret are read from the settings at each try, never carried in the tick: a
forged or stale tick can at worst repeat an event to the one configured receiver.
"""

from __future__ import annotations

from collections.abc import Callable

import hashlib
import hmac
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from hangar.config import Settings
from hangar.errors import NotifyFailed
from hangar.models import Session, Turn, TurnOutcome, utcnow
from hangar.redact import redact

if TYPE_CHECKING:
    from hangar.sessions.schedule import NotifyTick, Schedule

logger = logging.getLogger(__name__)

EventKind = Literal["needs_input", "approval_pending", "turn_failed", "turn_finished"]

TIMEOUT_SECONDS = 5.0
"""The longest one POST may take, connecting included."""
BACKOFF_SECONDS = (2.0, 10.0, 60.0, 300.0, 900.0)
"""The wait before each try again, in turn: about 21 minutes from the first try to the last."""
MAX_TRIES = len(BACKOFF_SECONDS) + 1
"""Tries at one event in all; after the last it is dropped (a warning in the log)."""
SUMMARY_CHARS = 280
"""The longest ``summary``: the opening of the turn's summary or question, redacted."""
MAX_AGE_SECONDS = 300
"""How old a timestamp :func:`verify` accepts by default (and how far in the future)."""

TIMESTAMP_HEADER = "X-Hangar-Timestamp"
SIGNATURE_HEADER = "X-Hangar-Signature"
ID_HEADER = "X-Hangar-Event-Id"


class NotifyEvent(BaseModel):
    """What the receiver gets, as JSON (fields that are None are left out)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=200, description="stable: de-duplicate by it")
    event: EventKind
    session: str = Field(description="the session's name")
    session_id: str
    turn: int = Field(ge=1)
    at: datetime = Field(description="when it happened (UTC)")
    summary: str | None = Field(default=None, max_length=SUMMARY_CHARS)
    approval_id: str | None = None

    def body(self) -> bytes:
        """The bytes POSTed (and signed)."""
        return self.model_dump_json(exclude_none=True).encode()


def _short(text: str | None) -> str | None:
    text = redact(text)
    if not text:
        return None
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def turn_event(session: Session, turn: Turn) -> NotifyEvent:
    """The event for a turn that has ended: ``needs_input`` (its question as the summary),
    ``turn_failed`` (failed or timed out), else ``turn_finished`` (interrupted ones too)."""
    kind: EventKind
    if turn.outcome is TurnOutcome.NEEDS_INPUT:
        kind, text = "needs_input", turn.question or turn.summary
    elif turn.outcome in (TurnOutcome.FAILED, TurnOutcome.TIMED_OUT):
        kind, text = "turn_failed", turn.summary
    else:
        kind, text = "turn_finished", turn.summary
    return NotifyEvent(id=f"{session.id}.{turn.n}.{kind}", event=kind, session=session.name,
                       session_id=session.id, turn=turn.n, at=turn.finished_at or utcnow(),
                       summary=_short(text))  # fmt: skip


def approval_event(session: Session, turn: int, approval_id: str,
                   summary: str | None = None) -> NotifyEvent:  # fmt: skip
    """The event for an approval that waits for a person (``summary``: the redacted one-line
    summary of what is asked)."""
    return NotifyEvent(id=f"{session.id}.{turn}.approval_pending.{approval_id}",
                       event="approval_pending", session=session.name, session_id=session.id,
                       turn=turn, at=utcnow(), summary=_short(summary),
                       approval_id=approval_id)  # fmt: skip


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value: ``sha256=`` and the hex HMAC-SHA256 under ``secret`` of
    ``TIMESTAMP.BODY``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: str, timestamp: str, signature: str, body: bytes,
           max_age: float = MAX_AGE_SECONDS, now: float | None = None) -> bool:  # fmt: skip
    """What a receiver checks: the timestamp is a whole number of seconds within ``max_age``
    of ``now`` and the signature matches (compared in constant time)."""
    if not (timestamp.isascii() and timestamp.isdigit()):  # int() takes "٣" too, not "²"
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > max_age:
        return False
    return hmac.compare_digest(sign(secret, int(timestamp), body), signature)


def deliver(url: str, secret: str, event: NotifyEvent,
            timeout: float = TIMEOUT_SECONDS) -> int:  # fmt: skip
    """POST the event once, signed now; the 2xx status it got. Redirects are not followed.
    Raises NotifyFailed (``status`` when an answer came) for any other answer or none."""
    import httpx  # here, not at import: a cold start does not pay for it

    body = event.body()
    stamp = int(time.time())
    headers = {"Content-Type": "application/json", "User-Agent": "hangar-notify",
               TIMESTAMP_HEADER: str(stamp), SIGNATURE_HEADER: sign(secret, stamp, body),
               ID_HEADER: event.id}  # fmt: skip
    try:
        response = httpx.post(url, content=body, headers=headers, timeout=timeout,
                              follow_redirects=False)  # fmt: skip
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise NotifyFailed(f"the notify URL did not answer: {type(exc).__name__}",
                           event=event.id) from None  # fmt: skip
    if not 200 <= response.status_code < 300:
        raise NotifyFailed(f"the notify URL answered {response.status_code}", event=event.id,
                           status=response.status_code)  # fmt: skip
    return response.status_code


def handle(settings: Settings, schedule: Schedule, tick: NotifyTick,
           url_of: Callable[[str], str | None] = lambda name: None) -> None:
    """Deliver a ``notify`` tick: one try; on NotifyFailed the event is scheduled again after
    its backoff (the tick's ``attempt`` one more), or dropped with a warning after the last
    try. Never raises NotifyFailed (the ticker's own retries are unbounded). Without
    ``HANGAR_NOTIFY_URL`` (unset since it was scheduled) the event is dropped."""
    event = tick.event
    url = (url_of(tick.environment) if tick.environment else None) or settings.notify_url
    if url is None or settings.notify_secret is None:
        logger.info("dropped notify event %s: no notify URL, or no secret to sign with",
                    event.id)  # fmt: skip
        return
    try:
        deliver(url, settings.notify_secret.get_secret_value(), event)
    except NotifyFailed as exc:
        tries = tick.attempt + 1
        if tries >= MAX_TRIES:
            logger.warning("dropped notify event %s after %d tries: %s", event.id, tries,
                           exc.message)  # fmt: skip
            return
        wait = BACKOFF_SECONDS[tick.attempt]
        logger.info("notify event %s, try %d of %d: %s; trying again in %g s", event.id, tries,
                    MAX_TRIES, exc.message, wait)  # fmt: skip
        schedule.notify(event, attempt=tries, seconds=wait, environment=tick.environment)
