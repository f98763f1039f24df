"""``get_session`` on the Firestore backend against Google's Firestore emulator (BRIEF §7: p50 at
most 20 ms).

:func:`run` starts its own emulator, stores one session (with a lease, a few turns and a
checkpoint beside it, as a live session has), warms the client up (its first call imports the
google libraries and opens the channel; a warm Cloud Run instance has paid that already), then
times ``runs`` calls. Usage: ``python -m tests.bench.firestore [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from datetime import timedelta

from hangar.db.firestore import FirestoreDb
from hangar.models import Checkpoint, CheckpointReason, Session, SessionState, Turn, utcnow

from emulators.firestore import FirestoreEmulator

TARGET = 0.020
_WARMUP = 20  # the emulator (a JVM) is slow on its first requests


def _session(db: FirestoreDb) -> Session:
    now = utcnow()
    session = db.create_session(Session(
        name="bench", title="a session to read", environment="app", harness="claude",
        repo="https://example.com/app.git", state=SessionState.IDLE, sandbox_id="sbx-1",
        shells={"lease-1": now + timedelta(minutes=1)}, harness_session=str(uuid.uuid4()),
    ))  # fmt: skip
    for n in range(1, 4):
        db.add_turn(Turn(session_id=session.id, n=n, message=f"turn {n} " * 50))
    db.record_checkpoint(
        Checkpoint(session_id=session.id, reason=CheckpointReason.TURN, wrapped_key="a2V5"),
        keep=5,
    )
    return session


def run(runs: int) -> list[dict[str, object]]:
    """One JSON-able line: the median seconds of ``runs`` warm ``get_session`` calls."""
    with FirestoreEmulator() as emulator:
        previous = os.environ.get("FIRESTORE_EMULATOR_HOST")
        os.environ.update(emulator.environment())
        db = FirestoreDb("hangar-bench", "(default)", f"bench-{uuid.uuid4().hex[:8]}")
        try:
            session = _session(db)
            for _ in range(_WARMUP):
                db.get_session(session.id)
            samples = []
            for _ in range(runs):
                start = time.perf_counter()
                db.get_session(session.id)
                samples.append(time.perf_counter() - start)
        finally:
            db.close()
            if previous is None:
                os.environ.pop("FIRESTORE_EMULATOR_HOST", None)
            else:
                os.environ["FIRESTORE_EMULATOR_HOST"] = previous
    return [{
        "bench": "get_session_firestore",
        "seconds": round(statistics.median(samples), 4),
        "target": TARGET,
        "runs": runs,
        "samples": [round(s, 4) for s in samples],
    }]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.firestore")
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args(argv)
    for line in run(args.runs):
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
