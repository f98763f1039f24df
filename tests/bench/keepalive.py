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
import sys
import tempfile
import time
from pathlib import Path

import httpx

from hangar.db.sqlite import SqliteDb
from hangar.models import Session
from tests.bench import serving
from tests.bench.serving import served

NAME = "api_get_keepalive"
TARGET = 0.005
RUNS = 200
WARMUP = 5
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

    def seed(db: SqliteDb) -> Session:
        return db.create_session(Session(name="bench", environment="app", harness="claude"))

    with served(root, seed) as server:
        headers = {"Authorization": f"Bearer {server.token}"}
        path = f"/api/sessions/{server.seeded.id}"
        samples: list[float] = []
        with httpx.Client(base_url=server.url, headers=headers, timeout=10) as client:
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


def line(name: str, samples: list[float]) -> dict[str, object]:
    target, includes = (TARGET, INCLUDES) if name == NAME else (MCP_TARGET, MCP_INCLUDES)
    return serving.line(name, samples, target, includes)


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
