"""``steer_roundtrip``: a steer's way from the control plane to a live turn's CLI and back, as
:meth:`hangar.sessions.steering.Steering.command` makes it (the command signed and landed by one
exec, then the driver's answer read until it says ``delivered``), in a real local sandbox.

The turn is hangar's driver (:mod:`hangar.agent.driver`) speaking Claude Code's stream-json to a
stand-in that reads user lines and answers none of them (the CLI's own time is not hangar's),
so the figure is the channel's: the exec that lands a command, the driver's look at its inbox
(every 0.05 s), its write to the CLI, and the reads of its answer.

Usage: ``python -m tests.bench.steering [--runs N]``; prints one JSON line.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hangar import agent
from hangar.agent import commands
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.models import Session, Turn
from hangar.processes.runs import run_dir, start_run, stop_run
from hangar.sandboxes import SandboxSpec
from hangar.sandboxes.local import LocalSandboxes
from hangar.sessions.steering import Steering

NAME = "steer_roundtrip"
RUNS = 20
INCLUDES = "landing exec, the driver's look (every 0.05 s), its write to the CLI, answer reads"
STANDIN = "import sys\nfor line in sys.stdin:\n    pass\n"  # takes every line, answers none


class Keyed:
    """The two things of :class:`~hangar.sessions.turns.Turns` a steer needs."""

    def __init__(self, key: bytes) -> None:
        self.key = key

    def command_key(self, turn: Turn) -> bytes:
        return self.key


def run(root: Path, runs: int = RUNS) -> list[float]:
    """The seconds of each of ``runs`` steers, one after another, to one live turn."""
    settings = Settings.build(data_dir=root / "data", harness_dir=root / "harnesses")
    db = SqliteDb.from_url(settings.db)
    sandboxes = LocalSandboxes(root / "sandboxes", root / "harnesses")
    info = sandboxes.create(SandboxSpec())
    try:
        agent.install(sandboxes, info.id)
        session = db.create_session(Session(name="bench", environment="e", harness="claude",
                                            idle_minutes=0, sandbox_id=info.id))  # fmt: skip
        turn = db.add_turn(Turn(session_id=session.id, n=1, message="go"))
        key = commands.new_key()
        request = {"harness": "claude", "argv": ["python3", "-c", STANDIN], "message": "go",
                   "run_id": turn.run_id, "key": base64.b64encode(key).decode()}  # fmt: skip
        start_run(sandboxes, info.id, turn.run_id, agent.command("driver", run_dir(turn.run_id)),
                  cwd="/tmp", env={}, stdin=json.dumps(request).encode(), control=True)  # fmt: skip
        steering = Steering(settings, db, sandboxes, Keyed(key), None, None)  # type: ignore[arg-type]
        seconds = []
        for i in range(runs):
            start = time.perf_counter()
            steering.command(session, db.get_turn(session.id, 1), key, "steer",
                             {"message": f"steer {i}"})  # fmt: skip
            seconds.append(time.perf_counter() - start)
        stop_run(sandboxes, info.id, turn.run_id)
        return seconds
    finally:
        sandboxes.destroy(info.id)
        db.close()


def line(seconds: list[float]) -> dict[str, object]:
    return {"bench": NAME, "seconds": statistics.median(seconds), "runs": len(seconds),
            "samples": [round(s, 4) for s in seconds], "includes": INCLUDES}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.steering")
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hangar-bench-") as tmp:
        print(json.dumps(line(run(Path(tmp), args.runs))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
