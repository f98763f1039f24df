"""The Cloud Tasks ticks backend against gcloud-tasks-emulator: the ticks conformance suite, with a
small HTTP receiver on 127.0.0.1 standing in for the ticks function, plus what only this backend
promises (the queue URL, the task on the wire, the receiver's answers to forged, duplicated, late
and malformed deliveries, the follow-up URL, name dedupe, and the sweep that heals lost tasks).

Each test has its own queue on one emulator per session and its own SQLite db."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from google.cloud import tasks_v2
from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

from emulators.cloud import CloudEmulators
from emulators.tasks import TasksEmulator
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import InvalidSettings
from hangar.models import TickDue
from hangar.testing.ticks import FAR, WAIT, Recorder, TicksConformance, eventually, soon
from hangar.ticks import TickHandler, Ticks, open_ticks
from hangar.ticks.cloudtasks import CloudTasksTicks, Receipt

_ROOT = Path(__file__).resolve().parents[2]
_PARENT = "projects/hangar-test/locations/us-central1"
_MODULE_LOGGER = "hangar.ticks.cloudtasks"


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def tasks_emulator(cloud_emulators: CloudEmulators) -> TasksEmulator:
    """The run's Cloud Tasks emulator (tests/conftest.py); each test has queues of its own."""
    return cloud_emulators.tasks


class Receiver:
    """The ticks endpoint of a test: every POST body goes to ``route``, and the receipt is the
    answer (status, and the outcome word as the body)."""

    def __init__(self) -> None:
        self.route: Callable[[bytes], Receipt] = lambda body: Receipt(503, "stopped")
        self._changed = threading.Condition()
        self._receipts: list[Receipt] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receipt = receiver.route(body)
                with receiver._changed:
                    receiver._receipts.append(receipt)
                    receiver._changed.notify_all()
                answer = f"{receipt.outcome}\n".encode()
                self.send_response(receipt.status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}/ticks"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def receipts(self) -> list[Receipt]:
        with self._changed:
            return list(self._receipts)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


@pytest.fixture
def queue(tasks_emulator: TasksEmulator) -> Iterator[str]:
    name = f"{_PARENT}/queues/t-{uuid.uuid4().hex[:16]}"
    tasks_emulator.create_queue(name)
    yield name
    tasks_emulator.delete_queue(name)  # its pending deliveries stop with it


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SqliteDb]:
    opened = SqliteDb(tmp_path / "hangar.db")
    yield opened
    opened.close()


@pytest.fixture
def make(
    db: SqliteDb, queue: str, receiver: Receiver, tasks_emulator: TasksEmulator
) -> Iterator[Callable[..., CloudTasksTicks]]:
    """Make tickers on ``db`` and the test's queue, posting to the receiver (short times unless
    told), stopped after the test. The receiver hands each delivery to the newest ticker that
    does not refuse it with 503, as a load balancer over several processes would."""
    made: list[CloudTasksTicks] = []

    def make(**options: Any) -> CloudTasksTicks:
        settings: dict[str, Any] = {
            "endpoint": tasks_emulator.host,
            "target_url": receiver.url,
            "poll_seconds": 0.05,
            "grace_seconds": 1.0,
            **options,
        }
        ticker = CloudTasksTicks(db, queue, **settings)
        made.append(ticker)
        return ticker

    def route(body: bytes) -> Receipt:
        receipt = Receipt(503, "stopped")
        for ticker in reversed(list(made)):
            receipt = ticker.receive(body)
            if receipt.status != 503:
                break
        return receipt

    receiver.route = route
    yield make
    for ticker in made:
        ticker.stop()


class TestCloudTasksTicks(TicksConformance):
    @pytest.fixture
    def ticks_factory(self, make: Callable[..., CloudTasksTicks]) -> Callable[[], Ticks]:
        return make


# ---------------------------------------------------------------------------- helpers


def _client(host: str) -> tasks_v2.CloudTasksClient:
    import grpc

    return tasks_v2.CloudTasksClient(
        transport=CloudTasksGrpcTransport(channel=grpc.insecure_channel(host))
    )


def _tasks_in(host: str, queue: str) -> list[tasks_v2.Task]:
    client = _client(host)
    try:
        return list(client.list_tasks(parent=queue))
    finally:
        client.transport.close()


def _body(key: str, version: int, due_at: datetime, url: str) -> bytes:
    """A task body as the wire shape says (written by hand, not by the backend's model)."""
    return json.dumps(
        {"key": key, "version": version, "due_at": due_at.isoformat(), "url": url}
    ).encode()


def _free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _forward_to(ticker: CloudTasksTicks, handler: TickHandler) -> Callable[[bytes], Receipt]:
    """A route for a ticker that was never started, as in the ticks function."""
    return lambda body: ticker.receive(body, handler)


# ---------------------------------------------------------------------------- the queue URL


def test_open_ticks_builds_a_cloudtasks_ticker_without_contacting_or_importing_anything(
    tmp_path: Path,
) -> None:
    script = f"""
import sys
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.ticks import open_ticks
from hangar.ticks.cloudtasks import CloudTasksTicks
db = SqliteDb({str(tmp_path / "hangar.db")!r})
for endpoint in ("127.0.0.1:{_free_port()}", None):
    settings = Settings.build(data_dir={str(tmp_path)!r}, tasks_endpoint=endpoint,
                              ticks_url="https://ticks.example/ticks")
    ticks = open_ticks("cloudtasks://{_PARENT}/queues/q", settings, db)
    assert isinstance(ticks, CloudTasksTicks), ticks
loaded = sorted(m for m in sys.modules if m.startswith(("google.cloud.tasks", "grpc")))
assert not loaded, loaded
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=_ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "url",
    [
        "cloudtasks://",
        "cloudtasks:projects/p/locations/l/queues/q",
        "cloudtasks://projects/p/locations/l",
        "cloudtasks://projects/p/locations/l/queues/",
        "cloudtasks://projects/p/locations/l/queues/q/tasks/t",
        "cloudtasks://projects/p/locations/l/queues/q_underscore",
        "cloudtasks://projects/p/locations/l/queues/q?retry=1",
        "cloudtasks://queues/q",
    ],
)
def test_a_queue_url_that_names_no_queue_is_refused_naming_hangar_ticks(
    url: str, tmp_path: Path, db: SqliteDb
) -> None:
    settings = Settings.build(data_dir=tmp_path, ticks_url="https://ticks.example/")
    with pytest.raises(InvalidSettings) as caught:
        open_ticks(url, settings, db)
    assert caught.value.data["setting"] == "HANGAR_TICKS"


@pytest.mark.parametrize("ticks_url", ["ftp://ticks.example/", "ticks.example/ticks", "http://"])
def test_a_ticks_url_that_is_not_http_is_refused_naming_hangar_ticks_url(
    ticks_url: str, tmp_path: Path, db: SqliteDb
) -> None:
    settings = Settings.build(data_dir=tmp_path, ticks_url=ticks_url)
    with pytest.raises(InvalidSettings) as caught:
        open_ticks(f"cloudtasks://{_PARENT}/queues/q", settings, db)
    assert caught.value.data["setting"] == "HANGAR_TICKS_URL"


def test_scheduling_without_a_ticks_url_outside_a_delivery_is_refused_and_stores_nothing(
    make: Callable[..., CloudTasksTicks], db: SqliteDb
) -> None:
    ticker = make(target_url=None)
    with pytest.raises(InvalidSettings) as caught:
        ticker.schedule("idle:ses-1", "idle", soon(60))
    assert caught.value.data["setting"] == "HANGAR_TICKS_URL"
    assert db.list_due(FAR) == []
    with pytest.raises(InvalidSettings):
        ticker.start(Recorder())


# ---------------------------------------------------------------------------- on the wire


def test_a_task_posts_the_due_time_as_json_at_its_due_time_with_an_oidc_token(
    make: Callable[..., CloudTasksTicks], tasks_emulator: TasksEmulator, queue: str,
    receiver: Receiver,
) -> None:  # fmt: skip
    ticker = make(invoker="ticks@hangar-test.iam.gserviceaccount.com")
    due = soon(3600)
    ticker.schedule("idle:ses-1/odd key", "idle", due, {"session": "ses-1"})
    [task] = _tasks_in(tasks_emulator.host, queue)
    assert task.name.startswith(f"{queue}/tasks/")
    assert task.name.rsplit("/", 1)[1].endswith("-idle_ses-1_odd_key")
    assert task.schedule_time == due
    request = task.http_request
    assert (request.url, request.http_method) == (receiver.url, tasks_v2.HttpMethod.POST)
    assert dict(request.headers) == {"Content-Type": "application/json"}
    assert json.loads(request.body) == {
        "key": "idle:ses-1/odd key",
        "version": 1,
        "due_at": due.isoformat().replace("+00:00", "Z"),
        "url": receiver.url,
    }
    token = request.oidc_token
    assert (token.service_account_email, token.audience) == (
        "ticks@hangar-test.iam.gserviceaccount.com",
        receiver.url,
    )


def test_a_due_time_more_than_29_days_ahead_gets_a_task_at_29_days_carrying_the_real_time(
    make: Callable[..., CloudTasksTicks], tasks_emulator: TasksEmulator, queue: str
) -> None:
    ticker = make()
    due = soon(40 * 86400)
    ticker.schedule("idle:ses-1", "idle", due)
    [task] = _tasks_in(tasks_emulator.host, queue)
    assert soon(29 * 86400 - 60) < task.schedule_time <= soon(29 * 86400)
    assert datetime.fromisoformat(json.loads(task.http_request.body)["due_at"]) == due


# ---------------------------------------------------------------------------- what the receiver answers


def test_a_body_for_an_unknown_key_is_answered_gone_without_a_handler_call(
    make: Callable[..., CloudTasksTicks],
) -> None:
    ticker, seen = make(), Recorder()
    receipt = ticker.receive(_body("idle:nobody", 1, soon(-1), "https://x.example/"), seen)
    assert (receipt.status, receipt.outcome, receipt.key) == (200, "gone", "idle:nobody")
    assert seen.deliveries == []


def test_a_body_for_a_due_time_since_moved_is_answered_moved_and_changes_nothing(
    make: Callable[..., CloudTasksTicks], db: SqliteDb
) -> None:
    ticker, seen = make(), Recorder()
    db.set_due(TickDue(key="idle:ses-1", kind="idle", due_at=soon(-5)))
    stored = db.set_due(TickDue(key="idle:ses-1", kind="idle", due_at=soon(-2)))  # version 2
    url = "https://x.example/"
    stale_version = _body("idle:ses-1", 1, stored.due_at, url)
    other_time = _body("idle:ses-1", 2, stored.due_at - timedelta(seconds=1), url)
    future_time = _body("idle:ses-1", 2, soon(3600), url)
    for body in (stale_version, other_time, future_time):
        assert ticker.receive(body, seen) == Receipt(200, "moved", "idle:ses-1")
    assert seen.deliveries == []
    assert db.list_due(FAR) == [stored]


def test_a_delivery_repeated_after_it_was_handled_is_answered_gone(
    make: Callable[..., CloudTasksTicks], db: SqliteDb
) -> None:
    ticker, seen = make(), Recorder()
    stored = db.set_due(TickDue(key="idle:ses-1", kind="idle", due_at=soon(-1)))
    body = _body("idle:ses-1", stored.version, stored.due_at, "https://x.example/")
    assert ticker.receive(body, seen) == Receipt(200, "handled", "idle:ses-1")
    assert ticker.receive(body, seen) == Receipt(200, "gone", "idle:ses-1")
    assert [d.tick for d in seen.deliveries] == [stored]
    assert db.list_due(FAR) == []


def test_the_stored_due_time_arriving_early_gets_a_fresh_task_and_no_handler_call(
    make: Callable[..., CloudTasksTicks], db: SqliteDb, tasks_emulator: TasksEmulator,
    queue: str,
) -> None:  # fmt: skip
    ticker, seen = make(), Recorder()
    due = soon(3600)
    ticker.schedule("idle:ses-1", "idle", due)
    [stored] = db.list_due(FAR)
    receipt = ticker.receive(_body("idle:ses-1", 1, due, "https://x.example/"), seen)
    assert receipt == Receipt(200, "early", "idle:ses-1")
    assert seen.deliveries == []
    assert db.list_due(FAR) == [stored]
    tasks = _tasks_in(tasks_emulator.host, queue)
    assert len(tasks) == 2
    assert {t.schedule_time for t in tasks} == {due}


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'{"version": 1, "due_at": "2024-01-01T00:00:00Z", "url": "https://x.example/"}',
        b'{"key": "", "version": 1, "due_at": "2024-01-01T00:00:00Z", "url": "https://x.example/"}',
        b'{"key": "k", "version": "one", "due_at": "2024-01-01T00:00:00Z", "url": "https://x/"}',
        b'{"key": "k", "version": 1, "due_at": "yesterday", "url": "https://x.example/"}',
        b'{"key": "k", "version": 1, "due_at": "2024-01-01T00:00:00Z", "url": "file:///etc"}',
        b'{"key": "k", "version": 1, "due_at": "2024-01-01T00:00:00Z"}',
    ],
)
def test_a_malformed_body_is_answered_400_without_a_handler_call(
    body: bytes, make: Callable[..., CloudTasksTicks], db: SqliteDb
) -> None:
    ticker, seen = make(), Recorder()
    db.set_due(TickDue(key="k", kind="idle", due_at=datetime(2024, 1, 1, tzinfo=UTC)))
    assert ticker.receive(body, seen) == Receipt(400, "bad_request")
    assert seen.deliveries == []
    assert [t.key for t in db.list_due(FAR)] == ["k"]


def test_a_handler_that_raises_is_answered_500_logged_and_the_due_time_kept(
    make: Callable[..., CloudTasksTicks], db: SqliteDb, caplog: pytest.LogCaptureFixture
) -> None:
    def fail(tick: TickDue, count: int) -> None:
        raise RuntimeError("the handler fails")

    ticker, seen = make(), Recorder(fail)
    stored = db.set_due(TickDue(key="idle:ses-1", kind="idle", due_at=soon(-1)))
    body = _body("idle:ses-1", stored.version, stored.due_at, "https://x.example/")
    with caplog.at_level(logging.ERROR, logger=_MODULE_LOGGER):
        assert ticker.receive(body, seen) == Receipt(500, "failed", "idle:ses-1")
    assert db.list_due(FAR) == [stored]
    [record] = [r for r in caplog.records if r.name == _MODULE_LOGGER]
    assert record.exc_info is not None and "the handler fails" in str(record.exc_info[1])


def test_a_ticker_stopped_or_without_a_handler_refuses_deliveries_with_503(
    make: Callable[..., CloudTasksTicks], db: SqliteDb
) -> None:
    stored = db.set_due(TickDue(key="idle:ses-1", kind="idle", due_at=soon(-1)))
    body = _body("idle:ses-1", stored.version, stored.due_at, "https://x.example/")
    never_started, stopped, seen = make(), make(), Recorder()
    assert never_started.receive(body) == Receipt(503, "stopped")
    stopped.start(seen)
    stopped.stop()
    assert stopped.receive(body) == Receipt(503, "stopped")
    assert stopped.receive(body, seen) == Receipt(503, "stopped")
    assert seen.deliveries == []
    assert db.list_due(FAR) == [stored]


def test_a_delivery_for_a_key_whose_handler_is_running_is_answered_busy(
    make: Callable[..., CloudTasksTicks], db: SqliteDb
) -> None:
    entered, release = threading.Event(), threading.Event()

    def block(tick: TickDue, count: int) -> None:
        entered.set()
        assert release.wait(WAIT)

    ticker, seen = make(), Recorder(block)
    stored = db.set_due(TickDue(key="idle:ses-1", kind="idle", due_at=soon(-1)))
    body = _body("idle:ses-1", stored.version, stored.due_at, "https://x.example/")
    first: list[Receipt] = []
    running = threading.Thread(target=lambda: first.append(ticker.receive(body, seen)))
    running.start()
    assert entered.wait(WAIT)
    assert ticker.receive(body, seen) == Receipt(503, "busy", "idle:ses-1")
    release.set()
    running.join(WAIT)
    assert first == [Receipt(200, "handled", "idle:ses-1")]
    assert len(seen.deliveries) == 1


# ---------------------------------------------------------------------------- the follow-up URL


def test_ticks_a_handler_schedules_during_a_delivery_go_to_the_url_that_delivery_came_with(
    make: Callable[..., CloudTasksTicks], db: SqliteDb, receiver: Receiver
) -> None:
    ticker = make(target_url=None)  # the ticks function: no URL of its own

    def follow_up(tick: TickDue, count: int) -> None:
        if tick.key == "watch:ses-1":
            ticker.schedule("watch:ses-1:next", "watch", soon(0.05), {"n": 2})

    seen = Recorder(follow_up)
    receiver.route = _forward_to(ticker, seen)
    stored = db.set_due(TickDue(key="watch:ses-1", kind="watch", due_at=soon(-1)))
    body = _body("watch:ses-1", stored.version, stored.due_at, receiver.url)
    assert ticker.receive(body, seen) == Receipt(200, "handled", "watch:ses-1")
    assert seen.wait_for(lambda ds: [d.tick.key for d in ds][-1:] == ["watch:ses-1:next"])
    assert eventually(lambda: db.list_due(FAR) == [])
    with pytest.raises(InvalidSettings):
        ticker.schedule("idle:ses-1", "idle", soon(60))  # outside a delivery: no URL


# ---------------------------------------------------------------------------- names and the sweep


def test_two_tickers_sweeping_one_overdue_due_time_make_one_task_and_already_exists_is_fine(
    make: Callable[..., CloudTasksTicks], db: SqliteDb, receiver: Receiver,
    tasks_emulator: TasksEmulator, queue: str, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    first, second, seen = make(grace_seconds=0.2), make(grace_seconds=0.2), Recorder()
    receiver.route = _forward_to(first, seen)
    db.set_due(TickDue(key="idle:ses-1", kind="idle", due_at=soon(-1)))
    with caplog.at_level(logging.WARNING, logger=_MODULE_LOGGER):
        swept = first.sweep(), second.sweep()
    assert swept == (1, 0)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert seen.wait_count(1)
    assert eventually(lambda: db.list_due(FAR) == [])
    assert eventually(lambda: _tasks_in(tasks_emulator.host, queue) == [])
    assert len(seen.deliveries) == 1


def test_a_due_time_whose_task_creation_failed_is_delivered_by_a_running_tickers_sweep(
    make: Callable[..., CloudTasksTicks], db: SqliteDb, caplog: pytest.LogCaptureFixture
) -> None:
    down = make(endpoint=f"127.0.0.1:{_free_port()}", rpc_timeout=0.3)
    due = soon(-0.1)
    with caplog.at_level(logging.WARNING, logger=_MODULE_LOGGER):
        down.schedule("idle:ses-1", "idle", due, {"n": 1})  # logs, does not raise
    assert any("could not create" in r.getMessage() for r in caplog.records)
    [stored] = db.list_due(FAR)
    running, seen = make(grace_seconds=0.2), Recorder()
    running.start(seen)
    assert seen.wait_count(1)
    assert seen.deliveries[0].tick == stored
    assert eventually(lambda: db.list_due(FAR) == [])


def test_a_lost_task_is_delivered_by_the_sweep_after_another_delivery_where_no_ticker_runs(
    make: Callable[..., CloudTasksTicks], db: SqliteDb, receiver: Receiver
) -> None:
    ticker, seen = make(target_url=None, grace_seconds=0.2), Recorder()
    receiver.route = _forward_to(ticker, seen)
    lost = db.set_due(TickDue(key="idle:ses-lost", kind="idle", due_at=soon(-1)))  # no task
    other = db.set_due(TickDue(key="reap", kind="reap", due_at=soon(-0.1)))
    body = _body("reap", other.version, other.due_at, receiver.url)
    assert ticker.receive(body, seen) == Receipt(200, "handled", "reap")
    assert seen.wait_for(lambda ds: "idle:ses-lost" in [d.tick.key for d in ds])
    assert [d.tick for d in seen.deliveries] == [other, lost]
    assert eventually(lambda: db.list_due(FAR) == [])
