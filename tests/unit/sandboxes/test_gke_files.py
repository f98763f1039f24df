"""Files into and out of a ``gke://`` sandbox on the stand-in: a 50 MB file goes in with one
streamed exec (no chunks, no second copy in memory of the client's), and comes back whole."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hangar.config import Settings
from hangar.sandboxes import SandboxSpec, SandboxState, SandboxUser
from hangar.sandboxes.gke import GkeSandboxes

from emulators.kube.cluster import StandInCluster

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandInCluster]:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap (bwrap) is not installed: the stand-in's pods need it",
                    pytrace=False)  # fmt: skip
    with StandInCluster() as running, pytest.MonkeyPatch.context() as patch:
        patch.setenv("KUBECONFIG", running.kube.kubeconfig)
        yield running


class _Hashing:
    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.count = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.count += len(data)
        return len(data)


def test_a_fifty_megabyte_file_goes_in_with_one_streamed_exec_and_comes_back_whole(
    cluster: StandInCluster, tmp_path: Path
) -> None:
    settings = Settings.build(data_dir=tmp_path, sandboxes=cluster.sandboxes_url())
    sandboxes = GkeSandboxes.from_url(settings.sandboxes, settings)
    info = sandboxes.create(SandboxSpec(labels={"files": "1"}, pool="files"))
    try:
        deadline = time.monotonic() + 60
        while sandboxes.status(info.id).state is not SandboxState.READY:
            assert time.monotonic() < deadline, "the pod was not ready in 60 s"
            time.sleep(0.05)
        sandboxes.exec(info.id, ["true"])  # the pod found: the put alone is counted below
        source = tmp_path / "big.bin"
        block = os.urandom(1 << 20)
        with open(source, "wb") as out:
            for _ in range(50):
                out.write(block)
        before = cluster.kube.server.requests
        with open(source, "rb") as data:
            sandboxes.put_file(info.id, "/workspace/big.bin", data, user=SandboxUser.AGENT)
        assert cluster.kube.server.requests - before == 1
        back = _Hashing()
        assert sandboxes.get_file(info.id, "/workspace/big.bin", back) == 50 << 20  # type: ignore[arg-type]
        assert back.hash.hexdigest() == hashlib.sha256(block * 50).hexdigest()
    finally:
        sandboxes.destroy(info.id)
