"""Following detached runs without polling the sandbox: one streaming call per run, shared by
everyone in this process who waits on it.

A :class:`RunFollowers` keeps, per run asked about, one follower thread that holds a single exec
of the ``attach`` script (:func:`~hangar.processes.runs.follow_run`) for up to :data:`WINDOW`
seconds at a time: it receives the run's log as it is written, its quiet time every few seconds,
and its end. Everyone else reads what the follower has seen: the turn watch (is the run over,
has it been quiet too long), a client waiting on the turn, a client streaming its log. So a turn
followed by any number of clients costs one call into the sandbox per window, not one per look
per client.

A follower lives while it is asked about: it starts on the first question, and after a window with
no question for :data:`LINGER` seconds it stops; one whose run has ended is kept :data:`KEEP_ENDED`
seconds for the finish to read. A status is only given fresh: when the follower has heard nothing
for :data:`FRESH` seconds (its frames come every few seconds even from a quiet run, so its thread
was frozen between requests, as a function instance's are), the question waits for its next frame;
and one that has heard nothing for :data:`STALE` seconds is replaced by a new one. A follower
started with a ``watch`` path also knows that file's stamp (the turn's progress file: its lines are
read only when it changed). A follower that met an error (the sandbox gone, a follow that broke
off) hands it to the next question and is dropped, so the question after that starts afresh. Log
bytes are kept from the start up to :data:`KEEP_BYTES`; a reader whose cursor is before what is
kept reads the sandbox instead.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from hangar.errors import HangarError, SandboxError
from hangar.processes.runs import RunStatus, follow_run, read_run
from hangar.sandboxes import Sandboxes

logger = logging.getLogger(__name__)

WINDOW = 300.0
"""Seconds one follow call lasts at most (a new one follows on while the run is asked about)."""
LINGER = 30.0
"""Seconds a follower goes on after the last question about its run."""
KEEP_ENDED = 120.0
"""Seconds the follower of an ended run is kept for the finish to read."""
FIRST_WORD = 10.0
"""Seconds a first question waits for the follower's first frame."""
FRESH = 8.0
"""Seconds after its last frame that what a follower knows is taken as now (its frames come at
least every :data:`~hangar.agent.attach.HEARTBEAT` seconds)."""
STALE = 30.0
"""Seconds without a frame after which a follower is taken for dead and replaced."""
KEEP_BYTES = 8 << 20


@dataclass
class _Follower:
    sandbox_id: str
    run_id: str
    watch: str | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)
    cancel: threading.Event = field(default_factory=threading.Event)
    data: bytearray = field(default_factory=bytearray)
    base: int = 0
    """The cursor of ``data``'s first byte (past KEEP_BYTES the start is dropped)."""
    cursor: int = 0
    exit_code: int | None = None
    stderr: bytes | None = None
    idle: float | None = None
    watched: str | None = None
    heard: float = field(default_factory=time.monotonic)
    asked: float = field(default_factory=time.monotonic)
    ended: float | None = None
    error: HangarError | None = None
    said_error: bool = False
    said: bool = False

    def hear(self, status: RunStatus) -> None:
        with self.cond:
            if status.data:
                self.data += status.data
                if len(self.data) > KEEP_BYTES:
                    drop = len(self.data) - KEEP_BYTES
                    del self.data[:drop]
                    self.base += drop
            self.cursor = status.cursor
            if status.idle_seconds is not None:
                self.idle = status.idle_seconds
            self.watched = status.watched
            self.heard = time.monotonic()
            if status.exit_code is not None:
                self.exit_code, self.stderr = status.exit_code, status.stderr
                self.ended = self.heard
            self.said = True
            self.cond.notify_all()

    def fail(self, error: HangarError) -> None:
        with self.cond:
            self.error = error
            self.ended = time.monotonic()
            self.cond.notify_all()

    def status(self, cursor: int | None = None) -> RunStatus:
        """What is known now (the caller holds ``cond``): data from ``cursor`` when given (and
        kept), the quiet time as of now."""
        idle = None
        if self.exit_code is None and self.idle is not None:
            idle = self.idle + (time.monotonic() - self.heard)
        data = b""
        if cursor is not None:
            data = bytes(self.data[max(0, cursor - self.base) :])
        return RunStatus(data, self.cursor if cursor is not None else 0, self.exit_code,
                         idle, stderr=self.stderr, watched=self.watched)  # fmt: skip

    def fresh(self) -> bool:
        return self.error is not None or self.exit_code is not None or (
            self.said and time.monotonic() - self.heard < FRESH)  # fmt: skip


class RunFollowers:
    """The followers of this process, over ``sandboxes``. Thread-safe."""

    def __init__(self, sandboxes: Sandboxes, *, window: float = WINDOW) -> None:
        self.sandboxes = sandboxes
        self.window = window
        self._lock = threading.Lock()
        self._followers: dict[tuple[str, str], _Follower] = {}

    def status(self, sandbox_id: str, run_id: str, *, watch: str | None = None) -> RunStatus:
        """The run's exit status (None while it runs), quiet time and watched file's stamp,
        without its log, as fresh as :data:`FRESH` says. ``watch``: the file a follower started
        now watches. Raises what following it raised (SandboxNotFound: the sandbox is gone;
        SandboxError)."""
        follower = self._follower(sandbox_id, run_id, watch)
        with follower.cond:
            follower.cond.wait_for(follower.fresh, FIRST_WORD)
            self._raise(follower)
            if not follower.said:
                raise SandboxError(f"no word from run {run_id} in {FIRST_WORD:g} s",
                                   run_id=run_id)  # fmt: skip
            return follower.status()

    def wait(self, sandbox_id: str, run_id: str, cursor: int, timeout: float, *,
             watch: str | None = None) -> RunStatus:  # fmt: skip
        """The run's log from ``cursor`` once there is some, or once it has ended, or after
        ``timeout`` seconds (then maybe nothing): ``data``, the ``cursor`` after it, the exit
        status. Raises as :meth:`status` does."""
        follower = self._follower(sandbox_id, run_id, watch)
        with follower.cond:
            if cursor < follower.base:
                kept = False
            else:
                follower.cond.wait_for(
                    lambda: follower.cursor > cursor or follower.exit_code is not None
                    or follower.error is not None, timeout)  # fmt: skip
                self._raise(follower)
                kept = cursor >= follower.base
            if kept:
                return follower.status(cursor)
        return read_run(self.sandboxes, sandbox_id, run_id, cursor)

    def wait_end(self, sandbox_id: str, run_id: str, timeout: float, *,
                 watch: str | None = None) -> RunStatus:  # fmt: skip
        """The run's status once it has ended, or after ``timeout`` seconds (then unfinished),
        without its log. Raises as :meth:`status` does."""
        follower = self._follower(sandbox_id, run_id, watch)
        with follower.cond:
            follower.cond.wait_for(lambda: follower.exit_code is not None
                                   or follower.error is not None, timeout)  # fmt: skip
            self._raise(follower)
            return follower.status()

    def since(self, sandbox_id: str, run_id: str, cursor: int) -> RunStatus:
        """The run's log from byte ``cursor`` as this process's follower holds it now (from the
        oldest byte it kept, when ``cursor`` is older), with the cursor after it; starts a
        follower when there is none (the bytes come with its first word)."""
        follower = self._follower(sandbox_id, run_id)
        with follower.cond:
            follower.cond.wait_for(follower.fresh, FIRST_WORD)
            self._raise(follower)
            return follower.status(cursor)

    def log(self, sandbox_id: str, run_id: str, limit: int) -> RunStatus:
        """The ended run's whole log (up to ``limit`` bytes), exit status and end of standard
        error: from the follower when it kept all of it, else read from the sandbox."""
        with self._lock:
            follower = self._followers.get((sandbox_id, run_id))
        if follower is not None:
            with follower.cond:
                if follower.exit_code is not None and follower.base == 0:
                    return RunStatus(bytes(follower.data[:limit]), min(follower.cursor, limit),
                                     follower.exit_code, stderr=follower.stderr)  # fmt: skip
        return read_run(self.sandboxes, sandbox_id, run_id, 0, limit)

    def forget(self, sandbox_id: str, run_id: str) -> None:
        """Stop following the run (its sandbox is going, or it was stopped and is to be seen
        afresh)."""
        with self._lock:
            follower = self._followers.pop((sandbox_id, run_id), None)
        if follower is not None:
            follower.cancel.set()

    # -- followers -----------------------------------------------------------------------------

    def _follower(self, sandbox_id: str, run_id: str, watch: str | None = None) -> _Follower:
        now = time.monotonic()
        key = (sandbox_id, run_id)
        with self._lock:
            for k, f in list(self._followers.items()):
                if f.ended is not None and now - f.ended > KEEP_ENDED:
                    del self._followers[k]
            follower = self._followers.get(key)
            if follower is not None and follower.error is not None and follower.said_error:
                follower = None  # its error was handed out: start afresh
            if follower is not None and follower.ended is None and now - follower.heard > STALE:
                follower.cancel.set()  # frozen: replace it
                follower = None
            if follower is None:
                follower = _Follower(sandbox_id, run_id, watch)
                self._followers[key] = follower
                threading.Thread(target=self._follow, args=(follower,), daemon=True,
                                 name=f"follow-{run_id}").start()  # fmt: skip
            follower.asked = now
            return follower

    def _raise(self, follower: _Follower) -> None:
        if follower.error is not None:
            follower.said_error = True
            raise follower.error

    def _follow(self, follower: _Follower) -> None:
        try:
            while not follower.cancel.is_set():
                last = follow_run(self.sandboxes, follower.sandbox_id, follower.run_id,
                                  follower.cursor, window=self.window, on_status=follower.hear,
                                  cancel=follower.cancel, watch=follower.watch)  # fmt: skip
                if last.finished or time.monotonic() - follower.asked > LINGER:
                    break
        except HangarError as exc:
            follower.fail(exc)
        except Exception as exc:  # a bug here must not leave waiters waiting
            logger.exception("following run %s failed", follower.run_id)
            follower.fail(SandboxError(f"following run {follower.run_id} failed: {exc!r}",
                                       run_id=follower.run_id))  # fmt: skip
        finally:
            with self._lock:
                if follower.exit_code is None and follower.error is None:
                    # stopped (lingered out or cancelled): the next question starts afresh
                    if self._followers.get((follower.sandbox_id, follower.run_id)) is follower:
                        del self._followers[(follower.sandbox_id, follower.run_id)]
            with follower.cond:
                follower.cond.notify_all()
