"""Warm pools on ``gke://`` sandboxes, on the stand-in: ``keep_pool`` makes a missing pool (and
its template) at the replicas asked and sets them only when they differ; environments'
pools kept by the session service (prebuilt at start, applied at once when an environment
changes, scaled to 0 when it goes). Requests are counted, never times."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import InvalidInput
from hangar.keys.local import LocalKeys
from hangar.operations import environments as operations
from hangar.operations import wire as w
from hangar.sandboxes.gke import manifests as objects
from hangar.sandboxes.gke import GkeSandboxes
from hangar.sessions.service import SessionService

from emulators.kube import KubeStandIn
from tests.unit.sandboxes.test_gke import IMAGE, _counted, _get, _names, _wait, sandboxes
from tests.unit.sandboxes.test_gke import sandboxes_settings, stand_in
from tests.unit.sessions.world import FakeTicks

__all__ = ["sandboxes", "sandboxes_settings", "stand_in"]  # fixtures, used by name

pytestmark = [pytest.mark.sandbox,
              pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")]


def _pool(backend: GkeSandboxes, env: str) -> dict[str, Any]:
    return _get(backend, objects.POOLS, objects.pool_name(env))


def _scale_down(backend: GkeSandboxes, *envs: str) -> None:
    for env in envs:
        backend.keep_pool(env, image=None, replicas=0)


def test_keep_pool_makes_a_missing_pool_and_its_template_at_the_replicas_asked(
    sandboxes: GkeSandboxes,
) -> None:
    env = f"env-{uuid.uuid4().hex[:6]}"
    try:
        state = sandboxes.keep_pool(env, image=f"{IMAGE}-pool", replicas=1)
        assert (state.pool, state.replicas) == (env, 1)
        pool = _pool(sandboxes, env)
        assert pool["spec"]["replicas"] == 1
        template = pool["spec"]["sandboxTemplateRef"]["name"]
        selector = f"{objects.POOL_LABEL}={objects.pool_name(env)}"
        assert _names(sandboxes, objects.TEMPLATES, selector) == [template]
        _wait(lambda: sandboxes.keep_pool(env, image=None, replicas=1).ready == 1)
    finally:
        _scale_down(sandboxes, env)
    assert _pool(sandboxes, env)["spec"]["replicas"] == 0


def test_keep_pool_with_the_count_it_has_makes_one_read_and_a_new_count_one_patch(
    sandboxes: GkeSandboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = f"env-{uuid.uuid4().hex[:6]}"
    sandboxes.keep_pool(env, image=IMAGE, replicas=0)
    calls = _counted(sandboxes, monkeypatch)
    sandboxes.keep_pool(env, image=IMAGE, replicas=0)
    assert [c.split()[0] for c in calls] == ["GET"]
    calls.clear()
    try:
        assert sandboxes.keep_pool(env, image=IMAGE, replicas=2).replicas == 2
        assert [c.split()[0] for c in calls] == ["GET", "PATCH"]
    finally:
        _scale_down(sandboxes, env)


def test_keep_pool_of_a_missing_pool_with_no_image_anywhere_is_invalid_input_making_nothing(
    stand_in: KubeStandIn, sandboxes_settings: Settings
) -> None:
    backend = GkeSandboxes.from_url(f"gke://{stand_in.context}/default", sandboxes_settings)
    env = f"env-{uuid.uuid4().hex[:6]}"
    with pytest.raises(InvalidInput, match="image"):
        backend.keep_pool(env, image=None, replicas=1)
    with pytest.raises(ApiException) as missing:
        _pool(backend, env)
    assert missing.value.status == 404
    with pytest.raises(InvalidInput, match="at least 0"):
        backend.keep_pool(env, image=IMAGE, replicas=-1)


# -- environments' pools, through the session service -----------------------------------------


@pytest.fixture
def service(sandboxes_settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
            sandboxes: GkeSandboxes) -> Iterator[SessionService]:  # fmt: skip
    settings = sandboxes_settings.replace(prebuild_environments="built, nosuch")
    made = SessionService(settings, db, blobs, keys, sandboxes, FakeTicks())
    yield made
    for env in made.environments.list():
        _scale_down(sandboxes, env.name)


def test_prebuilt_environments_have_their_templates_and_pools_made_at_start(
    service: SessionService, sandboxes: GkeSandboxes, remote: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    service.environments.add("built", str(remote), warm_pool=1)
    service.environments.add("plain", str(remote))
    assert service.prebuild() == ["built"]
    assert "HANGAR_PREBUILD_ENVIRONMENTS names no environment nosuch" in caplog.text
    pool = _pool(sandboxes, "built")
    assert pool["spec"]["replicas"] == 1
    template = pool["spec"]["sandboxTemplateRef"]["name"]
    assert _get(sandboxes, objects.TEMPLATES, template)["spec"]["podTemplate"]
    _wait(lambda: sandboxes.keep_pool("built", image=None, replicas=1).ready == 1)
    with pytest.raises(ApiException) as missing:
        _pool(sandboxes, "plain")  # not prebuilt, no warm pool: made by its first session
    assert missing.value.status == 404


def test_an_environments_warm_pool_follows_its_changes_through_the_operations(
    service: SessionService, sandboxes: GkeSandboxes, sandboxes_settings: Settings,
    remote: Path,
) -> None:  # fmt: skip
    runtime: Any = SimpleNamespace(settings=sandboxes_settings, sessions=service)
    service.pools.clock = lambda: datetime(2026, 12, 7, 21, tzinfo=UTC)  # a Monday, 21:00
    name = f"env-{uuid.uuid4().hex[:6]}"
    view = operations.add(runtime, w.NewEnvironment(
        name=name, repo=f"file://{remote}", warm_pool=2, warm_pool_hours="mon-fri 08:00-20:00 utc"))
    assert (view.warm_pool, view.warm_pool_hours) == (2, "Mon-Fri 08:00-20:00 UTC")
    assert _pool(sandboxes, name)["spec"]["replicas"] == 0  # outside its hours
    ticks = service.ticks
    assert isinstance(ticks, FakeTicks)
    assert ticks.due[f"pool:{name}"].due_at == datetime(2026, 12, 8, 8, tzinfo=UTC)
    changed = operations.update(runtime, name, w.EnvironmentPatch(warm_pool_hours=None))
    assert changed.warm_pool_hours is None and f"pool:{name}" not in ticks.due
    assert _pool(sandboxes, name)["spec"]["replicas"] == 2  # always, now
    assert [v.warm_pool for v in operations.list_all(runtime) if v.name == name] == [2]
    operations.delete(runtime, name)
    assert _pool(sandboxes, name)["spec"]["replicas"] == 0
