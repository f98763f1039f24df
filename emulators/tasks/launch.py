"""Runs gcloud-tasks-emulator inside ITS OWN virtual environment (it pins protobuf<5), bound to
one address, with a line protocol on stdin/stdout. Started by :class:`emulators.tasks.TasksEmulator`
as ``VENV_PYTHON -I launch.py HOST PORT [--dedupe] [QUEUE...]``; it never imports hangar.

Why not the ``gcloud-tasks-emulator start`` command: it always binds ``[::]:PORT`` (all
interfaces; its host argument is ignored, see ``APIThread.run`` in its ``server.py``) and cannot
report the port it got for port 0. Here ``grpc.server`` is wrapped so the server binds
``HOST:PORT`` and the port actually bound is reported once the server has started.

stdout carries only this protocol:

- first line: ``ready HOST:PORT`` once the gRPC server is serving (QUEUEs already exist), or
  ``error MESSAGE`` and exit 2;
- then one reply line per command line read from stdin: ``create-queue NAME`` and
  ``delete-queue NAME`` answer ``ok`` or ``error MESSAGE``.

End of stdin (the parent closed it, or died) stops the emulator and exits 0. ``--dedupe`` makes
CreateTask answer ALREADY_EXISTS for a task name this emulator has seen before, as the real
service does for about an hour (the emulator alone accepts duplicates). The emulator logs
warnings and errors (every failed delivery) to stderr.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

import grpc
from gcloud_tasks_emulator import server as emulator
from google.api_core.exceptions import AlreadyExists
from google.cloud.tasks_v2 import Queue


class _Bound:
    """A grpc server that binds ``host`` instead of the emulator's ``[::]`` and reports the port
    it got once started."""

    def __init__(self, inner, host, ready):
        self._inner = inner
        self._host = host
        self._ready = ready
        self.port = None
        self.error = None

    def add_insecure_port(self, address):
        requested = address.rsplit(":", 1)[1]
        try:
            self.port = self._inner.add_insecure_port(f"{self._host}:{requested}")
        except RuntimeError as exc:  # grpc: "Failed to bind to address"
            self.error = f"cannot bind {self._host}:{requested}: {exc}"
            self._ready.set()
            raise
        if not self.port:  # older grpc reports a failed bind as port 0
            self.error = f"cannot bind {self._host}:{requested}"
            self._ready.set()
        return self.port

    def start(self):
        self._inner.start()
        self._ready.set()

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Grpc:
    """Stands in for the ``grpc`` module inside the emulator's server module, which uses only
    ``grpc.server``."""

    def __init__(self, host, ready):
        self._host = host
        self._ready = ready
        self.made = None

    def server(self, *args, **kwargs):
        self.made = _Bound(grpc.server(*args, **kwargs), self._host, self._ready)
        return self.made


def _dedupe(state):
    """Make CreateTask refuse a task name seen before (ALREADY_EXISTS), as the service does."""
    seen = set()
    lock = threading.Lock()
    create = state.create_task

    def create_task(queue, task):
        with lock:
            if task.name and task.name in seen:
                raise AlreadyExists(f"Requested entity already exists: {task.name}")
            created = create(queue, task)
            seen.add(created.name)
            return created

    state.create_task = create_task


def _say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _command(state, line):
    verb, _, name = line.strip().partition(" ")
    if verb == "create-queue" and name:
        state.create_queue(name.rsplit("/", 2)[0], Queue(name=name))
        return "ok"
    if verb == "delete-queue" and name:
        state.delete_queue(name)
        return "ok"
    return f"error unknown command {line.strip()!r}"


def main(argv):
    host, port = argv[0], int(argv[1])
    rest = argv[2:]
    dedupe = "--dedupe" in rest
    queues = [name for name in rest if name != "--dedupe"]
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
    ready = threading.Event()
    shim = _Grpc(host, ready)
    emulator.grpc = shim
    server = emulator.create_server(host, port, default_queue_names=queues)
    state = server._state
    if dedupe:
        _dedupe(state)
    server.start()
    if not ready.wait(30) or shim.made is None or shim.made.error or not shim.made.port:
        reason = shim.made.error if shim.made is not None and shim.made.error else "no server"
        _say(f"error {reason}")
        os._exit(2)
    _say(f"ready {host}:{shim.made.port}")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = _command(state, line)
        except Exception as exc:  # the protocol's top level: report, keep serving
            reply = f"error {type(exc).__name__}: {exc}"
        _say(reply.replace("\n", " "))
    # The queue threads block in urlopen without a timeout: do not wait for them.
    shim.made.stop(0)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
