"""The random trees of :mod:`tests.unit.sessions.test_random_trees`, checkpointed and restored
directly (sealed, uploaded and fetched by the pods themselves): the same trees come back on
either path."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.direct_rig import REPO, World, direct_world
from tests.unit.sessions.test_random_trees import BUILD, CHECK

pytestmark = [pytest.mark.sandbox]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with direct_world(tmp_path_factory.mktemp("trees")) as running:
        yield running


@pytest.mark.parametrize("seed", range(2))
def test_a_direct_checkpoint_of_a_random_tree_restores_with_every_plain_file(
    world: World, seed: int
) -> None:
    sandbox, base = world.sandbox()
    built = world.sandboxes.exec(sandbox, ["/usr/bin/python3", "-c", BUILD, str(seed)])
    assert built.ok, built.stderr.decode()
    before = world.blobs.bytes
    checkpoint = world.take(sandbox, base)
    fresh, _ = world.sandbox()
    world.restorer.restore_checkpoint(checkpoint, fresh, REPO)  # raises if refused
    assert world.blobs.bytes == before  # both ways direct
    checked = world.sandboxes.exec(fresh, ["/usr/bin/python3", "-c", CHECK], stdin=built.stdout)
    assert checked.ok, checked.stderr.decode()
    assert json.loads(checked.stdout) == [], checkpoint.warnings
