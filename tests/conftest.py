"""Fixtures shared by every test: settings in a temp data dir, the embedded backends, real
bubblewrap sandboxes, and real git repos with a bare "remote"."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.sandboxes.local import LocalSandboxes

if TYPE_CHECKING:
    from tests.rig import Engine
    from emulators.cloud import CloudEmulators

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.com",
}


def git(cwd: Path | str, *args: str) -> str:
    """Run git on the host (for building fixtures, never on checkpoint data)."""
    proc = subprocess.run(
        ["git", "-C", str(cwd), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_IDENTITY},
    )
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.build(data_dir=tmp_path / "data", harness_dir=tmp_path / "harnesses")


@pytest.fixture
def db(settings: Settings) -> Iterator[SqliteDb]:
    store = SqliteDb.from_url(settings.db)
    yield store
    store.close()


@pytest.fixture
def blobs(settings: Settings) -> LocalBlobs:
    return LocalBlobs.from_url(settings.session_store)


@pytest.fixture
def keys(settings: Settings) -> LocalKeys:
    return LocalKeys.from_url(settings.keys)


@pytest.fixture
def sandboxes(settings: Settings) -> Iterator[LocalSandboxes]:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap (bwrap) is not installed: run `make install`", pytrace=False)
    backend = LocalSandboxes.from_url(settings.sandboxes, settings)
    yield backend
    for info in backend.list():
        backend.destroy(info.id)


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A bare repo with two commits on ``main`` (its HEAD), standing in for the git server."""
    bare = tmp_path / "remote" / "app.git"
    seed = tmp_path / "seed"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(tmp_path, "init", "-q", "-b", "main", str(seed))
    for i in range(2):
        (seed / "README.md").write_text(f"# app\nrevision {i}\n")
        (seed / "src").mkdir(exist_ok=True)
        (seed / "src" / "main.py").write_text(f"print({i})\n")
        git(seed, "add", "-A")
        git(seed, "commit", "-q", "-m", f"seed {i}")
    git(seed, "push", "-q", str(bare), "main")
    return bare


@pytest.fixture
def engine(
    settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
    sandboxes: LocalSandboxes, remote: Path,
) -> Engine:  # fmt: skip
    """The checkpoint and restore engine of a session over real sandboxes (:mod:`tests.rig`)."""
    from tests.rig import make_engine  # it imports this module

    return make_engine(settings, db, blobs, keys, sandboxes, remote)


@pytest.fixture(scope="session")
def cloud_emulators() -> Iterator[CloudEmulators]:
    """The Firestore, GCS, Cloud Tasks and KMS emulators, started once for the whole run (give
    each test its own ``environment(namespace)``). A missing emulator fails, never skips."""
    from emulators.cloud import CloudEmulators
    from emulators.processes import EmulatorMissing

    emulators = CloudEmulators()
    try:
        emulators.start()
    except EmulatorMissing as exc:
        pytest.fail(f"the cloud emulators could not start: {exc}", pytrace=False)
    yield emulators
    emulators.stop()
