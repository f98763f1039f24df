"""Reads on the Firestore backend against Google's Firestore emulator: ``get_session`` (BRIEF
§7: p50 at most 20 ms) and one page of 50 sessions out of 10,000, as ``GET /api/sessions``
reads it (p50 at most 50 ms).

:func:`run` starts its own emulator, stores one session (with a lease, a few turns and a
checkpoint beside it, as a live session has), warms the client up (its first call imports the
google libraries and opens the channel; a warm Cloud Run instance has paid that already), then
times ``runs`` calls; then it stores 10,000 sessions in a database of their own and times pages
of 50 (the first page, and pages from a cursor deep in the list, in turn), each made into the
list's views. Usage: ``python -m tests.bench.firestore [--runs N]``.

A third line, ``list_sessions_firestore_floor``, is the emulator's own share of that page: the
same query for one session. The emulator answers every query by reading the whole collection
(about 4 to 6 µs a document on a 2-core machine, whatever the query's filters or order, and
whatever the documents' size), where Firestore reads an index; at 10,000 sessions that floor is
about 40 to 65 ms before any of hangar's work. So the page's time less the floor is what the
client and hangar add, and the floor says what the target is measured against.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from hangar.operations.wire import SessionSummary
from hangar.db.firestore import FirestoreDb
from hangar.models import Checkpoint, CheckpointReason, Session, SessionState, Turn, utcnow

from emulators.firestore import FirestoreEmulator
from tests.bench import serving

TARGET = 0.020
LIST_TARGET = 0.050
SESSIONS, PAGE = 10_000, 50
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
    """Three JSON-able lines: the median seconds of ``runs`` warm ``get_session`` calls, of
    ``runs`` pages of 50 sessions out of 10,000, and of ``runs`` pages of one (the floor)."""
    with FirestoreEmulator() as emulator:
        previous = os.environ.get("FIRESTORE_EMULATOR_HOST")
        os.environ.update(emulator.environment())
        try:
            return [_get_session(runs), *_list_sessions(runs)]
        finally:
            if previous is None:
                os.environ.pop("FIRESTORE_EMULATOR_HOST", None)
            else:
                os.environ["FIRESTORE_EMULATOR_HOST"] = previous


def _get_session(runs: int) -> dict[str, object]:
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
    return serving.line("get_session_firestore", samples, TARGET)


def _list_sessions(runs: int) -> list[dict[str, object]]:
    db = FirestoreDb("hangar-bench", "(default)", f"list-{uuid.uuid4().hex[:8]}")
    try:
        start = utcnow() - timedelta(days=30)

        def make(i: int) -> Session:
            return db.create_session(Session(
                name=f"s-{i:05d}", title=f"session {i}", environment="app", harness="claude",
                state=SessionState.IDLE, created_at=start + timedelta(minutes=i),
                turn_count=3, last_summary=f"did the work of session {i} " * 5,
            ))  # fmt: skip

        with ThreadPoolExecutor(16) as pool:
            made = list(pool.map(make, range(SESSIONS)))
        deep = made[SESSIONS // 2]
        cursors = [None, (deep.created_at, deep.id)]

        def page(i: int, size: int = PAGE) -> None:
            found = db.page_sessions(size + 1, cursors[i % 2])
            views = [SessionSummary.of(s) for s in found[:size]]
            assert len(views) == size

        for i in range(_WARMUP):
            page(i)
        samples, floor = [], []
        for i in range(runs):  # the two in turn, so a noisy spell weighs on both alike
            began = time.perf_counter()
            page(i)
            samples.append(time.perf_counter() - began)
            began = time.perf_counter()
            page(i, 1)
            floor.append(time.perf_counter() - began)
    finally:
        db.close()
    return [serving.line("list_sessions_firestore", samples, LIST_TARGET),
            serving.line("list_sessions_firestore_floor", floor, None)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.firestore")
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args(argv)
    for line in run(args.runs):
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
