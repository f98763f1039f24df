"""The Cloud Tasks backend of the ticks port: ``cloudtasks://projects/P/locations/L/queues/Q``.

The db is the truth; a task is only a wake-up call. ``schedule`` stores the due-time
(``db.set_due``), then creates an HTTP task that POSTs ``{"key", "version", "due_at", "url"}``
(JSON, :class:`TickTask`) to the target URL at ``schedule_time = due_at``, with an OIDC token for
``HANGAR_TASKS_INVOKER`` (audience: the target URL) when that is set. The receiver (the ticks
function, or ``POST /ticks`` of ``hangar serve``) hands the body to :meth:`CloudTasksTicks.receive`.

**Target URL.** ``HANGAR_TICKS_URL``; when it is unset, the URL the tick being delivered came
with, so ticks a handler schedules during a delivery go where that one came from (the ticks
function is not told its own URL: Terraform cannot pass a function its own address). With
neither, ``schedule`` raises InvalidSettings naming ``HANGAR_TICKS_URL`` and stores nothing.

**Contract** (the port's, see :mod:`hangar.ticks`): delivery is at-least-once and never early.
``receive`` re-reads the due-time and answers (outcome, HTTP status):

- ``handled`` 200: the body names the stored due-time, it is due, and the handler returned; the
  due-time is then cleared unless it was moved meanwhile.
- ``gone`` 200: no due-time under the key (cancelled, or delivered already).
- ``moved`` 200: another due-time is stored under the key (moved, or set again; its own task
  delivers it). So a forged, duplicated or late body costs a state check and changes nothing.
- ``early`` 200: the stored due-time, not due yet (its task was capped at 29 days ahead, or
  clocks differ): a fresh task is made for it, at most one a second; 503 if none could be made.
- ``busy`` 503: this process is running the handler for this key; come back later.
- ``stopped`` 503: the ticker was stopped, or has no handler (never started, none passed).
- ``failed`` 500: the handler raised (logged), or the db failed; the due-time is kept.
- ``bad_request`` 400: the body is not a tick task; no handler call.

Any non-2xx makes Cloud Tasks retry the task (the queue's retry config sets the backoff and the
attempts). One process never runs two handlers for one key at once; several processes may (the
handlers are idempotent).

**Names.** A task is named from its key, version and due-time plus a label: a random one per
``schedule`` call (a retry of that create, after a lost answer, dedupes; a due-time set again
after a clear, which restarts versions at 1, never meets the tombstone of an older task),
``sweep-N`` for the sweep, ``early-SECOND`` for an early arrival. ALREADY_EXISTS counts as
success.

**Lost tasks heal.** If task creation fails (service down, bad credentials), ``schedule`` logs a
warning and returns: the due-time is stored. The sweep gives every due-time overdue by more than
``grace_seconds`` a fresh task named ``sweep-N``, N = floor(log2(lateness / grace)): so each
overdue due-time gets at most one sweep task per doubling of its lateness, whichever processes
sweep (the service dedupes the names), and a tick whose handler keeps failing is not flooded.
The sweep runs after deliveries (at most once per ``poll_seconds``) and, once started (``hangar
serve``), in a thread every ``poll_seconds``, the first time at once: ticks that came due while
nothing ran are delivered after a restart.

**Cancel** clears the due-time only; the old task, when it fires, finds nothing (``gone``). Task
deletion is never needed (the emulator answers UNIMPLEMENTED to it).

**The emulator** (gcloud-tasks-emulator 0.6.2, see ``emulators/tasks``) retries every non-2xx
answer, and a refused connection, about 0.1 s later, forever, without backoff; it works each
queue in one thread, one synchronous POST at a time; it ignores queue retry settings and OIDC
tokens. So there a failing handler is retried about ten times a second; in production the
queue's retry config sets the pace.

The client is built on first use, with the google libraries imported only then. With
``HANGAR_TASKS_ENDPOINT`` it talks gRPC without TLS to that endpoint (the emulator); otherwise
it uses the default credentials against the real service. google.api_core, google.auth and grpc
exceptions never escape this module.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import secrets
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hangar.config import Settings
from hangar.db import Db
from hangar.db.records import utc
from hangar.errors import HangarError, InvalidInput, InvalidSettings
from hangar.models import TickDue
from hangar.gcloud import vendor_errors
from hangar.ticks import Receipt, TickHandler, TickReceiver

if TYPE_CHECKING:
    from google.cloud.tasks_v2 import CloudTasksClient, Task

logger = logging.getLogger(__name__)

_SETTING = "HANGAR_TICKS"
_URL_SETTING = "HANGAR_TICKS_URL"
_SCHEME = "cloudtasks://"
_QUEUE = re.compile(
    r"projects/[A-Za-z0-9.:_-]+/locations/[A-Za-z0-9_-]+/queues/[A-Za-z0-9-]{1,100}"
)
_MAX_AHEAD = timedelta(days=29)
"""The service refuses a ``schedule_time`` more than 30 days ahead: later ticks are delivered
early in steps, each answered ``early`` with a fresh task."""
_NOT_ID = re.compile(r"[^A-Za-z0-9_-]+")

Outcome = Literal[
    "handled", "gone", "moved", "early", "busy", "stopped", "failed", "bad_request"
]
_Created = Literal["created", "exists", "failed"]


def _is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


class TickTask(BaseModel):
    """The body of every task: which due-time it wakes, and the URL it was sent to (where
    follow-up ticks go when ``HANGAR_TICKS_URL`` is unset). Unknown fields are ignored, so tasks
    made by a newer release are still read."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    key: str = Field(min_length=1)
    version: int = Field(ge=1)
    due_at: datetime
    url: str

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not _is_http_url(url):
            raise ValueError("url must be an http or https URL")
        return url


def _task_id(tick: TickDue, label: str) -> str:
    """A task id (letters, digits, ``-``, ``_``; at most 500) for this due-time and label: a hash
    first (the service wants spread-out names), then the key, readable."""
    source = f"{tick.key}\0{tick.version}\0{utc(tick.due_at).isoformat()}\0{label}"
    digest = hashlib.sha256(source.encode()).hexdigest()[:32]
    readable = _NOT_ID.sub("_", tick.key)[:64]
    return f"{digest}-{readable}"


def tasks_client(endpoint: str | None) -> CloudTasksClient:
    """A Cloud Tasks client: the real service, or with ``endpoint`` (``HOST:PORT``, the
    emulator) plain gRPC without credentials (a given channel carries none)."""
    from google.cloud import tasks_v2

    if endpoint:
        import grpc  # type: ignore[import-untyped,unused-ignore]
        from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

        channel = grpc.insecure_channel(endpoint)
        return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))
    return tasks_v2.CloudTasksClient()


class CloudTasksTicks:
    """The ticks port over Cloud Tasks. Thread-safe. See the module docstring."""

    def __init__(
        self,
        db: Db,
        queue: str,
        *,
        endpoint: str | None = None,
        target_url: str | None = None,
        invoker: str | None = None,
        poll_seconds: float = 5.0,
        grace_seconds: float = 30.0,
        rpc_timeout: float = 10.0,
        sweep_limit: int = 100,
    ) -> None:
        """``queue`` is the full queue name; ``endpoint`` ``HOST:PORT`` of an emulator (None: the
        real service); ``target_url`` where tasks POST (None: the URL of the delivery in
        progress); ``invoker`` the service account whose OIDC token the tasks carry.
        ``poll_seconds`` paces the sweep, ``grace_seconds`` is how overdue a due-time must be
        before the sweep enqueues it again, ``rpc_timeout`` bounds a task creation (retries of
        an unavailable service included), ``sweep_limit`` caps the due-times one sweep reads.
        Contacts nothing."""
        if not _QUEUE.fullmatch(queue):
            raise InvalidSettings(
                f"{_SETTING}: expected a queue projects/P/locations/L/queues/Q, got {queue!r}",
                setting=_SETTING,
            )
        if target_url is not None and not _is_http_url(target_url):
            raise InvalidSettings(
                f"{_URL_SETTING}: expected an http(s) URL, got {target_url!r}",
                setting=_URL_SETTING,
            )
        if min(poll_seconds, grace_seconds, rpc_timeout) <= 0 or sweep_limit < 1:
            raise InvalidInput(
                "ticks: poll_seconds, grace_seconds and rpc_timeout must be positive and "
                "sweep_limit at least 1"
            )
        self.queue = queue
        self._db = db
        self._endpoint = endpoint
        self._target_url = target_url
        self._invoker = invoker
        self._poll_seconds = poll_seconds
        self._grace = timedelta(seconds=grace_seconds)
        self._rpc_timeout = rpc_timeout
        self._sweep_limit = sweep_limit
        self._delivery = threading.local()  # .url: the URL of the delivery this thread runs
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._sweep_lock = threading.Lock()
        # Guarded by _lock:
        self._client: CloudTasksClient | None = None
        self._handler: TickHandler | None = None
        self._stopped = False
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()
        self._running: set[str] = set()
        self._active = 0
        # Guarded by _sweep_lock:
        self._swept: set[str] = set()
        self._last_sweep = -math.inf

    @classmethod
    def from_url(cls, url: str, settings: Settings, db: Db) -> CloudTasksTicks:
        """``cloudtasks://projects/P/locations/L/queues/Q``; the endpoint, target URL and
        invoker come from the settings. InvalidSettings naming the variable when one is wrong."""
        name = url[len(_SCHEME) :] if url.startswith(_SCHEME) else ""
        if not _QUEUE.fullmatch(name):
            raise InvalidSettings(
                f"{_SETTING}: expected cloudtasks://projects/P/locations/L/queues/Q, "
                f"got {url!r}",
                setting=_SETTING,
            )
        return cls(
            db,
            name,
            endpoint=settings.tasks_endpoint,
            target_url=settings.ticks_url,
            invoker=settings.tasks_invoker,
        )

    # ------------------------------------------------------------------------ the port

    def schedule(
        self, key: str, kind: str, due_at: datetime, payload: dict[str, Any] | None = None
    ) -> None:
        """Store the due-time, then create its task. A failed creation is logged and left to
        the sweep. InvalidSettings (nothing stored) when there is no target URL."""
        url = self._url()
        stored = self._db.set_due(
            TickDue(key=key, kind=kind, due_at=utc(due_at), payload=payload or {})
        )
        self._enqueue(stored, url, secrets.token_hex(8))

    def cancel(self, key: str) -> None:
        self._db.clear_due(key)

    def start(self, handler: TickHandler) -> None:
        """Deliver to ``handler`` (when ``receive`` is given none) and sweep every
        ``poll_seconds`` in a thread, the first time at once. InvalidSettings without
        ``HANGAR_TICKS_URL`` (the sweep would not know where to post); RuntimeError if running.
        A stopped ticker may be started again."""
        if self._target_url is None:
            raise InvalidSettings(
                f"{_URL_SETTING} must be set for a long-running Cloud Tasks ticker "
                "(where the ticks are posted)",
                setting=_URL_SETTING,
            )
        with self._lock:
            if self._sweeper is not None:
                raise RuntimeError("this ticker is already running")
            self._handler, self._stopped = handler, False
            self._sweeper_stop = threading.Event()
            self._sweeper = threading.Thread(
                target=self._sweeping, args=(self._sweeper_stop,), name="hangar-ticks-sweep",
                daemon=True,
            )  # fmt: skip
            self._sweeper.start()

    def stop(self) -> None:
        """Refuse deliveries from now on (503), stop the sweep, wait for running handlers and
        the clearing after them. Idempotent; ``start`` undoes it."""
        with self._lock:
            self._stopped, self._handler = True, None
            sweeper, self._sweeper = self._sweeper, None
            self._sweeper_stop.set()
        if sweeper is not None:
            sweeper.join()
        with self._idle:
            self._idle.wait_for(lambda: self._active == 0)

    # ------------------------------------------------------------------------ delivery

    @property
    def receiver(self) -> TickReceiver:
        """Cloud Tasks posts the ticks: this backend is their receiver too."""
        return self

    def receive(self, body: bytes, handler: TickHandler | None = None) -> Receipt:
        """Deliver the task whose body this is to ``handler`` (default: the one ``start`` got)
        if the due-time it names is still stored and due; answer what to tell Cloud Tasks.
        Never raises for a bad or stale body (see the table in the module docstring). Blocks
        while the handler runs; call it from a worker thread."""
        with self._lock:
            chosen = handler if handler is not None else self._handler
            if self._stopped or chosen is None:
                return Receipt(503, "stopped")
            self._active += 1
        try:
            return self._receive(body, chosen)
        finally:
            with self._idle:
                self._active -= 1
                self._idle.notify_all()

    def _receive(self, body: bytes, handler: TickHandler) -> Receipt:
        try:
            task = TickTask.model_validate_json(body)
        except ValidationError as exc:
            logger.warning("ticks: refused a delivery that is not a tick task: %s",
                           exc.errors(include_url=False)[:3])  # fmt: skip
            return Receipt(400, "bad_request")
        key = task.key
        try:
            stored = self._db.get_due(key)
        except HangarError:
            logger.exception("ticks: could not read the due-time of %r", key)
            return Receipt(500, "failed", key)
        url = self._target_url or task.url
        now = datetime.now(UTC)
        if stored is None:
            receipt = Receipt(200, "gone", key)
        elif (stored.version, utc(stored.due_at)) != (task.version, utc(task.due_at)):
            receipt = Receipt(200, "moved", key)
        elif utc(stored.due_at) > now:
            # One fresh task a second at most, so repeated early bodies cannot pile tasks up;
            # when that name is taken, 503 brings this one back later instead.
            created = self._enqueue(stored, url, f"early-{int(now.timestamp())}")
            receipt = Receipt(200 if created == "created" else 503, "early", key)
        else:
            with self._lock:
                if key in self._running:
                    return Receipt(503, "busy", key)
                self._running.add(key)
            try:
                receipt = self._run(handler, stored, url)
            finally:
                with self._lock:
                    self._running.discard(key)
        self._sweep_now_and_then(url)
        return receipt

    def _run(self, handler: TickHandler, tick: TickDue, url: str) -> Receipt:
        """Call the handler with the stored tick (follow-ups it schedules may go to ``url``),
        then clear the tick unless it was moved meanwhile."""
        self._delivery.url = url
        try:
            handler(tick)
        except Exception:  # a handler's top level: log it; Cloud Tasks delivers it again
            logger.exception("ticks: handler for %s tick %r failed; it stays due",
                             tick.kind, tick.key)  # fmt: skip
            return Receipt(500, "failed", tick.key)
        finally:
            self._delivery.url = None
        try:
            self._db.clear_due(tick.key, version=tick.version, due_at=tick.due_at)
        except HangarError:
            logger.exception("ticks: could not clear tick %r after its handler", tick.key)
            return Receipt(500, "failed", tick.key)
        return Receipt(200, "handled", tick.key)

    # ------------------------------------------------------------------------ the sweep

    def sweep(self, url: str | None = None) -> int:
        """Create a fresh task for every due-time overdue by more than the grace (at most
        ``sweep_limit``, earliest first), posting to the target URL or else ``url``; returns
        how many tasks were created (ones that existed already do not count). Failed creations
        are logged; a db failure raises its HangarError; InvalidSettings without a URL."""
        target = self._target_url or url
        if target is None:
            raise InvalidSettings(
                f"{_URL_SETTING} is not set: the sweep does not know where to post ticks",
                setting=_URL_SETTING,
            )
        with self._sweep_lock:
            return self._sweep(target)

    def _sweep(self, url: str) -> int:
        now = datetime.now(UTC)
        self._last_sweep = time.monotonic()
        overdue = self._db.list_due(now - self._grace, self._sweep_limit)
        with self._lock:
            running = frozenset(self._running)
        created, seen = 0, set()
        for tick in overdue:
            if tick.key in running:
                continue  # its handler is running here; its outcome settles it
            lateness = (now - utc(tick.due_at)) / self._grace
            label = f"sweep-{int(math.log2(max(lateness, 1.0)))}"
            name = _task_id(tick, label)
            seen.add(name)
            if name in self._swept:
                continue
            result = self._enqueue(tick, url, label)
            if result != "failed":
                self._swept.add(name)
            created += result == "created"
        self._swept &= seen  # remember only what is still overdue
        if created:
            logger.info("ticks: the sweep re-enqueued %d overdue tick(s)", created)
        return created

    def _sweep_now_and_then(self, url: str) -> None:
        """Sweep after a delivery, unless one ran within ``poll_seconds`` or is running."""
        if time.monotonic() - self._last_sweep < self._poll_seconds:
            return
        if not self._sweep_lock.acquire(blocking=False):
            return
        try:
            self._sweep(url)
        except HangarError as exc:
            logger.warning("ticks: sweeping overdue due-times failed: %s", exc)
        finally:
            self._sweep_lock.release()

    def _sweeping(self, stop: threading.Event) -> None:
        while True:
            try:
                self.sweep()
            except Exception:  # the sweeper's top level: a db outage must not end it
                logger.exception("ticks: sweeping overdue due-times failed; trying again")
            if stop.wait(self._poll_seconds):
                return

    # ------------------------------------------------------------------------ Cloud Tasks

    def _url(self) -> str:
        """Where a task posts: the configured URL, else that of the delivery in progress."""
        url = self._target_url or getattr(self._delivery, "url", None)
        if url is None:
            raise InvalidSettings(
                f"{_URL_SETTING} is not set: Cloud Tasks ticks need the URL of the ticks "
                "receiver (outside a tick delivery)",
                setting=_URL_SETTING,
            )
        return str(url)

    def _tasks(self) -> CloudTasksClient:
        with self._lock:
            if self._client is None:
                self._client = self._build_client()
            return self._client

    def _build_client(self) -> CloudTasksClient:
        return tasks_client(self._endpoint)

    def _task(self, tick: TickDue, url: str, label: str) -> Task:
        from google.cloud import tasks_v2

        due_at = utc(tick.due_at)
        body = TickTask(key=tick.key, version=tick.version, due_at=due_at, url=url)
        request = tasks_v2.HttpRequest(
            url=url,
            http_method=tasks_v2.HttpMethod.POST,
            headers={"Content-Type": "application/json"},
            body=body.model_dump_json().encode(),
        )
        if self._invoker:
            request.oidc_token = tasks_v2.OidcToken(
                service_account_email=self._invoker, audience=url
            )
        return tasks_v2.Task(
            name=f"{self.queue}/tasks/{_task_id(tick, label)}",
            schedule_time=min(due_at, datetime.now(UTC) + _MAX_AHEAD),
            http_request=request,
        )

    def _enqueue(self, tick: TickDue, url: str, label: str) -> _Created:
        """Create the task for ``tick``; ALREADY_EXISTS is success. Never raises a vendor
        error: a failure is logged and answered ``failed`` (the due-time stays in the db)."""
        from google.api_core import exceptions as api_exceptions
        from google.api_core.retry import Retry, if_exception_type

        # The name is fixed for this call, so a retry after a lost answer dedupes.
        retry = Retry(
            predicate=if_exception_type(
                api_exceptions.ServiceUnavailable, api_exceptions.DeadlineExceeded
            ),
            initial=0.1,
            maximum=1.0,
            timeout=self._rpc_timeout,
        )
        try:
            self._tasks().create_task(
                parent=self.queue,
                task=self._task(tick, url, label),
                retry=retry,
                timeout=self._rpc_timeout,
            )
        except api_exceptions.AlreadyExists:
            return "exists"
        except vendor_errors() as exc:
            logger.warning(
                "ticks: could not create the Cloud Tasks task for %r in %s (it stays due in "
                "the db; the sweep enqueues it again): %s",
                tick.key, self.queue, exc,
            )  # fmt: skip
            return "failed"
        return "created"
