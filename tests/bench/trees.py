"""``tree_hash_p50``: the ``ms`` :meth:`hangar.agent.trees.Trees.record` reports after one edit on
a 5,000-file repo (made on the fly), against ``git add -A && git write-tree`` with a warm
scratch index (a private git folder seeded from the repo's index, the same git options, hashed
once before the runs) after the same kind of edit, in the same run.

An edit is an edit tool's step (Claude Code's ``Edit``, ``Write``, ...; Codex's file change),
which names its file: the driver hashes just that path (``seconds``, ``ms``, ``speedup``: the
baseline's p50 over it). A shell step names nothing, so the driver hashes the whole tree
(``shell_ms``, ``shell_speedup``: reported beside, held to no target: most of it is git's lstat
of every file). ``unchanged_ms`` is a record that finds nothing changed (a read, a command that
writes nothing), which gives no line. Each run edits one line of a different file, then hashes;
the ways take turns so they see the same machine.

Usage: ``python -m tests.bench.trees [--runs N]``; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hangar.agent.trees import Trees

NAME = "tree_hash_p50"
TARGET_MS = 15.0
TARGET_SPEEDUP = 1.33
FILES = 5000
RUNS = 40
IDENTITY = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
            "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}  # fmt: skip


def make_repo(root: Path, files: int = FILES) -> Path:
    """A committed repo of ``files`` small text files in 50 folders of 7 sub-folders."""
    rng = random.Random(11)
    repo = root / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    for i in range(files):
        path = repo / f"pkg{i % 50:02d}" / f"sub{i % 7}" / f"module_{i:04d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"value_{j} = {rng.random():.12f}\n" for j in range(40)))
    (repo / ".gitignore").write_text("*.log\n__pycache__/\n")
    env = {**os.environ, **IDENTITY}
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "seed"], check=True, env=env)
    return repo


def edit(repo: Path, n: int) -> str:
    """Append one line to the ``n``-th file; its path relative to the repo."""
    rel = f"pkg{n % 50:02d}/sub{n % 7}/module_{n % FILES:04d}.py"
    with open(repo / rel, "a") as f:
        f.write(f"edited_{n} = {n}\n")
    return rel


def baseline(plain: Trees) -> float:
    """Milliseconds of ``git add -A && git write-tree`` in ``plain``'s scratch git folder (its
    index warm), the repo's objects an alternate, as a plain write-tree needs."""
    start = time.perf_counter()
    for args in (("add", "-A"), ("write-tree",)):
        code, _, err = plain._git(*args, env=plain.reading)
        assert code == 0, err
    return (time.perf_counter() - start) * 1000.0


def run(root: Path, runs: int = RUNS) -> dict[str, object]:
    """The bench's line."""
    repo = make_repo(root)
    (root / "ours").mkdir()
    (root / "plain").mkdir()
    ours = Trees(str(repo), str(root / "ours"))
    plain = Trees(str(repo), str(root / "plain"))
    assert ours.record(None) is not None
    baseline(plain)  # warm: the scratch index now holds the stat of every file
    mine: list[float] = []
    base: list[float] = []
    paths: list[float] = []
    unchanged: list[float] = []
    for i in range(runs):
        edit(repo, 3 * i)
        line = ours.record("Bash")
        assert line is not None and "tree" in line, line
        mine.append(float(str(line["ms"])))
        rel = edit(repo, 3 * i + 1)
        line = ours.record("Edit", [str(repo / rel)])
        assert line is not None and "tree" in line, line
        paths.append(float(str(line["ms"])))
        start = time.perf_counter()
        assert ours.record("Read") is None
        unchanged.append((time.perf_counter() - start) * 1000.0)
        edit(repo, 3 * i + 2)  # ours sees it too, at the next whole hash
        base.append(baseline(plain))
    p50, shell_p50, base_p50 = (statistics.median(paths), statistics.median(mine),
                                statistics.median(base))  # fmt: skip
    return {"bench": NAME, "seconds": round(p50 / 1000.0, 4), "target": TARGET_MS / 1000.0,
            "runs": runs, "samples": [round(ms / 1000.0, 4) for ms in paths],
            "ms": round(p50, 2), "baseline_ms": round(base_p50, 2),
            "speedup": round(base_p50 / p50, 2), "speedup_target": TARGET_SPEEDUP,
            "shell_ms": round(shell_p50, 2), "shell_speedup": round(base_p50 / shell_p50, 2),
            "unchanged_ms": round(statistics.median(unchanged), 2), "files": FILES,
            "step": "an edit tool's step (its path)",
            "baseline": "git add -A && git write-tree, warm scratch index"}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.trees")
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hangar-bench-trees-") as tmp:
        print(json.dumps(run(Path(tmp), args.runs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
