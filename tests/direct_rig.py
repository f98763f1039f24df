"""A world for direct checkpoints: ``gke://`` sandboxes on the Kubernetes stand-in, blobs in
fake-gcs-server behind our verifying front, URLs signed through the IAM Credentials stand-in
(as on Cloud Run: no private key), the pods given the front's signed port alone (as pods reach
the storage endpoint); SQLite and a local key file for the rest.

:class:`Counted` wraps the blobs port and counts every checkpoint byte that passes through it:
with :func:`control_plane_bytes`, what the tests and the bench lines check is 0 for direct.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from emulators.gcs import FakeGcs
from emulators.iam import IamStandIn
from emulators.kube.cluster import StandInCluster
from hangar import agent
from hangar.agent.toolkit import install_crypto
from hangar.blobs import Blobs, open_blobs
from hangar.blobs.signing import SignsUrls, url_signer
from hangar.checkpoints.checkpointer import Checkpointer, CheckpointTarget
from hangar.checkpoints.restore import Restorer
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import Checkpoint, CheckpointReason, Session
from hangar.sandboxes import SandboxSpec, SandboxState, open_sandboxes

BUCKET = "hangar-direct"
SIGNER = "hangar-control@hangar-local.iam.gserviceaccount.com"
REPO = "/workspace/app"
SEED = """set -e
mkdir -p /workspace/app && cd /workspace/app
git init -q -b main .
for i in $(seq 1 20); do printf 'def f():\\n    return %s\\n' $i > module_$i.py; done
git add -A
GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z \\
  git -c user.name=seed -c user.email=seed@example.com commit -qm seed
git rev-parse HEAD
"""
"""The same first commit in every sandbox (fixed names and dates): the session's base."""


class Counted:
    """The blobs port, counting the bytes written and read through it (``bytes``)."""

    def __init__(self, blobs: Blobs) -> None:
        self.blobs = blobs
        self.bytes = 0

    def put(self, key: str, data: bytes | Iterable[bytes], *, if_absent: bool = False) -> int:
        size = self.blobs.put(key, data, if_absent=if_absent)
        self.bytes += size
        return size

    @contextmanager
    def open(self, key: str) -> Iterator[BinaryIO]:
        with self.blobs.open(key) as stream:
            data = stream.read()
        self.bytes += len(data)
        yield io.BytesIO(data)

    def get(self, key: str) -> bytes:
        data = self.blobs.get(key)
        self.bytes += len(data)
        return data

    def read_range(self, key: str, start: int, length: int) -> bytes:
        data = self.blobs.read_range(key, start, length)
        self.bytes += len(data)
        return data

    def exists(self, key: str) -> bool:
        return self.blobs.exists(key)

    def delete(self, key: str) -> None:
        self.blobs.delete(key)

    def list(self, prefix: str = "") -> list[str]:
        return self.blobs.list(prefix)

    def url_signer(self) -> SignsUrls | None:
        return url_signer(self.blobs)


@dataclass
class World:
    settings: Settings
    gcs: FakeGcs
    cluster: StandInCluster
    db: SqliteDb
    blobs: Counted
    sandboxes: Any
    checkpointer: Checkpointer
    restorer: Restorer
    session: Session

    def sandbox(self, *, crypto: bool = True) -> tuple[str, str]:
        """A ready pod with hangar's scripts and cryptography (``crypto``: else a pod whose
        image cannot seal) and the seed repo; (id, base)."""
        info = self.sandboxes.create(SandboxSpec(labels={"hangar.session": self.session.id}))
        status = self.sandboxes.await_status(info.id, 120)
        assert status.state is SandboxState.READY, status
        agent.install(self.sandboxes, info.id)
        if crypto:
            probe = install_crypto(self.sandboxes, info.id, self.settings)
            assert probe.available, probe.reason
        return info.id, self.sh(info.id, SEED, cwd="/").strip()

    def sh(self, sandbox_id: str, script: str, cwd: str = REPO) -> str:
        result = self.sandboxes.exec(sandbox_id, ["bash", "-c", script], cwd=cwd)
        assert result.ok, result.stderr.decode()
        return str(result.stdout.decode())

    def target(self, sandbox_id: str, base: str) -> CheckpointTarget:
        return CheckpointTarget(session_id=self.session.id, sandbox_id=sandbox_id, repo_dir=REPO,
                                base=base, harness="claude", harness_session="conv")  # fmt: skip

    def take(self, sandbox_id: str, base: str) -> Checkpoint:
        checkpoint = self.checkpointer.take(self.target(sandbox_id, base), CheckpointReason.TURN)
        assert checkpoint is not None
        return checkpoint

    def objects(self) -> list[str]:
        return self.blobs.list("")


@contextmanager
def direct_world(root: Path, *, direct: bool = True) -> Iterator[World]:
    """The world of the module's contract; ``direct=False``: the same, its checkpoints through
    the control plane (``HANGAR_CHECKPOINT_DIRECT=false``)."""
    saved = {k: os.environ.get(k) for k in ("KUBECONFIG", "STORAGE_EMULATOR_HOST")}
    with FakeGcs(front=True) as gcs, IamStandIn() as iam:
        gcs.create_bucket(BUCKET)
        gcs.trust(SIGNER, iam.add_account(SIGNER).public_key_pem)
        port = urlsplit(gcs.signed_url).port
        assert port is not None
        with StandInCluster(None, [port]) as cluster:
            os.environ.update(KUBECONFIG=cluster.kube.kubeconfig, **gcs.environment())
            db = SqliteDb.from_url(f"sqlite://{root / 'hangar.db'}")
            try:
                settings = Settings.build(
                    data_dir=root / "data", harness_dir=root / "harnesses",
                    session_store=f"gs://{BUCKET}/{root.name}", sandboxes=cluster.sandboxes_url(),
                    signing_service_account=SIGNER, iam_endpoint=iam.url,
                    signed_url_endpoint=gcs.signed_url, checkpoint_direct=direct,
                )  # fmt: skip
                blobs = Counted(open_blobs(settings.session_store, settings))
                keys = LocalKeys.from_url(settings.keys)
                sandboxes = open_sandboxes(settings.sandboxes, settings)
                session = db.create_session(Session(name="direct", environment="app",
                                                    harness="claude"))  # fmt: skip
                yield World(settings, gcs, cluster, db, blobs, sandboxes,
                            Checkpointer(db, blobs, keys, sandboxes, settings),
                            Restorer(db, blobs, keys, sandboxes, settings), session)  # fmt: skip
            finally:
                db.close()
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value

