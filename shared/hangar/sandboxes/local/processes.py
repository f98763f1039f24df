"""Running host processes: finding host tools, streaming a child's pipes, killing process trees.

The plumbing under :mod:`hangar.sandboxes.local`, which knows nothing of sandboxes. Contracts:

- :data:`HOST_ENV` is the whole environment host tools run with, and :func:`host_tool` looks a
  tool up on its PATH only (never the caller's PATH); the answer is cached for the process.
- :func:`feed` is a thread body: it streams bytes, a binary file or byte chunks into a pipe and
  always closes it. A child that stops reading is not an error; an error reading the source is
  appended to the caller's list, for the caller to raise on its own thread.
- :func:`pump` copies a child's pipes to their sinks until EOF. Once the child has exited it
  reads for at most :data:`DRAIN_GRACE` more seconds, so background processes holding the
  pipes open cannot stall it. It returns False if the deadline passes first and never kills.
- :func:`kill_tree` SIGKILLs a child started with ``start_new_session=True``: its process group
  and every descendant found in ``/proc`` (also those that left the group), then reaps it.
  :func:`kill` SIGKILLs one pid; a process that is gone or not ours is silently skipped.
- :func:`start_time` reads ``/proc/PID/stat``: a pid with the same start time is the same
  process, so it tells a live process from a reused pid. None if it is gone or a zombie.
- :func:`read_some` reads an fd once with a deadline and raises TimeoutError when nothing comes
  in time; the caller turns that into its own error.

Linux only (``/proc``); pids are host pids.
"""

from __future__ import annotations

import functools
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO, cast

HOST_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
"""The environment host tools run with; nothing of the caller's environment leaks in."""

DRAIN_GRACE = 1.0
"""Seconds to keep reading output held open by background processes once the child exits."""

_CHUNK = 64 * 1024


@functools.cache
def host_tool(name: str) -> str | None:
    """The path of host tool ``name`` on :data:`HOST_ENV`'s PATH, or None if it is missing."""
    return shutil.which(name, path=HOST_ENV["PATH"])


def feed(
    pipe: BinaryIO, source: bytes | BinaryIO | Iterable[bytes], errors: list[Exception]
) -> None:
    """Stream bytes, a binary file or byte chunks into ``pipe``, then close it (a thread body).

    Chunks from an iterable are flushed one by one, so an interactive source (a terminal's
    keystrokes) reaches the command as it comes. A command that stops reading is not an error
    (the pipe breaks); an error reading the source is put in ``errors`` for the caller to raise.
    """
    try:
        if isinstance(source, (bytes, bytearray, memoryview)):
            pipe.write(source)
        elif hasattr(source, "read"):
            while chunk := cast(BinaryIO, source).read(_CHUNK):
                pipe.write(chunk)
        else:
            for chunk in source:
                pipe.write(chunk)
                pipe.flush()
    except BrokenPipeError:
        pass  # the command stopped reading (or was killed): not an error
    except Exception as exc:  # the caller's source failed: hand it back to the caller
        errors.append(exc)
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _stopped(deadline: float | None, cancel: threading.Event | None) -> bool:
    """Whether the deadline has passed or ``cancel`` is set."""
    return (deadline is not None and time.monotonic() >= deadline) or (
        cancel is not None and cancel.is_set())  # fmt: skip


def _wait(deadline: float | None) -> float:
    """How long to wait before looking again: 0.1 s at most, never past the deadline."""
    return 0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))


def pump(
    proc: subprocess.Popen[bytes],
    streams: dict[int, Callable[[bytes], Any]],
    deadline: float | None,
    cancel: threading.Event | None = None,
) -> bool:
    """Copy the pipes to their sinks until EOF; False if the deadline passes or ``cancel`` is
    set first (both are looked at every 0.1 s)."""
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        for fd, sink in streams.items():
            sel.register(fd, selectors.EVENT_READ, sink)
        while sel.get_map():
            if _stopped(deadline, cancel):
                return False
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > DRAIN_GRACE:
                return True  # only background processes still hold the pipes
            for key, _ in sel.select(_wait(deadline)):
                data = os.read(key.fd, _CHUNK)
                if data:
                    key.data(data)
                else:
                    sel.unregister(key.fd)
    return True


def finish(
    proc: subprocess.Popen[bytes], deadline: float | None, cancel: threading.Event | None
) -> bool:
    """Wait for the command to exit (its pipes may have closed before it did); False if the
    deadline passes or ``cancel`` is set first (looked at every 0.1 s)."""
    while True:
        try:
            proc.wait(_wait(deadline))
            return True
        except subprocess.TimeoutExpired:
            if _stopped(deadline, cancel):
                return False


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group and every descendant (those that left it), then reap."""
    doomed = _descendants(proc.pid)  # before the kill: orphans would be re-parented away
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in doomed:
        kill(pid)
    proc.wait()


def kill(pid: int) -> None:
    """SIGKILL ``pid``; nothing happens if it is gone or not ours to kill."""
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start_time(pid: int) -> int | None:
    """The start time of a running (not zombie) process, in clock ticks since boot."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])  # field 22 of /proc/PID/stat


def read_some(fd: int, deadline: float) -> bytes:
    """One read from ``fd`` (b"" at EOF); TimeoutError if nothing comes before the deadline."""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        if not sel.select(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"nothing to read on fd {fd} before the deadline")
    return os.read(fd, _CHUNK)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat_fields(int(entry))
            if stat is not None:
                children.setdefault(int(stat[1]), []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3 onwards of /proc/PID/stat (state, ppid, ...), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].decode().split()
