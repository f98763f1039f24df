"""The local ticker: the ticks conformance suite on a SQLite file, plus what only the local
backend promises (waking early on schedule, a pool of workers, one handler per key at a time,
backoff kept in memory, surviving a db outage) and ``open_ticks``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hangar.config import Settings
from hangar.db import Db
from hangar.db.sqlite import SqliteDb
from hangar.errors import BackendError, InvalidInput, InvalidSettings
from hangar.models import TickDue
from hangar.testing.ticks import FAR, WAIT, Recorder, TicksConformance, eventually, soon
from hangar.ticks import Ticks, open_ticks
from hangar.ticks.local import LocalTicks


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SqliteDb]:
    opened = SqliteDb(tmp_path / "hangar.db")
    yield opened
    opened.close()


@pytest.fixture
def tickers(db: SqliteDb) -> Iterator[Callable[..., LocalTicks]]:
    """Make LocalTicks on ``db`` (short times unless told), stopped after the test."""
    made: list[LocalTicks] = []

    def make(**options: Any) -> LocalTicks:
        ticker = LocalTicks(db, **{"poll_seconds": 0.05, "retry_seconds": 0.1, **options})
        made.append(ticker)
        return ticker

    yield make
    for ticker in made:
        ticker.stop()


class TestLocalTicks(TicksConformance):
    @pytest.fixture
    def ticks_factory(self, db: Db) -> Callable[[], Ticks]:
        return lambda: LocalTicks(db, poll_seconds=0.05, retry_seconds=0.1)


# ---------------------------------------------------------------------------- waking and polling


def test_schedule_wakes_a_ticker_sleeping_toward_a_later_time(
    tickers: Callable[..., LocalTicks],
) -> None:
    ticker, seen = tickers(poll_seconds=60), Recorder()
    ticker.start(seen)
    ticker.schedule("idle:ses-1", "idle", soon(3600))
    due = soon(0.05)
    ticker.schedule("idle:ses-2", "idle", due)
    assert seen.wait_count(1)
    assert seen.keys == ["idle:ses-2"]
    assert seen.deliveries[0].arrived >= due


def test_a_due_time_written_by_another_process_is_seen_within_the_poll(
    db: SqliteDb, tickers: Callable[..., LocalTicks]
) -> None:
    ticker, seen = tickers(), Recorder()
    ticker.start(seen)
    # Straight into the db, as another process would: no schedule() here to wake the ticker.
    db.set_due(TickDue(key="idle:ses-1", kind="idle", due_at=soon(0.05)))
    assert seen.wait_count(1)


def test_a_ticker_recovers_when_reading_the_db_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class FlakyDb(SqliteDb):
        failures = 2

        def list_due(self, before: datetime, limit: int = 100) -> list[TickDue]:
            if self.failures:
                self.failures -= 1
                raise BackendError("the database is away")
            return super().list_due(before, limit)

    flaky = FlakyDb(tmp_path / "flaky.db")
    ticker, seen = LocalTicks(flaky, poll_seconds=0.05), Recorder()
    try:
        ticker.schedule("idle:ses-1", "idle", soon(0))
        with caplog.at_level(logging.ERROR, logger="hangar.ticks.local"):
            ticker.start(seen)
            assert seen.wait_count(1)
        assert flaky.failures == 0
        assert "reading due-times failed" in caplog.text
    finally:
        ticker.stop()
        flaky.close()


# ---------------------------------------------------------------------------- workers


def test_a_slow_handler_does_not_hold_up_other_keys(
    tickers: Callable[..., LocalTicks],
) -> None:
    fast_seen = threading.Event()
    slow_waited: list[bool] = []

    def handler(tick: TickDue) -> None:
        if tick.key == "checkpoint:slow":
            slow_waited.append(fast_seen.wait(WAIT))
        else:
            fast_seen.set()

    ticker = tickers()
    ticker.schedule("checkpoint:slow", "checkpoint", soon(-2))
    ticker.schedule("idle:fast", "idle", soon(-1))
    ticker.start(handler)
    assert fast_seen.wait(WAIT)
    ticker.stop()
    assert slow_waited == [True]


def test_one_worker_takes_due_ticks_in_due_order(
    tickers: Callable[..., LocalTicks],
) -> None:
    ticker, seen = tickers(workers=1), Recorder()
    keys = [f"k{n}" for n in range(8)]
    base = soon(-10)
    for n, key in reversed(list(enumerate(keys))):
        ticker.schedule(key, "idle", base + timedelta(milliseconds=n))
    ticker.start(seen)
    assert seen.wait_count(len(keys))
    assert seen.keys == keys


def test_the_same_key_is_never_handled_twice_at_once(
    db: SqliteDb, tickers: Callable[..., LocalTicks]
) -> None:
    inside = threading.Semaphore(1)
    overlapped = threading.Event()
    ticker = tickers()

    def reschedule_then_linger(tick: TickDue, count: int) -> None:
        if not inside.acquire(blocking=False):
            overlapped.set()
            return
        try:
            if count == 1:
                # Due at once: a ticker that ignored the running handler would start it again.
                ticker.schedule(tick.key, tick.kind, soon(-1), {"n": 2})
                overlapped.wait(0.3)
        finally:
            inside.release()

    seen = Recorder(reschedule_then_linger)
    ticker.start(seen)
    ticker.schedule("watch:ses-1", "turn_watch", soon(0), {"n": 1})
    assert seen.wait_count(2)
    assert eventually(lambda: db.list_due(FAR) == [])
    ticker.stop()
    assert not overlapped.is_set()
    assert [d.tick.payload for d in seen.deliveries] == [{"n": 1}, {"n": 2}]


# ---------------------------------------------------------------------------- failures


def test_a_raising_handler_is_logged_and_retried_no_sooner_than_the_backoff(
    db: SqliteDb, tickers: Callable[..., LocalTicks], caplog: pytest.LogCaptureFixture
) -> None:
    def fail_first(tick: TickDue, count: int) -> None:
        if count == 1:
            raise RuntimeError("boom")

    ticker, seen = tickers(retry_seconds=0.2), Recorder(fail_first)
    with caplog.at_level(logging.ERROR, logger="hangar.ticks.local"):
        ticker.start(seen)
        ticker.schedule("idle:ses-1", "idle", soon(0))
        assert seen.wait_count(2)
        assert eventually(lambda: db.list_due(FAR) == [])
    first, second = seen.deliveries
    assert (second.arrived - first.arrived).total_seconds() >= 0.2
    [record] = [r for r in caplog.records if "failed (attempt 1)" in r.getMessage()]
    assert "idle:ses-1" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)


def test_moving_a_failed_tick_drops_its_backoff(
    tickers: Callable[..., LocalTicks],
) -> None:
    def fail_first(tick: TickDue, count: int) -> None:
        if count == 1:
            raise RuntimeError("boom")

    ticker, seen = tickers(retry_seconds=60), Recorder(fail_first)
    ticker.start(seen)
    ticker.schedule("idle:ses-1", "idle", soon(0), {"n": 1})
    assert seen.wait_count(1)
    ticker.schedule("idle:ses-1", "idle", soon(0), {"n": 2})
    # Well within the 60 s backoff the old tick would have waited.
    assert seen.wait_count(2)
    assert seen.deliveries[1].tick.payload == {"n": 2}


def test_a_failed_tick_is_retried_at_once_by_a_new_ticker(
    db: SqliteDb, tickers: Callable[..., LocalTicks]
) -> None:
    def always_fail(tick: TickDue, count: int) -> None:
        raise RuntimeError("boom")

    first, failing = tickers(retry_seconds=60), Recorder(always_fail)
    first.start(failing)
    first.schedule("idle:ses-1", "idle", soon(0))
    assert failing.wait_count(1)
    first.stop()
    assert [due.key for due in db.list_due(FAR)] == ["idle:ses-1"]
    second, seen = tickers(retry_seconds=60), Recorder()
    second.start(seen)
    assert seen.wait_count(1)


# ---------------------------------------------------------------------------- lifecycle


def test_starting_a_running_ticker_again_is_refused(
    tickers: Callable[..., LocalTicks],
) -> None:
    ticker = tickers()
    ticker.start(Recorder())
    with pytest.raises(RuntimeError):
        ticker.start(Recorder())


def test_a_stopped_ticker_can_be_started_again(tickers: Callable[..., LocalTicks]) -> None:
    ticker, seen = tickers(), Recorder()
    ticker.start(Recorder())
    ticker.stop()
    ticker.start(seen)
    ticker.schedule("idle:ses-1", "idle", soon(0))
    assert seen.wait_count(1)


def test_stop_waits_for_a_running_handler(tickers: Callable[..., LocalTicks]) -> None:
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()

    def handler(tick: TickDue) -> None:
        entered.set()
        release.wait(WAIT)
        finished.set()

    ticker = tickers()
    ticker.start(handler)
    ticker.schedule("checkpoint:ses-1", "checkpoint", soon(0))
    assert entered.wait(WAIT)
    stopper = threading.Thread(target=ticker.stop)
    stopper.start()
    release.set()
    stopper.join(WAIT)
    assert not stopper.is_alive()
    assert finished.is_set()


@pytest.mark.parametrize(
    "options",
    [{"poll_seconds": 0}, {"retry_seconds": -1}, {"workers": 0},
     {"retry_seconds": 10, "max_retry_seconds": 5}],
)
def test_bad_options_are_refused(db: SqliteDb, options: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        LocalTicks(db, **options)


# ---------------------------------------------------------------------------- open_ticks


def test_open_ticks_picks_the_local_backend_for_a_local_url(
    db: SqliteDb, tmp_path: Path
) -> None:
    settings = Settings.build(data_dir=tmp_path)
    assert isinstance(open_ticks("local:", settings, db), LocalTicks)
    assert isinstance(open_ticks("local://", settings, db), LocalTicks)


def test_open_ticks_with_the_default_settings_opens_a_local_ticker(
    db: SqliteDb, tmp_path: Path
) -> None:
    settings = Settings.build(data_dir=tmp_path)
    assert isinstance(open_ticks(settings.ticks, settings, db), LocalTicks)


def test_open_ticks_refuses_an_unknown_scheme(db: SqliteDb, tmp_path: Path) -> None:
    with pytest.raises(InvalidSettings, match="HANGAR_TICKS") as raised:
        open_ticks("cron://every/minute", Settings.build(data_dir=tmp_path), db)
    assert raised.value.data == {"setting": "HANGAR_TICKS"}


@pytest.mark.parametrize("url", ["local:///some/path", "local:?poll=1", "local://host"])
def test_a_local_url_with_a_path_or_options_is_refused(
    db: SqliteDb, tmp_path: Path, url: str
) -> None:
    with pytest.raises(InvalidSettings, match="HANGAR_TICKS"):
        open_ticks(url, Settings.build(data_dir=tmp_path), db)
