"""A session's sandbox and its environment's image: a backend that runs images is given the
image in the spec at the start; one that runs none fails the start saying, in the
environment's terms, what is wrong, and makes nothing (the local backend's own refusal of a
spec naming an image is the conformance suite's)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from hangar.blobs.local import LocalBlobs
from hangar.db.sqlite import SqliteDb
from hangar.errors import SandboxCapabilityMissing
from hangar.keys.local import LocalKeys
from hangar.models import SessionState, StartStep
from hangar.sandboxes import SandboxInfo, SandboxSpec, refuse_missing
from hangar.sandboxes.local import LocalSandboxes
from hangar.sessions.environments import EnvironmentChange
from tests.unit.sessions.world import TURN_ONE, World, make_world

IMAGE = "registry.example:5000/team/agent:1.2"


class RunsImages:
    """The local backend as a backend that runs images would be: it declares the capability
    and records every spec it is given (the sandbox itself is the local one, on the host's
    system, since the local backend runs no image)."""

    capabilities = replace(LocalSandboxes.capabilities, images=True)

    def __init__(self, backend: LocalSandboxes) -> None:
        self.backend = backend
        self.specs: list[SandboxSpec] = []

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        refuse_missing(self.capabilities, spec, "images-test")
        self.specs.append(spec)
        return self.backend.create(replace(spec, image=None))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


def world_with_images(tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
                      remote: Path) -> Iterator[tuple[World, RunsImages]]:  # fmt: skip
    made: list[RunsImages] = []

    def wrap(backend: LocalSandboxes) -> RunsImages:
        made.append(RunsImages(backend))
        return made[0]

    for world in make_world(tmp_path, db, blobs, keys, remote, wrap=wrap):
        yield world, made[0]


def test_a_backend_that_runs_images_is_given_the_environments_image_at_a_sessions_start(
    tmp_path: Path, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys, remote: Path
) -> None:
    for world, backend in world_with_images(tmp_path, db, blobs, keys, remote):
        world.service.environments.update("app", EnvironmentChange(image=IMAGE))
        world.service.new("demo", TURN_ONE, "app", harness="antigravity")
        turn = world.service.wait("demo", timeout=60, poll=0.05)
        assert turn.outcome is not None and turn.outcome.value == "exited", turn
        assert [spec.image for spec in backend.specs] == [IMAGE]
        assert world.service.resolve("demo").state is SessionState.IDLE


def test_an_image_on_a_backend_that_runs_none_fails_the_start_naming_it_and_makes_nothing(
    world: World,
) -> None:
    world.service.environments.update("app", EnvironmentChange(image=IMAGE))
    world.service.new("demo", TURN_ONE, "app", harness="antigravity")
    session = world.settle("demo")
    assert session.state is SessionState.FAILED and session.start_error is not None
    assert session.start_error.step is StartStep.CREATING_SANDBOX
    assert session.start_error.code == SandboxCapabilityMissing.code
    assert f"environment app names image {IMAGE}" in session.start_error.message
    assert "sandbox backend (local) runs no container images" in session.start_error.message
    assert world.sandboxes.list() == []

