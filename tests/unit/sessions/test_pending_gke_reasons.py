"""A session's start over a sandbox whose readiness is a claim's on the Kubernetes stand-in:
the start's phase shows the cluster's start-up reason while it lasts (``adding a node to the
cluster``) and moves on once the sandbox is ready, and an image that cannot be pulled fails the
start in its first wait with the registry's error. Each sandbox is a local one (the session's
work runs there) paired with a ``gke://`` claim that answers its status."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import SessionState, StartStep
from hangar.sandboxes import SandboxInfo, SandboxSpec, SandboxStatus
from hangar.sandboxes.gke import GkeSandboxes
from hangar.sandboxes.local import LocalSandboxes

from emulators.kube import KubeStandIn
from tests.unit.sandboxes.test_gke import stand_in
from tests.unit.sessions.world import TURN_ONE, World, make_world

__all__ = ["stand_in"]  # a fixture, used by name

pytestmark = pytest.mark.sandbox


class ClaimedOnTheStandIn:
    """The local backend, but each sandbox's status is that of a claim made with it on the
    stand-in (its claim's condition and its pod's events); ``awaited`` counts the waits."""

    def __init__(self, local: LocalSandboxes, gke: GkeSandboxes) -> None:
        self.local = local
        self.gke = gke
        self.claims: dict[str, str] = {}
        self.awaited = 0

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        info = self.local.create(spec)
        self.claims[info.id] = self.gke.create(
            SandboxSpec(labels={"t": uuid.uuid4().hex})
        ).id
        return info

    def status(self, sandbox_id: str) -> SandboxStatus:
        self.local.status(sandbox_id)
        return self.gke.status(self.claims[sandbox_id])

    def await_status(self, sandbox_id: str, timeout: float) -> SandboxStatus:
        self.awaited += 1
        return self.gke.await_status(self.claims[sandbox_id], timeout)

    def destroy(self, sandbox_id: str) -> None:
        self.local.destroy(sandbox_id)
        if sandbox_id in self.claims:
            self.gke.destroy(self.claims.pop(sandbox_id))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.local, name)


@pytest.fixture
def gke(stand_in: KubeStandIn, tmp_path: Path) -> Iterator[GkeSandboxes]:
    url = f"gke://{stand_in.context}/default?image=hangar-test/env:1"
    settings = Settings.build(data_dir=tmp_path / "gke", sandboxes=url)
    backend = GkeSandboxes.from_url(url, settings)
    yield backend
    stand_in.set_knobs(node_scale_up=False, image_pull_failure=False)
    for info in backend.list():
        backend.destroy(info.id)


def world_over(tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path,
               gke: GkeSandboxes) -> Iterator[tuple[World, ClaimedOnTheStandIn]]:  # fmt: skip
    made: list[ClaimedOnTheStandIn] = []

    def wrap(local: LocalSandboxes) -> ClaimedOnTheStandIn:
        made.append(ClaimedOnTheStandIn(local, gke))
        return made[0]

    # a short lease: each start step waits a third of it for the sandbox
    for world in make_world(
        tmp_path, db, blobs, keys, remote, wrap=wrap, claim_lease_seconds=3
    ):
        yield world, made[0]


def phase_of(world: World) -> tuple[str, str]:
    phase = world.service.resolve("demo").phase
    return (phase.step.value, phase.detail) if phase else ("", "")


def test_the_start_shows_adding_a_node_while_the_cluster_adds_one_then_moves_on(
    tmp_path: Path,
    db: SqliteDb,
    blobs: LocalBlobs,
    keys: LocalKeys,
    remote: Path,
    gke: GkeSandboxes,
    stand_in: KubeStandIn,
) -> None:
    for world, _backend in world_over(tmp_path, db, blobs, keys, remote, gke):
        stand_in.set_knobs(node_scale_up=True)
        world.service.new("demo", TURN_ONE, "app", harness="antigravity")
        waiting = (StartStep.CREATING_SANDBOX.value, "adding a node to the cluster")
        deadline = time.monotonic() + 60
        while phase_of(world) != waiting:
            assert time.monotonic() < deadline, phase_of(world)
            time.sleep(0.05)
        stand_in.set_knobs(node_scale_up=False)
        turn = world.service.wait("demo", timeout=60, poll=0.05)
        assert turn.outcome is not None and turn.outcome.value == "exited", turn
        assert world.service.resolve("demo").state is SessionState.IDLE
        assert phase_of(world)[1] != waiting[1]  # cleared once the sandbox was ready


def test_an_image_that_cannot_be_pulled_fails_the_start_in_its_first_wait_with_its_reason(
    tmp_path: Path,
    db: SqliteDb,
    blobs: LocalBlobs,
    keys: LocalKeys,
    remote: Path,
    gke: GkeSandboxes,
    stand_in: KubeStandIn,
) -> None:
    for world, backend in world_over(tmp_path, db, blobs, keys, remote, gke):
        stand_in.set_knobs(image_pull_failure=True)
        world.service.new("demo", TURN_ONE, "app", harness="antigravity")
        session = world.settle("demo")
        assert session.state is SessionState.FAILED and session.start_error is not None
        assert session.start_error.step is StartStep.CREATING_SANDBOX
        assert "the image hangar-test/env:1 cannot be pulled (ErrImagePull): rpc error: code = " \
            "NotFound" in session.start_error.message  # fmt: skip
        assert backend.awaited <= 2  # not a wait per tick until the start timeout
