"""The local backend of the ticks port: ``local:``, an in-process ticker over the due-times the db
keeps (the embedded default).

One daemon thread (the loop) reads the due-times from the db, hands each due one to a worker
thread, and sleeps until the earliest one still ahead. It never sleeps longer than
``poll_seconds``, so due-times written by another process (a CLI, a second server) are seen;
``schedule`` in this process wakes it at once if the new time is earlier than what it sleeps
toward.

Concurrency: up to ``workers`` handlers run at once, each in its own daemon thread, so one slow
handler (a checkpoint) does not hold up the others; ticks are handed out in due order, only
when a worker is free (so a tick never waits in a queue where a move could not reach it), and
never two for one key at once. Two ``LocalTicks`` on one db (two processes) may both deliver a
tick: delivery is at-least-once.

Backoff for a handler that raised is kept in memory, keyed by the tick's version and due-time:
if the tick is moved meanwhile the backoff is dropped and the new time is honoured; after a
restart a failed tick is retried at once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from hangar.config import Settings
from hangar.db import Db
from hangar.db.records import utc
from hangar.errors import HangarError, InvalidInput, InvalidSettings
from hangar.models import TickDue
from hangar.ticks import TickHandler, TickReceiver

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Failure:
    """A tick whose handler raised: not retried before ``retry_at`` (``time.monotonic``)
    unless it is moved."""

    version: int
    due_at: datetime
    attempts: int
    retry_at: float

    def matches(self, tick: TickDue) -> bool:
        return tick.version == self.version and utc(tick.due_at) == self.due_at


class LocalTicks:
    """The ticks port in this process. See the module docstring for how it runs."""

    receiver: TickReceiver | None = None
    """It delivers its ticks itself: none arrive over HTTP."""

    def __init__(
        self,
        db: Db,
        *,
        poll_seconds: float = 1.0,
        retry_seconds: float = 30.0,
        max_retry_seconds: float = 600.0,
        workers: int = 4,
    ) -> None:
        """``poll_seconds`` bounds every sleep; a handler that raised is retried after
        ``retry_seconds``, doubling with each failure in a row up to ``max_retry_seconds``;
        ``workers`` handlers run at most at once."""
        if poll_seconds <= 0 or retry_seconds <= 0 or max_retry_seconds < retry_seconds:
            raise InvalidInput(
                "ticks: poll_seconds and retry_seconds must be positive and "
                "max_retry_seconds at least retry_seconds"
            )
        if workers < 1:
            raise InvalidInput("ticks: workers must be at least 1", workers=workers)
        self._db = db
        self._poll_seconds = poll_seconds
        self._retry_seconds = retry_seconds
        self._max_retry_seconds = max_retry_seconds
        self._workers = workers
        self._lock = threading.Lock()
        self._wake = threading.Event()
        # Everything below is guarded by _lock.
        self._loop: threading.Thread | None = None
        self._stopping = False
        self._handlers: list[threading.Thread] = []
        self._running: set[str] = set()
        self._failures: dict[str, _Failure] = {}
        self._sleeping_toward: datetime | None = None  # None while the loop is awake

    @classmethod
    def from_url(cls, url: str, settings: Settings, db: Db) -> LocalTicks:
        """``local:`` (or ``local://``); the URL takes no path or options."""
        parts = urlsplit(url)
        if parts.scheme != "local" or parts.netloc or parts.path or parts.query or parts.fragment:
            raise InvalidSettings(
                f"HANGAR_TICKS: expected local:, got {url!r}", setting="HANGAR_TICKS"
            )
        return cls(db)

    # ------------------------------------------------------------------------ the port

    def schedule(
        self, key: str, kind: str, due_at: datetime, payload: dict[str, Any] | None = None
    ) -> None:
        due_at = utc(due_at)
        self._db.set_due(TickDue(key=key, kind=kind, due_at=due_at, payload=payload or {}))
        with self._lock:
            target = self._sleeping_toward
            if target is None or due_at < target:
                self._wake.set()

    def cancel(self, key: str) -> None:
        self._db.clear_due(key)

    def start(self, handler: TickHandler) -> None:
        """Start the loop thread. Raises RuntimeError if this ticker is already running; a
        stopped one may be started again."""
        with self._lock:
            if self._loop is not None:
                raise RuntimeError("this ticker is already running")
            self._stopping = False
            self._failures.clear()
            self._loop = threading.Thread(
                target=self._run, args=(handler,), name="hangar-ticks", daemon=True
            )
            self._loop.start()

    def stop(self) -> None:
        """Stop the loop, then wait for the handlers it started to return."""
        with self._lock:
            loop, self._stopping = self._loop, True
            self._wake.set()
        if loop is None:
            return
        loop.join()
        with self._lock:
            handlers, self._handlers = self._handlers, []
        for thread in handlers:
            thread.join()
        with self._lock:
            self._loop = None

    # ------------------------------------------------------------------------ the loop

    def _run(self, handler: TickHandler) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                # Cleared before reading, so a schedule() from here on wakes the next wait.
                self._wake.clear()
                self._sleeping_toward = None
                busy = frozenset(self._running)
                failures = dict(self._failures)
            try:
                delay = self._dispatch(handler, busy, failures)
            except Exception:  # the loop's top level: a db outage must not end the ticker
                logger.exception("ticks: reading due-times failed; trying again")
                delay = self._poll_seconds
            with self._lock:
                if self._stopping:
                    return
                self._sleeping_toward = datetime.now(UTC) + timedelta(seconds=delay)
            self._wake.wait(delay)

    def _dispatch(
        self, handler: TickHandler, busy: frozenset[str], failures: dict[str, _Failure]
    ) -> float:
        """Hand the due ticks to free workers; return how long to sleep.

        ``busy`` was read before the db, so a key whose handler finished after that is
        skipped this round (its handler's clear may not be visible in what was read); the
        finishing handler wakes the loop again.
        """
        now, clock = datetime.now(UTC), time.monotonic()
        free = self._workers - len(busy)
        # Room for every busy or backed-off key plus what can start now, so they cannot
        # crowd the due ones out of the page.
        limit = len(busy) + len(failures) + max(free, 1)
        listed = self._db.list_due(now + timedelta(seconds=self._poll_seconds), limit)
        delay = self._poll_seconds
        for tick in listed:
            if tick.key in busy:
                continue
            wait = (utc(tick.due_at) - now).total_seconds()
            failure = failures.get(tick.key)
            if failure is not None and failure.matches(tick):
                wait = max(wait, failure.retry_at - clock)
            if wait > 0:
                delay = min(delay, wait)
            elif free > 0:
                free -= 1
                self._start_handler(handler, tick)
            # else: due but no worker free; a finishing handler wakes the loop.
        if len(listed) < limit:
            # What is not listed was cancelled or moved past the window: its backoff is moot.
            listed_keys = {tick.key for tick in listed}
            with self._lock:
                for key in failures.keys() - listed_keys:
                    if self._failures.get(key) == failures[key]:
                        del self._failures[key]
        return delay

    def _start_handler(self, handler: TickHandler, tick: TickDue) -> None:
        thread = threading.Thread(
            target=self._deliver, args=(handler, tick), name=f"hangar-tick:{tick.key}", daemon=True
        )
        with self._lock:
            self._running.add(tick.key)
            self._handlers = [t for t in self._handlers if t.is_alive()]
            self._handlers.append(thread)
        thread.start()

    def _deliver(self, handler: TickHandler, tick: TickDue) -> None:
        """Run one handler; then clear the tick if it was not moved, or back it off."""
        try:
            try:
                handler(tick)
            except Exception:  # a handler's top level: log it and retry the tick later
                self._back_off(tick)
                return
            try:
                self._db.clear_due(tick.key, version=tick.version, due_at=tick.due_at)
            except HangarError:
                # The tick stays and comes again: at-least-once.
                logger.exception("ticks: could not clear tick %r after its handler", tick.key)
            with self._lock:
                self._failures.pop(tick.key, None)
        finally:
            with self._lock:
                self._running.discard(tick.key)
            self._wake.set()

    def _back_off(self, tick: TickDue) -> None:
        with self._lock:
            prior = self._failures.get(tick.key)
            attempts = prior.attempts + 1 if prior is not None and prior.matches(tick) else 1
            backoff = min(self._retry_seconds * 2 ** (attempts - 1), self._max_retry_seconds)
            self._failures[tick.key] = _Failure(
                tick.version, utc(tick.due_at), attempts, time.monotonic() + backoff
            )
        logger.exception(
            "ticks: handler for %s tick %r failed (attempt %d); retrying in %.1f s",
            tick.kind, tick.key, attempts, backoff,
        )
