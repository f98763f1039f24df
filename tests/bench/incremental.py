"""The incremental-checkpoint lines of ``make bench`` (issue 26, BRIEF §7).

Measured on a session already made in a sandbox (the reference session, and a variant with
200 MB of untracked files and its caps raised), each line for both checkpoint formats where the
comparison tells something:

- ``checkpoint_first``: the whole session's first checkpoint into an empty store (a new session
  record each run, the sandbox's stat cache removed first, as in a fresh sandbox);
- ``checkpoint_one_edit``: a checkpoint after one line of one tracked file was changed, after a
  first checkpoint (the edit itself is not timed);
- ``checkpoint_one_edit_bytes``: what that checkpoint stored in blobs, found by listing the
  session's objects before and after and adding up the new ones (the record's ``written``,
  its new packs, and its manifest part are shown beside it);
- ``stored_bytes_after_5_turns``: a first checkpoint, then five turns each changing one tracked
  line and appending one line to the conversation; the session's objects in blobs then, over
  what the first checkpoint alone stored.

Each line is ``{"bench", "session", "format", "seconds"|"bytes"|"ratio", "target", "runs",
"samples", ...}``; a format-1 line carries the format-2 target for the side-by-side reading.
"""

from __future__ import annotations

import json
import os
import posixpath
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count

from hangar.agent.chunking import CACHE_NAME
from hangar.blobs.local import LocalBlobs
from hangar.db import Db
from hangar.models import Checkpoint, CheckpointReason, Session
from hangar.sandboxes import HANGAR_TMP, Sandboxes, SandboxUser
from hangar.checkpoints.checkpointer import Checkpointer, CheckpointTarget

REFERENCE = "reference"
BIG = "untracked-200mb"
TARGETS: dict[tuple[str, str], float] = {
    ("checkpoint_first", REFERENCE): 0.25,
    ("checkpoint_one_edit", REFERENCE): 0.15,
    ("checkpoint_one_edit", BIG): 0.3,
    ("checkpoint_one_edit_bytes", REFERENCE): 64 * 1024,
    ("checkpoint_one_edit_bytes", BIG): 64 * 1024,
    ("stored_bytes_after_5_turns", REFERENCE): 1.2,
    ("stored_bytes_after_5_turns", BIG): 1.2,
}
"""BRIEF §7 (incremental checkpoints); the 200 MB variant has no checkpoint_first target."""

BIG_SCRIPT = r"""
set -euo pipefail
# 180 MB more untracked, as the reference's: half random bytes, half text lines.
mkdir -p data/more
for i in $(seq 1 90); do head -c 1000000 /dev/urandom > "data/more/random_$i.bin"; done
python3 - <<'EOF'
import random
rng = random.Random(4)
for i in range(90):
    lines = [f"{i} line {rng.random():.18f} the quick brown fox jumps over the lazy dog\n"
             for _ in range(11_000)]
    with open(f"data/more/text_{i}.txt", "w") as f:
        f.write("".join(lines)[:999_900])
EOF
"""
BIG_CAPS = {"session_max_untracked_mb": 256, "session_max_part_mb": 400}
"""The caps the 200 MB variant needs (the session patch stays over its limit and is skipped,
as on the reference session)."""

_EDITS = count()
_SESSIONS = count()
_CONVERSATION = "~/.claude/projects/-workspace-app/conversation.jsonl"


@dataclass
class Bench:
    """One session made in ``sandbox``: what its lines are measured on."""

    name: str
    db: Db
    blobs: LocalBlobs
    sandboxes: Sandboxes
    sandbox: str
    repo_dir: str
    base: str | None
    checkpointers: dict[int, Checkpointer]
    """By format."""

    def target(self, session_id: str) -> CheckpointTarget:
        return CheckpointTarget(session_id=session_id, sandbox_id=self.sandbox,
                                repo_dir=self.repo_dir, base=self.base, harness="claude")  # fmt: skip

    def new_session(self) -> str:
        name = f"{self.name}-{next(_SESSIONS)}"
        return self.db.create_session(Session(name=name, environment="app", harness="claude")).id

    def take(self, session_id: str, fmt: int) -> Checkpoint:
        taken = self.checkpointers[fmt].take(self.target(session_id), CheckpointReason.TURN)
        assert taken is not None, "a turn checkpoint is never skipped"
        unexpected = [w for w in taken.warnings if not w.startswith("session.patch")]
        assert not unexpected, unexpected
        return taken

    def run(self, script: str, user: SandboxUser = SandboxUser.AGENT) -> None:
        done = self.sandboxes.exec(self.sandbox, ["bash", "-c", script], cwd=self.repo_dir,
                                   user=user)  # fmt: skip
        assert done.ok, done.stderr.decode(errors="replace")

    def edit(self, conversation: bool = False) -> None:
        """One line of one tracked file changed (a file the session's diff did not touch yet);
        with ``conversation``, one JSON line (about 1 KB) appended to the conversation too."""
        n = next(_EDITS)
        path = f"pkg{n % 40:02d}/module_{1000 + n % 1000:04d}.py"
        script = f"sed -i '4s/.*/    return x * {1000 + n}  # edited/' {path}"
        if conversation:
            line = json.dumps({"type": "user", "n": n, "text": "word " * 200})
            script += f"\nprintf '%s\\n' '{line}' >> {_CONVERSATION}"
        self.run(script)

    def forget_stat_cache(self) -> None:
        """As in a new sandbox: the next checkpoint reads every file."""
        self.run(f"rm -f {posixpath.join(HANGAR_TMP, CACHE_NAME)}", SandboxUser.HANGAR)

    def objects(self, session_id: str) -> dict[str, int]:
        """The session's objects in blobs and their sizes."""
        root = self.blobs.root / "sessions" / session_id
        found: dict[str, int] = {}
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                found[os.path.join(dirpath, name)] = os.path.getsize(os.path.join(dirpath, name))
        return found


def line(bench: Bench, name: str, fmt: int, unit: str, samples: list[float],
         **extra: object) -> dict[str, object]:  # fmt: skip
    digits = 4 if unit == "seconds" else 3 if unit == "ratio" else 0
    median = statistics.median(samples)
    return {"bench": name, "session": bench.name, "format": fmt,
            unit: round(median, digits) if digits else int(median),
            "target": TARGETS.get((name, bench.name)), "runs": len(samples),
            "samples": [round(s, digits) if digits else int(s) for s in samples], **extra}  # fmt: skip


def first_and_one_edit(bench: Bench, fmt: int, runs: int) -> Iterator[dict[str, object]]:
    """``checkpoint_first``, ``checkpoint_one_edit`` and ``checkpoint_one_edit_bytes``."""
    firsts: list[float] = []
    full: list[float] = []
    session_id = ""
    for _ in range(runs):
        session_id = bench.new_session()
        bench.forget_stat_cache()
        start = time.perf_counter()
        bench.take(session_id, fmt)
        firsts.append(time.perf_counter() - start)
        full.append(sum(bench.objects(session_id).values()))
    yield line(bench, "checkpoint_first", fmt, "seconds", firsts, stored_bytes=int(full[-1]))
    seconds: list[float] = []
    stored: list[float] = []
    written: list[int] = []
    manifests: list[int] = []
    for _ in range(runs):
        bench.edit()
        before = bench.objects(session_id)
        start = time.perf_counter()
        taken = bench.take(session_id, fmt)
        seconds.append(time.perf_counter() - start)
        after = bench.objects(session_id)
        stored.append(sum(size for key, size in after.items() if key not in before))
        written.append(taken.written)
        manifests.append(sum(p.stored_size for p in taken.parts))
    yield line(bench, "checkpoint_one_edit", fmt, "seconds", seconds)
    yield line(bench, "checkpoint_one_edit_bytes", fmt, "bytes", stored,
               written=written, parts=manifests)  # fmt: skip


def five_turns(bench: Bench, fmt: int) -> dict[str, object]:
    """``stored_bytes_after_5_turns``: a first checkpoint, then five turns of small edits."""
    session_id = bench.new_session()
    bench.forget_stat_cache()
    bench.take(session_id, fmt)
    full = sum(bench.objects(session_id).values())
    ratios: list[float] = []
    for _ in range(5):
        bench.edit(conversation=True)
        bench.take(session_id, fmt)
        ratios.append(sum(bench.objects(session_id).values()) / full)
    total = sum(bench.objects(session_id).values())
    return line(bench, "stored_bytes_after_5_turns", fmt, "ratio", [ratios[-1]],
                after_each_turn=[round(r, 3) for r in ratios], stored_bytes=total,
                full_bytes=full)  # fmt: skip


def lines(bench: Bench, runs: int, formats: tuple[int, ...] = (2, 1),
          ratio_formats: tuple[int, ...] = (2, 1)) -> Iterator[dict[str, object]]:
    """Every line of this module for ``bench``, format by format."""
    for fmt in formats:
        yield from first_and_one_edit(bench, fmt, runs)
    for fmt in ratio_formats:
        yield five_turns(bench, fmt)
