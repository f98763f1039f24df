"""A read-only git server: ``git daemon`` serving one folder's repositories on a free
127.0.0.1 port, as a cluster's git service would serve them to pods on the Kubernetes
stand-in (which relays its port to them, :mod:`emulators.kube.cluster`).

Used by the GKE walk-through and the GKE bench lines: a pod sees no host path, so an
environment's repo there must be a URL (:meth:`GitDaemon.url`).
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

from emulators.processes import Emulator, EmulatorMissing, free_port, stop_group

START_SECONDS = 30.0


class GitDaemon(Emulator):
    """``git daemon --export-all`` over ``folder`` (read-only: no push) on :attr:`port`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()

    def url(self, name: str) -> str:
        """The ``git://`` URL of repository ``name`` in the folder."""
        return f"git://127.0.0.1:{self.port}/{name}"

    def start(self) -> Self:
        """Serve until :meth:`stop`; EmulatorMissing (with git's words) when it does not listen
        within :data:`START_SECONDS`."""
        self.port = free_port()
        self._proc = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--listen=127.0.0.1", f"--port={self.port}",
             "--export-all", f"--base-path={self.folder}", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=self._log, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + START_SECONDS
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._log.seek(0)
                said = self._log.read().decode(errors="replace").strip()[-500:]
                self.stop()
                raise EmulatorMissing(f"git daemon did not start: {said or 'no output'}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._proc is not None:
            stop_group(self._proc)
            self._proc = None
