"""What the emulator launchers share: free ports, stopping a process group, a clear error."""

from __future__ import annotations

import os
import signal
import socket
import subprocess


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
