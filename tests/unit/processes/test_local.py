"""The process layer's conformance suite over the local (bubblewrap) sandboxes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.config import Settings
from hangar.sandboxes.local import LocalSandboxes
from hangar.testing.processes import ProcessesConformance

pytestmark = pytest.mark.sandbox


@pytest.fixture
def sandboxes_settings(tmp_path: Path) -> Settings:
    """Settings whose sandboxes URL opens the backend of ``sandboxes`` (a data folder of its
    own, secrets beside the sandboxes' root, as ~/.hangar has them)."""
    data = tmp_path / "data"
    (data / "sandboxes").mkdir(parents=True)
    (data / "vault.key").write_bytes(os.urandom(32))
    (data / "admin-token").write_text("token")
    harnesses = tmp_path / "harnesses"
    (harnesses / "bin").mkdir(parents=True)
    return Settings.build(data_dir=data, harness_dir=harnesses)


@pytest.fixture
def sandboxes(sandboxes_settings: Settings) -> Iterator[LocalSandboxes]:
    backend = LocalSandboxes.from_url(sandboxes_settings.sandboxes, sandboxes_settings)
    yield backend
    for info in backend.list():
        backend.destroy(info.id)


class TestLocalProcesses(ProcessesConformance):
    """The process layer's contract, against bubblewrap."""
