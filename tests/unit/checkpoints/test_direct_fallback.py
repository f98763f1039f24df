"""A pod that cannot seal (no cryptography its python loads) has its checkpoints and restores go
through the control plane, and either path reads what the other wrote."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.direct_rig import REPO, World, direct_world
from tests.unit.checkpoints.test_direct_gke import STATE, WORK

pytestmark = [pytest.mark.sandbox]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with direct_world(tmp_path_factory.mktemp("fallback")) as running:
        yield running


def test_a_pod_that_cannot_seal_checkpoints_through_the_control_plane_and_a_sealing_pod_restores_it(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    plain, base = world.sandbox(crypto=False)
    world.sh(plain, WORK)
    before = world.blobs.bytes
    with caplog.at_level(logging.WARNING, logger="hangar.checkpoints.checkpointer"):
        proxied = world.take(plain, base)
    assert world.blobs.bytes - before > 300000  # its bytes went through the blobs port
    assert "cannot seal" in caplog.text and proxied.format == 2

    sealing, _ = world.sandbox()
    before = world.blobs.bytes
    report = world.restorer.restore(world.session.id, sealing, REPO)
    assert report is not None and report.checkpoint.id == proxied.id
    assert world.blobs.bytes == before  # a direct restore of a proxied take
    assert world.sh(sealing, STATE, cwd="/") == world.sh(plain, STATE, cwd="/")

    # The sealing pod's next take reuses the proxied take's chunks, and the pod that cannot
    # seal restores what it wrote, through the control plane.
    world.sh(sealing, "echo 'a later line' >> notes.txt")
    direct = world.take(sealing, base)
    assert direct.source == proxied.id and direct.written < 20000
    again, _ = world.sandbox(crypto=False)
    with caplog.at_level(logging.WARNING, logger="hangar.checkpoints.restore"):
        report = world.restorer.restore(world.session.id, again, REPO)
    assert report is not None and report.checkpoint.id == direct.id
    assert "cannot open checkpoints" in caplog.text
    assert world.sh(again, STATE, cwd="/") == world.sh(sealing, STATE, cwd="/")


def test_a_direct_restore_past_the_restore_cap_is_refused_before_it_touches_the_tree(
    world: World,
) -> None:
    from hangar.checkpoints.restore import Restorer
    from hangar.errors import NoUsableCheckpoint
    from hangar.keys.local import LocalKeys

    source, base = world.sandbox()
    world.sh(source, WORK)
    world.take(source, base)
    capped = world.settings.replace(session_max_restore_mb=0.2)  # the untracked files: 0.3 MB
    restorer = Restorer(world.db, world.blobs, LocalKeys.from_url(capped.keys),
                        world.sandboxes, capped)  # fmt: skip
    fresh, _ = world.sandbox()
    before = world.blobs.bytes
    with pytest.raises(NoUsableCheckpoint, match="restore past its cap"):
        restorer.restore(world.session.id, fresh, REPO)
    assert world.blobs.bytes == before  # refused in the pod, directly
    assert "notes.txt" not in world.sh(fresh, "ls")


def test_a_direct_restore_of_a_damaged_checkpoint_falls_back_to_the_one_before_in_a_clean_tree(
    world: World,
) -> None:
    source, base = world.sandbox()
    world.sh(source, WORK)
    older = world.take(source, base)
    state = world.sh(source, STATE, cwd="/")
    world.sh(source, "echo 'a newer line' >> notes.txt && echo new > newer.txt")
    newer = world.take(source, base)
    own = [p for p in newer.packs if p not in older.packs and p != newer.parts[0].key]
    assert own, newer.packs
    damaged = bytearray(world.blobs.blobs.get(own[0]))
    damaged[len(damaged) // 2] ^= 1
    world.blobs.blobs.delete(own[0])
    world.blobs.blobs.put(own[0], bytes(damaged))

    fresh, _ = world.sandbox()
    report = world.restorer.restore(world.session.id, fresh, REPO)
    assert report is not None and report.checkpoint.id == older.id
    assert [s.checkpoint_id for s in report.skipped] == [newer.id]
    assert world.sh(fresh, STATE, cwd="/") == state
    assert "newer.txt" not in world.sh(fresh, "ls")


def test_a_direct_take_whose_source_does_not_open_sends_everything_and_restores(
    world: World,
) -> None:
    source, base = world.sandbox()
    world.sh(source, WORK)
    first = world.take(source, base)
    world.blobs.blobs.delete(first.parts[0].key)  # its manifest's root is gone
    world.sh(source, "echo 'a later line' >> notes.txt")
    second = world.take(source, base)
    assert second.written > 300000  # nothing reused: the untracked files went again
    assert not set(second.packs) & (set(first.packs) - {first.parts[0].key})
    fresh, _ = world.sandbox()
    report = world.restorer.restore(world.session.id, fresh, REPO)
    assert report is not None and report.checkpoint.id == second.id
    assert world.sh(fresh, STATE, cwd="/") == world.sh(source, STATE, cwd="/")
