"""Being told (HANGAR_NOTIFY_URL): signed events through ``notify`` ticks, to a real local HTTP
receiver that checks each signature as the docs tell a receiver to."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hangar.config import Settings
from hangar.errors import InvalidSettings, NotifyFailed
from hangar.models import Session, Turn, TurnOutcome, TickDue, utcnow
from hangar.sessions import notify
from hangar.sessions.notify import NotifyEvent, deliver, turn_event, verify
from hangar.sessions.schedule import NotifyTick, Schedule, parse
from tests.unit.sessions.receiver import SECRET, WAIT, Receiver
from tests.unit.sessions.world import FakeTicks


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _settings(tmp_path: Path, url: str | None) -> Settings:
    return Settings.build(data_dir=tmp_path / "data", notify_url=url,
                          notify_secret=SECRET if url else None)  # fmt: skip


def _event(**changes: Any) -> NotifyEvent:
    base: dict[str, Any] = dict(id="ses-1.1.turn_finished", event="turn_finished",
                                session="demo", session_id="ses-1", turn=1, at=utcnow(),
                                summary="done")  # fmt: skip
    return NotifyEvent(**{**base, **changes})


def _ticker(settings: Settings, auto: frozenset[str]) -> tuple[FakeTicks, Schedule]:
    ticks = FakeTicks(auto=auto)
    schedule = Schedule(settings, ticks)

    def handler(due: TickDue) -> None:
        tick = parse(due)
        assert isinstance(tick, NotifyTick)
        notify.handle(settings, schedule, tick)

    ticks.start(handler)
    return ticks, schedule


# signing and one delivery -------------------------------------------------------------------


def test_an_event_is_posted_signed_over_the_timestamp_and_the_body(receiver: Receiver) -> None:
    event = _event(summary="all green")

    assert deliver(receiver.url, SECRET, event) == 200

    [got] = receiver.wait_for(1)
    assert got["signed"]
    mac = hmac.new(SECRET.encode(), got["stamp"].encode() + b"." + got["raw"], hashlib.sha256)
    assert got["signature"] == "sha256=" + mac.hexdigest()  # the scheme the docs give
    assert abs(int(got["stamp"]) - time.time()) < 300
    assert got["body"] == json.loads(event.body())
    assert got["body"]["event"] == "turn_finished" and "approval_id" not in got["body"]


def test_a_receiver_refuses_a_wrong_secret_an_altered_body_or_an_old_timestamp() -> None:
    body = _event().body()
    stamp = int(time.time())
    good = notify.sign(SECRET, stamp, body)

    assert verify(SECRET, str(stamp), good, body)
    assert not verify("another-secret-of-length", str(stamp), good, body)
    assert not verify(SECRET, str(stamp), good, body.replace(b"done", b"DONE"))
    assert not verify(SECRET, str(stamp), good, body, now=stamp + 301)
    assert not verify(SECRET, "not-a-number", good, body)
    assert not verify(SECRET, "²", good, body)  # a digit to isdigit, not to int


def test_an_answer_other_than_2xx_is_a_retryable_notify_failed() -> None:
    receiver = Receiver([503, 302])
    try:
        with pytest.raises(NotifyFailed) as first:
            deliver(receiver.url, SECRET, _event())
        with pytest.raises(NotifyFailed) as second:
            deliver(receiver.url, SECRET, _event())
    finally:
        receiver.close()
    assert first.value.code == "notify_failed" and first.value.data["status"] == 503
    assert second.value.data["status"] == 302  # a redirect is not followed


def test_a_receiver_that_does_not_listen_is_a_notify_failed_at_once() -> None:
    closed = Receiver()
    url = closed.url
    closed.close()

    with pytest.raises(NotifyFailed, match="did not answer"):
        deliver(url, SECRET, _event())


# retries through the ticks ------------------------------------------------------------------


def test_a_receiver_that_fails_twice_gets_the_event_on_the_third_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notify, "BACKOFF_SECONDS", (0.01,) * len(notify.BACKOFF_SECONDS))
    receiver = Receiver([500, 502])
    ticks, schedule = _ticker(_settings(tmp_path, receiver.url), frozenset({"notify"}))
    try:
        schedule.notify(_event())
        got = receiver.wait_for(3)
    finally:
        ticks.stop()
        receiver.close()

    assert [g["status"] for g in got] == [500, 502, 200]
    assert all(g["signed"] for g in got)
    assert {g["body"]["id"] for g in got} == {"ses-1.1.turn_finished"}  # one id to de-dup by
    assert ticks.due == {} and ticks.errors == []  # delivered: nothing left, nothing raised


def test_a_failed_try_moves_the_tick_by_the_backoff_and_the_last_is_dropped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = Receiver([500] * notify.MAX_TRIES)
    ticks, schedule = _ticker(_settings(tmp_path, receiver.url), frozenset())  # by hand
    handler = ticks._handler
    assert handler is not None
    key = "notify:ses-1.1.turn_finished"
    schedule.notify(_event())
    caplog.set_level(logging.INFO, logger="hangar")
    try:
        for attempt in range(notify.MAX_TRIES - 1):
            due = ticks.due[key]
            assert due.payload["attempt"] == attempt
            before = utcnow()
            handler(due)
            moved = ticks.due[key]
            assert moved.payload["attempt"] == attempt + 1
            assert moved.due_at >= before + timedelta(seconds=notify.BACKOFF_SECONDS[attempt])
        handler(ticks.due[key])  # the last try: it stays where it was, to be cleared
        assert ticks.due[key].payload["attempt"] == notify.MAX_TRIES - 1
    finally:
        ticks.stop()
        receiver.close()

    assert len(receiver.got) == notify.MAX_TRIES
    dropped = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(dropped) == 1 and "dropped notify event" in dropped[0].getMessage()
    assert SECRET not in caplog.text


def test_without_a_notify_url_nothing_is_scheduled_and_a_stale_tick_is_dropped(
    tmp_path: Path, receiver: Receiver
) -> None:
    settings = _settings(tmp_path, None)
    ticks, schedule = _ticker(settings, frozenset())
    try:
        schedule.notify(_event())
        demo = Session(name="demo", environment="app", harness="antigravity")
        schedule.approval_pending(demo, 1, "apr-1", "rm -rf x")
        assert ticks.due == {}
        notify.handle(settings, schedule, NotifyTick(event=_event()))  # scheduled before unset
    finally:
        ticks.stop()
    assert receiver.got == [] and ticks.due == {}


# the settings and the secret ----------------------------------------------------------------


def test_a_notify_url_needs_a_secret_and_must_be_http_or_https(tmp_path: Path) -> None:
    with pytest.raises(InvalidSettings, match="HANGAR_NOTIFY_SECRET") as missing:
        Settings.build(data_dir=tmp_path, notify_url="https://hooks.example/h")
    assert missing.value.data["setting"] == "HANGAR_NOTIFY_SECRET"
    for url in ("ftp://hooks.example/h", "hooks.example/h", "https://user:pw@hooks.example/"):
        with pytest.raises(InvalidSettings) as bad:
            Settings.build(data_dir=tmp_path, notify_url=url, notify_secret=SECRET)
        assert bad.value.data["setting"] == "HANGAR_NOTIFY_URL"
    with pytest.raises(InvalidSettings, match="16 characters"):
        Settings.build(data_dir=tmp_path, notify_url="https://hooks.example/h",
                       notify_secret="short")  # fmt: skip


def test_the_secret_is_in_no_repr_dump_or_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"HANGAR_DATA_DIR": str(tmp_path), "HANGAR_NOTIFY_URL": "http://127.0.0.1:9/h",
           "HANGAR_NOTIFY_SECRET": SECRET}  # fmt: skip
    settings = Settings.from_env(env)
    assert settings.notify_secret is not None
    assert settings.notify_secret.get_secret_value() == SECRET
    assert settings.replace(turn_idle_minutes=3).notify_secret == settings.notify_secret
    for shown in (repr(settings), str(settings), settings.model_dump_json(),
                  str(settings.model_dump())):  # fmt: skip
        assert SECRET not in shown
    monkeypatch.setattr(notify, "BACKOFF_SECONDS", (0.01,) * len(notify.BACKOFF_SECONDS))
    caplog.set_level(logging.DEBUG)
    ticks, schedule = _ticker(settings, frozenset({"notify"}))
    try:
        schedule.notify(_event())
        deadline = time.monotonic() + WAIT
        while ticks.due:  # every try fails (nothing listens on port 9): until it is dropped
            assert time.monotonic() < deadline, ticks.due
            time.sleep(0.01)
    finally:
        ticks.stop()
    assert "dropped notify event" in caplog.text
    assert SECRET not in caplog.text


# events from turns --------------------------------------------------------------------------


def test_a_turns_outcome_picks_its_event_and_a_short_redacted_summary() -> None:
    session = Session(name="demo", environment="app", harness="antigravity")
    ended = dict(session_id=session.id, n=2, message="m", finished_at=utcnow())

    asking = turn_event(session, Turn(**ended, outcome=TurnOutcome.NEEDS_INPUT,
                                      question="Which db? key sk-ant-abcdefghijklmnop"))
    failed = turn_event(session, Turn(**ended, outcome=TurnOutcome.TIMED_OUT, summary="late"))
    done = turn_event(session, Turn(**ended, outcome=TurnOutcome.EXITED, summary="x" * 1000))

    assert (asking.event, failed.event, done.event) == ("needs_input", "turn_failed",
                                                        "turn_finished")  # fmt: skip
    assert asking.summary == "Which db? key [redacted]"
    assert done.summary is not None and len(done.summary) == notify.SUMMARY_CHARS
    assert asking.id == turn_event(session, Turn(**ended, outcome=TurnOutcome.NEEDS_INPUT)).id
    assert (done.session, done.session_id, done.turn) == ("demo", session.id, 2)
