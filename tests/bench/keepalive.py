"""``GET /api/sessions/{id}`` on one kept-alive connection to a real ``hangar serve``.

:func:`run` stores one session in a new data folder, starts ``hangar serve --port 0`` on it (the
``hangar`` of whatever ``hangar`` package this Python imports, so ``PYTHONPATH=OTHER/shared``
measures another tree), reads the admin token it makes, and times ``runs`` requests made one
after another by one ``httpx.Client`` (one TCP connection, kept alive), after a few untimed
ones that open the connection and warm the server up. The p50 (target at most 5 ms) is mostly
the server's own work; a server whose accepted sockets lack TCP_NODELAY adds a delayed ACK
(about 40 ms on Linux) to every response that is written in more than one piece.

On the same connection it then times MCP ``tools/list`` (:data:`MCP_NAME`, target at most 5 ms
warm), after one untimed call that builds the tools' schemas. The SDK answers the first timed
one too; from the third on, hangar answers with the bytes the SDK answered twice alike
(``hangar.mcp.replay``), so the p50 is that path.

Usage: ``python -m tests.bench.keepalive [--runs N]``; prints two JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.models import Session

NAME = "api_get_keepalive"
TARGET = 0.005
RUNS = 200
WARMUP = 5
START_SECONDS = 30.0
INCLUDES = "one kept-alive connection: the client, the server's auth and the session's read"
MCP_NAME = "mcp_tools_list_warm"
MCP_TARGET = 0.005
MCP_RUNS = 50
MCP_INCLUDES = "stateless streamable HTTP on the same connection, after one call that warms it"
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def run(root: Path, runs: int = RUNS) -> dict[str, list[float]]:
    """The seconds of each of ``runs`` timed ``GET /api/sessions/{id}`` (:data:`NAME`) and of
    :data:`MCP_RUNS` MCP ``tools/list`` (:data:`MCP_NAME`) on one connection to a ``hangar
    serve`` whose data folder is ``root/data`` (made here; ``root`` must exist)."""
    data_dir, harnesses = root / "data", root / "harnesses"
    harnesses.mkdir(parents=True, exist_ok=True)
    settings = Settings.build(data_dir=data_dir, harness_dir=harnesses)
    db = SqliteDb.from_url(settings.db)
    try:
        session = db.create_session(Session(name="bench", environment="app", harness="claude"))
    finally:
        db.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env.update(HANGAR_DATA_DIR=str(data_dir), HANGAR_HARNESS_DIR=str(harnesses))
    log = root / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from hangar.cli import main; sys.exit(main())",
             "serve", "--port", "0"],
            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        url = _wait_serving(proc, log)
        token = (data_dir / "admin-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        path = f"/api/sessions/{session.id}"
        samples: list[float] = []
        with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
            for n in range(WARMUP + runs):
                start = time.perf_counter()
                response = client.get(path)
                elapsed = time.perf_counter() - start
                response.raise_for_status()
                if n >= WARMUP:
                    samples.append(elapsed)
            listed: list[float] = []
            for n in range(1 + MCP_RUNS):
                start = time.perf_counter()
                response = client.post("/mcp", json=TOOLS_LIST, headers=MCP_HEADERS)
                elapsed = time.perf_counter() - start
                response.raise_for_status()
                if b'"tools"' not in response.content:
                    raise RuntimeError(f"tools/list answered {response.text[:300]}")
                if n:
                    listed.append(elapsed)
        return {NAME: samples, MCP_NAME: listed}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_serving(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The URL ``hangar serve`` says it serves (without ``/api``), once it says so."""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        for line in log.read_bytes().splitlines():
            if b"serving http://" in line:
                url = line.split(b"serving ", 1)[1].split()[0].decode()
                return url.removesuffix("/api")  # older banners named the API's prefix
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"hangar serve did not start:\n{log.read_text(errors='replace')}")


def line(name: str, samples: list[float]) -> dict[str, object]:
    target, includes = (TARGET, INCLUDES) if name == NAME else (MCP_TARGET, MCP_INCLUDES)
    return {
        "bench": name,
        "seconds": round(statistics.median(samples), 4),
        "target": target,
        "runs": len(samples),
        "samples": [round(s, 4) for s in samples],
        "includes": includes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.keepalive")
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hangar-bench-api-") as tmp:
        for name, samples in run(Path(tmp), args.runs).items():
            print(json.dumps(line(name, samples)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
