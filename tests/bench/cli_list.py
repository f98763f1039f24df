"""``hangar session list`` as a person runs it: a fresh ``hangar`` process against a running
``hangar serve`` holding :data:`SESSIONS` sessions, timed from its start to its exit.

The API call itself takes a few milliseconds; what the line measures is everything around it:
the interpreter's start, the imports the command pays for (only what it uses: argparse, the
settings, the HTTP client, the table), the call and the printing. Target: p50 at most 0.3 s.

:func:`run` starts ``hangar serve --port 0`` (the ``hangar`` package this Python imports, so
``PYTHONPATH=OTHER/shared`` measures another tree) and runs ``hangar session list`` in a new
interpreter ``runs`` times, after one untimed run.

Usage: ``python -m tests.bench.cli_list [--runs N]``; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hangar.db.sqlite import SqliteDb
from hangar.models import Session
from tests.bench import serving
from tests.bench.serving import CLI, served

NAME = "cli_session_list"
TARGET = 0.3
SESSIONS = 50
RUNS = 20
INCLUDES = "a new interpreter: start, imports, one GET /api/sessions of 50, the table printed"


def run(root: Path, runs: int = RUNS) -> list[float]:
    """The wall seconds of each of ``runs`` ``hangar session list`` processes against a
    ``hangar serve`` on ``root/data`` (made here, with :data:`SESSIONS` sessions)."""

    def seed(db: SqliteDb) -> None:
        for n in range(SESSIONS):
            db.create_session(Session(name=f"bench-{n:02d}", environment="app", harness="claude",
                                      title=f"session number {n}"))  # fmt: skip

    with served(root, seed) as server:
        samples: list[float] = []
        for n in range(1 + runs):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", CLI, "session", "list"], env=server.env,
                                  stdin=subprocess.DEVNULL, capture_output=True)  # fmt: skip
            elapsed = time.perf_counter() - start
            if done.returncode != 0 or done.stdout.count(b"bench-") != SESSIONS:
                raise RuntimeError(f"hangar session list: {done.stderr[-2000:]!r}")
            if n:
                samples.append(elapsed)
        return samples


def line(samples: list[float]) -> dict[str, object]:
    return serving.line(NAME, samples, TARGET, INCLUDES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.cli_list")
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hangar-bench-cli-") as tmp:
        print(json.dumps(line(run(Path(tmp), args.runs))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
