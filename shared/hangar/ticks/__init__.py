"""The ticks port: scheduled hints (the idle check, the checkpoint interval, the turn watch, the
reaper), each a due-time under a key, kept in the db so that a restart loses none.

Contract for every backend (checked by :mod:`hangar.testing.ticks`):

- ``schedule`` creates the due-time with this key or moves it (kind and payload too); there is
  at most one per key. ``cancel`` removes it and is idempotent. Both work whether or not the
  ticker was started: the due-time lives in the db, not in the ticker.
- Delivery is **at-least-once and never early**: a handler is called with the
  :class:`~hangar.models.TickDue` at or after its ``due_at``, possibly more than once (after a
  crash, a restart, or by two tickers on one db), possibly late.
- A tick is removed only after its handler returned, and only if it was not moved meanwhile:
  a handler that reschedules its own key keeps the new due-time, which is delivered in turn.
- A handler that raises is logged (``logger.exception``) and gets the same tick again after a
  backoff (growing, capped); the tick is not removed.
- **Ticks are hints.** A handler re-reads the state it acts on and is idempotent; a lost, late,
  duplicated or forged tick must never lose work.
- A ticker takes due ticks one at a time in due order. Handlers for different keys may run
  concurrently if the backend says so; a ticker never runs two handlers for one key at once.
- ``stop`` returns once no handler of this ticker is running and the ticks whose handlers
  returned are settled (removed or kept as above); nothing is delivered after it. It is
  idempotent, and must not be called from inside a handler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from hangar.backends import pick
from hangar.config import Settings
from hangar.db import Db
from hangar.models import TickDue

TickHandler = Callable[[TickDue], None]
"""What a ticker calls with each due tick."""


@dataclass(frozen=True)
class Receipt:
    """What a receiver did with a delivery: the HTTP ``status`` to answer (non-2xx makes the
    sender retry) and the ``outcome`` word (delivered, stale, forged, ...), and the tick's
    key when one was named."""

    status: int
    outcome: str
    key: str | None = None


class TickReceiver(Protocol):
    """Ticks that arrive as HTTP requests (Cloud Tasks posts them): ``receive`` delivers the
    one a request's body names, if it is stored and due, to ``handler``; it never raises for a
    bad or stale body, and blocks while the handler runs."""

    def receive(self, body: bytes, handler: TickHandler | None = None) -> Receipt: ...


class Ticks(Protocol):
    @property
    def receiver(self) -> TickReceiver | None:
        """How deliveries arrive over HTTP, for a backend whose ticks come that way; None for
        one that delivers them itself (the in-process ticker)."""
        ...

    def schedule(
        self, key: str, kind: str, due_at: datetime, payload: dict[str, Any] | None = None
    ) -> None:
        """Create or move the due-time with this key (a naive ``due_at`` is UTC), and wake the
        ticker if it is now earlier than what it sleeps toward."""
        ...

    def cancel(self, key: str) -> None:
        """Remove the due-time with this key, if any. A handler already running is not
        interrupted (it re-reads state anyway)."""
        ...

    def start(self, handler: TickHandler) -> None:
        """Begin delivering due ticks to ``handler``."""
        ...

    def stop(self) -> None:
        """Stop delivering; wait for running handlers. Idempotent."""
        ...


def _open_local(url: str, settings: Settings, db: Db) -> Ticks:
    from hangar.ticks.local import LocalTicks

    return LocalTicks.from_url(url, settings, db)


def _open_cloudtasks(url: str, settings: Settings, db: Db) -> Ticks:
    from hangar.ticks.cloudtasks import CloudTasksTicks

    return CloudTasksTicks.from_url(url, settings, db)


_BACKENDS: dict[str, Callable[[str, Settings, Db], Ticks]] = {
    "local": _open_local,
    "cloudtasks": _open_cloudtasks,
}


def open_ticks(url: str, settings: Settings, db: Db) -> Ticks:
    """Open the backend the URL's scheme names, keeping due-times in ``db``; InvalidSettings
    for an unknown scheme."""
    return pick(_BACKENDS, url, "HANGAR_TICKS")(url, settings, db)
