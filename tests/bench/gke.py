"""``resume_gke_warm`` and ``resume_gke_cold``: a suspended session resumed on ``gke://``
sandboxes on the Kubernetes stand-in, through the session service's whole start chain (claim,
wait for ready, install hangar's scripts, clone, restore), as a message days later would.

Times on the stand-in say little (its pods are local sandboxes); the requests say what a real
cluster will pay. Each line carries ``api_requests`` (the median number of Kubernetes API
requests from the resume's start until its restore starts; the issue's bound for a warm
resume: 8), ``api_requests_total`` (until the session is ready again) and ``pods_created``
(how many of the resumes' claims got a pod made for them: a warm resume takes a pod the pool
made before, and makes none; the pool's refill is the pool's).

Warm: the environment's pool keeps one ready sandbox (``gke://...?warm_pool=1``) and every
resume starts with it ready (its refill is awaited between runs, outside the timing); cold:
no pool, every claim makes its pod.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from emulators.git import GitDaemon
from emulators.kube import kinds
from emulators.kube.cluster import StandInCluster
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import SessionState, TurnOutcome
from hangar.sandboxes import open_sandboxes
from hangar.sandboxes.gke.manifests import SANDBOX_ID
from hangar.sessions.sandbox import Provisioner
from hangar.sessions.service import SessionService
from tests.unit.sessions.world import STANDIN, FakeTicks

NAMES = {True: "resume_gke_warm", False: "resume_gke_cold"}
WARM_BOUND = 8
"""At most this many API requests before a warm resume's restore starts (issue 24)."""
TURN = """bench: make a change
run: echo one > committed.txt && git add committed.txt && git commit -qm 'first change'
run: echo 'uncommitted line' >> README.md && head -c 200000 /dev/urandom > blob.bin"""
IDENTITY = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
            "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}  # fmt: skip


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def _remote(root: Path) -> Path:
    seed, bare = root / "seed", root / "remote" / "app.git"
    _git("init", "-q", "-b", "main", str(seed))
    for i in range(50):
        (seed / f"module_{i:02d}.py").write_text(f"def f():\n    return {i}\n" * 40)
    _git("-C", str(seed), "add", "-A")
    _git("-C", str(seed), "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-qm", "seed")
    _git("init", "-q", "--bare", "-b", "main", str(bare))
    _git("-C", str(seed), "push", "-q", str(bare), "main")
    return bare


def _until(predicate: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench: {what} not ready in {timeout:g} s")
        time.sleep(0.02)


class _RestoreMark:
    """Counts the stand-in's requests when a restore starts (``Provisioner.restore`` wrapped
    for the bench's process)."""

    def __init__(self, cluster: StandInCluster) -> None:
        self.cluster = cluster
        self.at: int | None = None
        self._original = Provisioner.restore

    def __enter__(self) -> _RestoreMark:
        mark = self
        original = self._original

        def restore(provisioner: Provisioner, *args: Any, **kwargs: Any) -> Any:
            mark.at = mark.cluster.kube.server.requests
            return original(provisioner, *args, **kwargs)

        Provisioner.restore = restore  # type: ignore[method-assign, assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        Provisioner.restore = self._original  # type: ignore[method-assign]


def _pods(cluster: StandInCluster) -> set[str]:
    pods, _ = cluster.kube.store.list(kinds.PODS.resource, None)
    return {p["metadata"]["uid"] for p in pods}


def _claimed_pod(cluster: StandInCluster, sandbox_id: str) -> str:
    """The uid of the pod the claim ``sandbox_id`` holds."""
    pods, _ = cluster.kube.store.list(kinds.PODS.resource, None)
    [uid] = [p["metadata"]["uid"] for p in pods
             if (p["metadata"].get("labels") or {}).get(SANDBOX_ID) == sandbox_id]  # fmt: skip
    return str(uid)


def _pool_ready(cluster: StandInCluster) -> bool:
    pools, _ = cluster.kube.store.list(kinds.WARM_POOLS.resource, None)
    return bool(pools) and all(((p.get("status") or {}).get("readyReplicas") or 0) >=
                               (p.get("spec") or {}).get("replicas", 0) for p in pools)  # fmt: skip


def measure(warm: bool, runs: int, root: Path) -> dict[str, Any]:
    """One bench line (see the module): ``runs`` resumes of one suspended session."""
    harnesses = root / "harnesses"
    (harnesses / "bin").mkdir(parents=True)
    shutil.copy(STANDIN, harnesses / "bin" / "agy")
    (harnesses / "bin" / "agy").chmod(0o755)
    remote = _remote(root)
    daemon = GitDaemon(remote.parent).start()
    cluster = StandInCluster(harnesses, [daemon.port]).start()
    kubeconfig = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = cluster.kube.kubeconfig  # what the backend opens
    db = SqliteDb.from_url(f"sqlite://{root / 'hangar.db'}")
    ticks = FakeTicks(frozenset({"start", "claim", "watch"}))
    try:
        settings = Settings.build(data_dir=root / "data", harness_dir=harnesses,
                                  activity_grace_seconds=0,
                                  sandboxes=cluster.sandboxes_url(warm_pool=int(warm)))  # fmt: skip
        blobs = LocalBlobs.from_url(settings.session_store)
        keys = LocalKeys.from_url(settings.keys)
        sandboxes = open_sandboxes(settings.sandboxes, settings)
        service = SessionService(settings, db, blobs, keys, sandboxes, ticks)
        service.environments.add("app", daemon.url(remote.name), vars=IDENTITY)
        ticks.start(service.handle_tick)
        service.new("bench", TURN, "app", harness="antigravity")
        turn = service.wait("bench", timeout=120, poll=0.05)
        assert turn.outcome is TurnOutcome.EXITED, turn
        seconds: list[float] = []
        before_restore: list[int] = []
        totals: list[int] = []
        made = 0
        for _ in range(runs):
            service.suspend("bench")
            if warm:
                _until(lambda: _pool_ready(cluster), "the warm pool's refill")
            pods = _pods(cluster)
            start_requests = cluster.kube.server.requests
            with _RestoreMark(cluster) as mark:
                start = time.perf_counter()
                service.open("bench")
                _until(lambda: service.resolve("bench").state is not SessionState.STARTING,
                       "the resume")  # fmt: skip
                seconds.append(time.perf_counter() - start)
            session = service.resolve("bench")
            assert session.state is SessionState.IDLE, session.start_error
            assert mark.at is not None, "the resume did not restore"
            before_restore.append(mark.at - start_requests)
            totals.append(cluster.kube.server.requests - start_requests)
            made += _claimed_pod(cluster, session.sandbox_id or "") not in pods
        return {"bench": NAMES[warm], "seconds": round(statistics.median(seconds), 4),
                "api_requests": statistics.median(before_restore),
                "api_requests_total": statistics.median(totals), "pods_created": made,
                "runs": runs, "samples": [round(s, 4) for s in seconds],
                "requests_samples": before_restore,
                **({"api_requests_bound": WARM_BOUND} if warm else {}),
                "includes": "claim, ready, scripts, clone, restore (the stand-in's pods)"}  # fmt: skip
    finally:
        ticks.stop()
        if kubeconfig is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = kubeconfig
        for info in cluster.kube.store.list(kinds.CLAIMS.resource, None)[0]:
            cluster.kube.store.delete(kinds.CLAIMS.resource, info["metadata"]["namespace"],
                                      info["metadata"]["name"])  # fmt: skip
        db.close()
        cluster.stop()
        daemon.stop()


def lines(runs: int) -> Iterator[dict[str, Any]]:
    """The warm line, then the cold one."""
    for warm in (True, False):
        with tempfile.TemporaryDirectory(prefix="hangar-bench-gke-") as tmp:
            yield measure(warm, runs, Path(tmp))
