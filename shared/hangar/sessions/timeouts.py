"""A running turn's two time limits, and why it is stopped when one runs out.

- Its time limit (``Turn.timeout_minutes``): the send's (``new`` and ``send`` take one), else
  its environment's, else ``HANGAR_TURN_TIMEOUT_MINUTES`` (120); fixed when the turn starts and
  counted from ``started_at`` (the control plane's clock, which set it).
- Its idle limit, ``HANGAR_TURN_IDLE_MINUTES`` (15): that long with neither a new byte in its
  run log nor any on its standard error, measured inside the sandbox by the files' modification
  times against the sandbox's clock (:func:`hangar.processes.runs.read_run`), so a clock that
  differs between the sandbox and the control plane does not count.

Both apply to a turn's own run, not to its result's repair run (which has its own limit,
``HANGAR_EXCHANGE_REPAIR_TIMEOUT_MINUTES``). Settings take fractions of a minute (tests use a
few seconds). The reason is recorded on the turn (``stopped_for``) before its run is stopped,
and the turn then ends ``timed_out`` with that reason as its summary
(:mod:`hangar.sessions.turns`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hangar.config import Settings
from hangar.errors import InvalidInput
from hangar.models import Environment, Turn

MAX_TURN_MINUTES = 10_080
"""The longest time limit a send or an environment may give a turn: a week."""


def check_minutes(minutes: float | None, field: str) -> float | None:
    """A turn's time limit as asked (None: not asked); InvalidInput outside (0, a week]."""
    if minutes is None:
        return None
    if not 0 < minutes <= MAX_TURN_MINUTES:
        raise InvalidInput(f"a turn's time limit must be over 0 and at most {MAX_TURN_MINUTES} "
                           f"minutes (a week), not {minutes:g}", field=field)  # fmt: skip
    return minutes


def turn_limit(settings: Settings, environment: Environment, asked: float | None) -> float:
    """The time limit a starting turn gets, in minutes: the send's, else the environment's,
    else the setting's."""
    return asked or environment.turn_timeout_minutes or settings.turn_timeout_minutes


def spoken(minutes: float) -> str:
    """A limit as people read it: minutes, or seconds under one."""
    if minutes >= 1:
        return f"{minutes:g} minute" + ("" if minutes == 1 else "s")
    seconds = round(minutes * 60, 1)
    return f"{seconds:g} second" + ("" if seconds == 1 else "s")


def overdue(settings: Settings, turn: Turn, idle_seconds: float | None, now: datetime) -> str | None:
    """Why turn ``turn``, whose run has not ended and has had no output for ``idle_seconds``
    (None: unknown), must be stopped now, or None. A reason recorded already stands."""
    if turn.stopped_for is not None:
        return turn.stopped_for
    if turn.started_at is None or turn.repair is not None:
        return None
    limit = turn.timeout_minutes or settings.turn_timeout_minutes
    if now >= turn.started_at + timedelta(minutes=limit):
        return f"the turn timed out after {spoken(limit)}"
    idle = settings.turn_idle_minutes
    if idle_seconds is not None and idle_seconds >= idle * 60:
        return f"the turn had no output for {spoken(idle)}"
    return None
