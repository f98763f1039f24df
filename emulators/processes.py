"""What the emulator launchers share: free ports, stopping a process group, one start error,
the launcher shape (:class:`Emulator`) and our in-process HTTP stand-ins' lifecycle."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Self


class EmulatorMissing(RuntimeError):
    """An emulator cannot be found or did not start; the message says what to install or run.
    Every launcher's own start error derives from it, so one ``except`` covers them all."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """End a process started with ``start_new_session=True`` and everything it started: SIGTERM
    to its group, then SIGKILL after ``timeout`` seconds."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived the leader
    except ProcessLookupError:
        pass
    proc.wait()


class Emulator:
    """What every launcher is: ``start()`` (returns the launcher), ``stop()`` (idempotent), and a
    context manager doing both."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class StandInServer(ThreadingHTTPServer):
    """The HTTP server of our stand-ins: a thread per request, daemon threads, and a listen
    backlog that takes a burst of connections (the default of 5 drops the sixth, which comes
    back only after a one-second SYN retry: a grant signing eight URLs at once paid it)."""

    request_queue_size = 128
    daemon_threads = True


class ThreadedStandIn(Emulator):
    """A stand-in HTTP server of ours, served from a daemon thread of this process (or in the
    foreground by :func:`serve_main`). Subclasses say how to make the server."""

    label = "stand-in"
    """How the stand-in names itself in messages ("kms stand-in")."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, verbose: bool = False) -> None:
        self.host = host
        self.port = port
        self.verbose = verbose
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def make_server(self) -> ThreadingHTTPServer:
        """A bound server for ``(self.host, self.port)``; raises OSError when it cannot bind."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError(f"the {self.label} is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def bind(self) -> None:
        """Bind the socket (raises OSError when the port is taken)."""
        if self._server is None:
            self._server = self.make_server()

    def serve_forever(self) -> None:
        self.bind()
        assert self._server is not None
        self._server.serve_forever()

    def start(self) -> Self:
        self.bind()
        assert self._server is not None
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=self.label, daemon=True)  # fmt: skip
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            if self._thread is not None:
                self._server.shutdown()
                self._thread.join(timeout=5)
            self._server.server_close()
        self._server = None
        self._thread = None


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def serve_main(stand_in: ThreadedStandIn) -> int:
    """Serve ``stand_in`` in the foreground until SIGTERM or Ctrl-C (exit 0). Prints ``LABEL
    listening on URL`` (flushed) once bound, so a parent that passed port 0 can read the port;
    a port that cannot be bound exits with 2."""
    try:
        stand_in.bind()
    except OSError as exc:
        print(f"cannot bind {stand_in.host}:{stand_in.port}: {exc.strerror}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"{stand_in.label} listening on {stand_in.url}", flush=True)
    try:
        stand_in.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
