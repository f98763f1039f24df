"""End-to-end fixtures: a real ``hangar serve`` in a subprocess, and the ``hangar`` CLI run as a
new user would run it, against it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from hangar.sandboxes.local import LocalSandboxes
from tests.harness.conftest import harness_dir

HANGAR = str(Path(sys.executable).with_name("hangar"))
STANDIN = Path(__file__).parents[1] / "harness" / "agy_standin.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    data_dir: Path
    harnesses: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
        return {**keep, "HANGAR_DATA_DIR": str(self.data_dir), "HANGAR_URL": self.url,
                "HANGAR_HARNESS_DIR": str(self.harnesses), **self.extra_env}  # fmt: skip

    def start(self) -> None:
        self.log = self.data_dir.parent / f"serve-{self.port}-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [HANGAR, "serve", "--port", str(self.port)], env=self.env(), stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url + "/api/openapi.json", timeout=1)
                return
            except httpx.HTTPError:
                assert self.proc.poll() is None, self.log.read_text()
                time.sleep(0.1)
        raise AssertionError(f"hangar serve did not start:\n{self.log.read_text()}")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def cli(self, *args: str, timeout: float = 300,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """Run ``hangar ARGS`` as a user would (in ``cwd``); returns the finished process."""
        return subprocess.run([HANGAR, *args], env=self.env(), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, cwd=cwd)  # fmt: skip

    def ok(self, *args: str, timeout: float = 300, cwd: Path | None = None) -> str:
        done = self.cli(*args, timeout=timeout, cwd=cwd)
        assert done.returncode == 0, f"hangar {' '.join(args)}: {done.stderr}\n{done.stdout}"
        return done.stdout

    def sandboxes(self) -> LocalSandboxes:
        return LocalSandboxes(self.data_dir / "sandboxes", self.harnesses)


def _server(data_dir: Path, harnesses: Path, **extra: str) -> Iterator[Server]:
    server = Server(data_dir=data_dir, harnesses=harnesses, extra_env=extra)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        for info in server.sandboxes().list():
            server.sandboxes().destroy(info.id)


@pytest.fixture(params=["embedded", "cloud"])
def backends(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """Every walk-through runs twice: on the embedded backends (SQLite, a folder, a key file,
    the in-process ticker) and on the cloud ones (Firestore, GCS, Cloud KMS and Cloud Tasks on
    their emulators, the ticks posted back to the server); sandboxes are local both times.
    Each cloud walk-through has a task queue of its own, deleted after it, so no test's ticks
    wait behind the leftovers of the tests before it."""
    if request.param == "embedded":
        yield {}
        return
    emulators = request.getfixturevalue("cloud_emulators")
    namespace = f"e2e-{uuid.uuid4().hex[:10]}"
    queue = emulators.own_queue(namespace)
    try:
        yield dict(emulators.environment(namespace, queue=queue))
    finally:
        emulators.tasks.delete_queue(queue)


@pytest.fixture
def real_server(tmp_path: Path, backends: dict[str, str]) -> Iterator[Server]:
    """hangar serve with the real Claude Code, Codex and pi CLIs."""
    yield from _server(tmp_path / "data", harness_dir(), **backends)


@pytest.fixture
def standin_server(tmp_path: Path, backends: dict[str, str]) -> Iterator[Server]:
    """hangar serve whose only agent is the Antigravity stand-in (fast, no model), with a short
    activity grace so idle tests take seconds, and a short claim lease so a killed server's
    work is taken over within seconds of its restart."""
    yield from _server(tmp_path / "data", standin_harnesses(tmp_path), **STANDIN_SETTINGS,
                       **backends)  # fmt: skip


STANDIN_SETTINGS = {"HANGAR_ACTIVITY_GRACE_SECONDS": "1", "HANGAR_CLAIM_LEASE_SECONDS": "3"}


def standin_harnesses(root: Path) -> Path:
    harnesses = root / "agy-harness"
    (harnesses / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy(STANDIN, harnesses / "bin" / "agy")
    (harnesses / "bin" / "agy").chmod(0o755)
    return harnesses
