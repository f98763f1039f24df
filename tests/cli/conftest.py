"""A real ``hangar serve`` in a subprocess (a free port, a temp data dir, the Antigravity
stand-in as the only harness), and the CLI pointed at it through the environment."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hangar.cli import main
from hangar.config import Settings
from hangar.sandboxes.local import LocalSandboxes

STANDIN = Path(__file__).parents[1] / "harness" / "agy_standin.py"
START_SECONDS = 30
STOP_SECONDS = 20


@dataclass
class Server:
    url: str
    data_dir: Path
    proc: subprocess.Popen[bytes]
    lines: queue.Queue[bytes | None]
    output: list[bytes] = field(default_factory=list)
    drained: bool = False

    def stop(self) -> int:
        """SIGTERM, then the exit status (bounded); everything it printed is in ``output``.
        Idempotent."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(STOP_SECONDS)
        while not self.drained:
            line = self.lines.get(timeout=STOP_SECONDS)
            self.drained = line is None
            self.output += [line] if line is not None else []
        return code


@dataclass
class Cli:
    """Runs ``main(argv)`` in this process and returns (status, stdout, stderr)."""

    capsys: pytest.CaptureFixture[str]

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main(list(argv))
        out, err = self.capsys.readouterr()
        return code, out, err


def _serve_command() -> list[str]:
    script = Path(sys.executable).parent / "hangar"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from hangar.cli import main; sys.exit(main())"]


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap (bwrap) is not installed: run `make install`", pytrace=False)
    harnesses = tmp_path / "harnesses"
    (harnesses / "bin").mkdir(parents=True)
    shutil.copy(STANDIN, harnesses / "bin" / "agy")
    (harnesses / "bin" / "agy").chmod(0o755)
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env.update(HANGAR_DATA_DIR=str(data_dir), HANGAR_HARNESS_DIR=str(harnesses))
    proc = subprocess.Popen(
        [*_serve_command(), "serve", "--port", "0"], env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    lines: queue.Queue[bytes | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    server = Server("", data_dir, proc, lines)
    try:
        while not server.url:
            line = lines.get(timeout=START_SECONDS)
            assert line is not None, b"".join(server.output).decode()
            server.output.append(line)
            if b"serving http://" in line:
                server.url = line.split(b"serving ", 1)[1].split()[0].decode()
        for name in [k for k in os.environ if k.startswith("HANGAR_")]:
            monkeypatch.delenv(name)
        monkeypatch.setenv("HANGAR_URL", server.url)
        monkeypatch.setenv("HANGAR_DATA_DIR", str(data_dir))
        yield server
    finally:
        server.stop()
        settings = Settings.build(data_dir=data_dir, harness_dir=harnesses)
        sandboxes = LocalSandboxes.from_url(settings.sandboxes, settings)
        for info in sandboxes.list():
            sandboxes.destroy(info.id)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(capsys)
