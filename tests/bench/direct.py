"""``checkpoint_gcs_direct`` beside ``checkpoint_gcs_proxied``, and ``restore_gcs_direct``
beside ``restore_gcs_proxied`` (issue 27): format-2 checkpoints and restores of one session on
``gke://`` sandboxes on the Kubernetes stand-in, GCS being fake-gcs-server behind the verifying
front, URLs signed through the IAM stand-in (:func:`tests.direct_rig.direct_world`), once with
the sandbox moving the bytes itself (direct) and once through the control plane (proxied), one
world after the other in the same process.

The session: the rig's seed repo, an agent commit, an uncommitted edit, 4 MB of untracked files
(2 MB random bytes, 2 MB text lines) and 1 MB of conversation as JSON lines under
``~/.claude/projects``, made once per world in one pod. Each run is a new session of that pod
(so its first checkpoint has nothing to reuse): ``checkpoint_gcs_*`` with ``"checkpoint":
"first"`` times that first take, ``"checkpoint": "edit"`` the next turn's take after a one-line
edit (reusing the first's chunks); ``restore_gcs_*`` times the restore of that edit checkpoint
into a fresh pod (made, with hangar's scripts and the seed repo, before the clock starts; as a
start does, ``fresh``), whose tree is then checked against the source's.

Each line carries ``exec_seconds``, the median time spent in the script's exec (outside it,
the control plane's own work: direct, the grant, each URL signed through the IAM API, and the
check of every object written; proxied, storing the parts, while their reading and unsealing
on restore overlap the exec), and ``control_plane_bytes`` (the median per run): the bytes of
the checkpoint that went through the blobs port (``blob_port_bytes``, the rig's
:class:`~tests.direct_rig.Counted`) plus those of the checkpoint or restore script's exec
standard input and output (``exec_stdin_bytes``, ``exec_stdout_bytes``). For a direct take or
restore nothing goes through the blobs port and the exec streams carry only the grant (signed
URLs, the data key) and the answer line: a few kilobytes, whatever the session's size; proxied,
every sealed part goes through both the exec and the blobs port. A take's line also carries
``written``, the bytes of new packs it stored.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from hangar.checkpoints.checkpointer import CheckpointTarget
from hangar.models import Checkpoint, CheckpointReason, Session

from tests.direct_rig import REPO, World, direct_world

CONTENT = """set -e
echo 'def g():\n    return 42' > module_1.py && git add -A
git -c user.name=a -c user.email=a@example.com commit -qm 'agent commit'
echo 'uncommitted' >> module_2.py
mkdir -p data
for i in 1 2 3 4; do head -c 500000 /dev/urandom > "data/random_$i.bin"; done
python3 - <<'EOF'
import json, os, random
rng = random.Random(2)
for i in range(4):
    with open(f"data/text_{i}.txt", "w") as f:
        size = 0
        while size < 500_000:
            line = f"{i} line {rng.random():.18f} the quick brown fox jumps over the lazy dog\\n"
            f.write(line)
            size += len(line)
folder = os.path.expanduser("~/.claude/projects/-workspace-app")
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "conv.jsonl"), "w") as f:
    size = n = 0
    while size < 1_000_000:
        line = json.dumps({"type": "assistant", "n": n, "text": "word " * rng.randint(20, 200)})
        f.write(line + "\\n")
        size += len(line) + 1
        n += 1
EOF
"""
STATE = """cd /workspace/app && git log --format=%s && git status --porcelain=v1 | sort
find . ~/.claude/projects -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum"""
NAMES = {True: "direct", False: "proxied"}


class _CountingWriter:
    """The exec's ``stdout`` file object, counting what is written to it."""

    def __init__(self, out: BinaryIO, tally: _Tally) -> None:
        self.out = out
        self.tally = tally

    def write(self, data: bytes) -> int:
        self.tally.stdout += len(data)
        return self.out.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.out, name)


@dataclass
class _Tally:
    """The bytes of the measured script's execs: standard input sent, standard output read."""

    script: str
    stdin: int = 0
    stdout: int = 0
    execs: int = 0
    seconds: float = 0.0

    def counted_stdin(self, stdin: Any) -> Any:
        if stdin is None:
            return None
        if isinstance(stdin, (bytes, bytearray, memoryview)):
            self.stdin += len(stdin)
            return stdin
        if hasattr(stdin, "read"):
            stream: Any = stdin
            return self._chunks(iter(lambda: stream.read(1 << 20), b""))
        return self._chunks(iter(stdin))

    def _chunks(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.stdin += len(chunk)
            yield chunk


class _Measured:
    """``world.sandboxes.exec`` wrapped while in use: the execs of script ``script``
    (:func:`hangar.agent.command`'s argv) counted in ``tally``; the others pass as they are."""

    def __init__(self, world: World, script: str) -> None:
        self.world = world
        self.tally = _Tally(script)

    def __enter__(self) -> _Tally:
        exec_ = self.world.sandboxes.exec
        tally = self.tally

        def counting_exec(sandbox_id: str, argv: list[str], **options: Any) -> Any:
            if list(argv[1:2]) != [tally.script]:
                return exec_(sandbox_id, argv, **options)
            tally.execs += 1
            options["stdin"] = tally.counted_stdin(options.get("stdin"))
            out = options.get("stdout")
            if out is not None:
                options["stdout"] = _CountingWriter(out, tally)
            start = time.perf_counter()
            result = exec_(sandbox_id, argv, **options)
            tally.seconds += time.perf_counter() - start
            if out is None:
                tally.stdout += len(result.stdout)
            return result

        self.world.sandboxes.exec = counting_exec
        return tally

    def __exit__(self, *exc: object) -> None:
        del self.world.sandboxes.exec


@dataclass
class _Samples:
    """One line's measurements, a value per run."""

    seconds: list[float] = field(default_factory=list)
    exec_seconds: list[float] = field(default_factory=list)
    blob_port: list[int] = field(default_factory=list)
    stdin: list[int] = field(default_factory=list)
    stdout: list[int] = field(default_factory=list)
    written: list[int] = field(default_factory=list)

    def line(self, name: str, **extra: object) -> dict[str, Any]:
        def median(values: list[int]) -> int:
            return int(statistics.median(values))

        crossed = [b + i + o for b, i, o in zip(self.blob_port, self.stdin, self.stdout)]
        return {"bench": name, "seconds": round(statistics.median(self.seconds), 4),
                "runs": len(self.seconds), "samples": [round(s, 4) for s in self.seconds],
                "exec_seconds": round(statistics.median(self.exec_seconds), 4),
                **extra, "control_plane_bytes": median(crossed),
                "blob_port_bytes": median(self.blob_port),
                "exec_stdin_bytes": median(self.stdin), "exec_stdout_bytes": median(self.stdout),
                **({"written": median(self.written)} if self.written else {})}  # fmt: skip


def _measure(world: World, script: str, samples: _Samples, call: Any) -> Any:
    """``call()`` timed, its bytes through the blobs port and ``script``'s exec added."""
    before = world.blobs.bytes
    with _Measured(world, script) as tally:
        start = time.perf_counter()
        result = call()
        samples.seconds.append(time.perf_counter() - start)
    assert tally.execs >= 1, f"the {script} script did not run"
    samples.exec_seconds.append(tally.seconds)
    samples.blob_port.append(world.blobs.bytes - before)
    samples.stdin.append(tally.stdin)
    samples.stdout.append(tally.stdout)
    return result


def _run(world: World, source: str, base: str, run: int, first: _Samples, edit: _Samples,
         restore: _Samples) -> None:  # fmt: skip
    """One run (see the module): a new session's first take, its edit take, its restore."""
    session = world.db.create_session(Session(name=f"bench-{run}", environment="app",
                                              harness="claude"))  # fmt: skip
    target = CheckpointTarget(session.id, source, REPO, base, "claude", "conv")

    def take() -> Checkpoint:
        checkpoint = world.checkpointer.take(target, CheckpointReason.TURN)
        assert checkpoint is not None, "a turn checkpoint is never skipped"
        return checkpoint

    taken = _measure(world, "checkpoint", first, take)
    first.written.append(taken.written)
    world.sh(source, f"echo 'edit {run}' >> data/text_0.txt")
    again = _measure(world, "checkpoint", edit, take)
    assert again.source == taken.id, "the edit checkpoint did not reuse the first"
    edit.written.append(again.written)

    pod, _ = world.sandbox()
    report = _measure(world, "restore", restore,
                      lambda: world.restorer.restore(session.id, pod, REPO, fresh=True))  # fmt: skip
    assert report is not None and report.checkpoint.id == again.id and not report.fell_back
    assert world.sh(pod, STATE, cwd="/") == world.sh(source, STATE, cwd="/")
    world.sandboxes.destroy(pod)  # no hooks are added here


def measure(direct: bool, runs: int, root: Path) -> list[dict[str, Any]]:
    """The lines of one world (see the module): first, edit, restore."""
    first, edit, restore = _Samples(), _Samples(), _Samples()
    with direct_world(root, direct=direct) as world:
        source, base = world.sandbox()
        world.sh(source, CONTENT)
        for run in range(runs):
            _run(world, source, base, run, first, edit, restore)
        world.sandboxes.destroy(source)  # no hooks are added here
    mode = NAMES[direct]
    return [first.line(f"checkpoint_gcs_{mode}", checkpoint="first"),
            edit.line(f"checkpoint_gcs_{mode}", checkpoint="edit"),
            restore.line(f"restore_gcs_{mode}", includes="the restore of the edit checkpoint "
                         "into a ready pod")]  # fmt: skip


def lines(runs: int) -> list[dict[str, Any]]:
    """Both worlds' lines, the direct world measured first, then printed side by side: each
    direct line followed by its proxied one."""
    measured: dict[bool, list[dict[str, Any]]] = {}
    for direct in (True, False):
        with tempfile.TemporaryDirectory(prefix="hangar-bench-direct-") as tmp:
            measured[direct] = measure(direct, runs, Path(tmp))
    return [line for pair in zip(measured[True], measured[False]) for line in pair]
