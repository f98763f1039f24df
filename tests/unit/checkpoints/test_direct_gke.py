"""Direct checkpoints on ``gke://`` sandboxes (the Kubernetes stand-in), GCS behind the verifying
front, URLs signed through the IAM stand-in: the sandbox seals and uploads, the control plane
grants and checks (:mod:`hangar.checkpoints.direct`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hangar.errors import CheckpointError
from tests.direct_rig import REPO, World, direct_world

pytestmark = [pytest.mark.sandbox]

WORK = """set -e
echo 'def g():\n    return 42' > module_1.py && git add -A
git -c user.name=a -c user.email=a@example.com commit -qm 'agent commit'
echo 'uncommitted' >> module_2.py
head -c 300000 /dev/urandom > blob.bin && echo note > notes.txt
mkdir -p ~/.claude/projects/app && echo '{"turn": 1}' > ~/.claude/projects/app/conv.jsonl
"""
STATE = """cd /workspace/app && git log --format=%s && git status --porcelain=v1 | sort
sha256sum blob.bin notes.txt module_1.py module_2.py && cat ~/.claude/projects/app/conv.jsonl"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with direct_world(tmp_path_factory.mktemp("direct")) as running:
        yield running


def test_a_direct_checkpoint_restores_in_a_fresh_pod_and_no_byte_of_it_passes_the_control_plane(
    world: World,
) -> None:
    first, base = world.sandbox()
    world.sh(first, WORK)
    before = world.blobs.bytes
    checkpoint = world.take(first, base)
    assert world.blobs.bytes == before  # every byte went straight to the bucket
    assert checkpoint.format == 2 and checkpoint.written > 300000
    assert checkpoint.parts[0].key in checkpoint.packs
    assert set(checkpoint.packs) <= set(world.objects())

    second, _ = world.sandbox()
    before = world.blobs.bytes
    report = world.restorer.restore(world.session.id, second, REPO)
    assert report is not None and report.checkpoint.id == checkpoint.id and not report.skipped
    assert world.blobs.bytes == before
    assert world.sh(second, STATE, cwd="/") == world.sh(first, STATE, cwd="/")

    # The next turn's checkpoint reuses what the bucket holds: only the edit travels.
    world.sh(first, "echo 'one more line' >> notes.txt")
    again = world.take(first, base)
    assert again.source == checkpoint.id and 0 < again.written < 20000


def _tampering(world: World, tamper: Any) -> Iterator[None]:
    """Runs ``tamper(keys written)`` on the bucket right after the next checkpoint's exec."""
    exec_ = world.sandboxes.exec

    def exec_then_tamper(sandbox_id: str, argv: list[str], **options: Any) -> Any:
        before = set(world.objects())
        result = exec_(sandbox_id, argv, **options)
        if "checkpoint" in argv:
            tamper(sorted(set(world.objects()) - before))
        return result

    world.sandboxes.exec = exec_then_tamper
    try:
        yield
    finally:
        del world.sandboxes.exec


@pytest.mark.parametrize("how", ["skipped", "altered"])
def test_an_upload_the_sandbox_skips_or_alters_leaves_no_checkpoint_recorded(
    world: World, how: str
) -> None:
    sandbox, base = world.sandbox()
    world.sh(sandbox, WORK)
    kept = world.db.list_checkpoints(world.session.id)
    before = set(world.objects())

    def tamper(written: list[str]) -> None:
        assert written, "the sandbox wrote nothing"
        if how == "skipped":
            world.blobs.blobs.delete(written[0])
        else:
            world.blobs.blobs.put(written[0], b"not what the sandbox sealed")

    with pytest.raises(CheckpointError, match="sandbox says it wrote|not what the sandbox"):
        for _ in _tampering(world, tamper):
            world.take(sandbox, base)
    assert world.db.list_checkpoints(world.session.id) == kept
    assert set(world.objects()) == before  # every granted key deleted

