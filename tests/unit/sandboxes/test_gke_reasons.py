"""Start-up reasons of ``gke://`` sandboxes on the stand-in, told to produce each: while the
pod waits for a node, a Google Cloud quota or its image, the backend's status says so (read
from the pod's events), the reason is gone once the sandbox is ready, and an image that
cannot be pulled fails at once with the registry's error. A ready claim costs no events
read."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hangar.sandboxes import SandboxSpec, SandboxState, SandboxStatus
from hangar.sandboxes.gke import GkeSandboxes

from emulators.kube import KubeStandIn
from tests.unit.sandboxes.test_gke import (
    IMAGE,
    _counted,
    sandboxes,
    sandboxes_settings,
    stand_in,
)

__all__ = ["sandboxes", "sandboxes_settings", "stand_in"]  # fixtures, used by name

pytestmark = pytest.mark.sandbox

EVENTS = "GET /api/v1/namespaces/default/events"


@pytest.fixture
def knobs(stand_in: KubeStandIn) -> Iterator[Callable[..., Any]]:
    """Set the stand-in's knobs for one test; all put back after."""
    yield stand_in.set_knobs
    stand_in.set_knobs(ready_delay=0.0, image_pull_failure=False, quota_exhausted=False,
                       node_scale_up=False)  # fmt: skip


def until(sandboxes: GkeSandboxes, sandbox_id: str, test: Callable[[SandboxStatus], bool],
          seconds: float = 30) -> SandboxStatus:  # fmt: skip
    """The backend's status once ``test`` passes (bounded wait)."""
    deadline = time.monotonic() + seconds
    while True:
        status = sandboxes.status(sandbox_id)
        if test(status):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def spec() -> SandboxSpec:
    return SandboxSpec(labels={"conformance": uuid.uuid4().hex})


@pytest.mark.parametrize(
    ("knob", "value", "reason"),
    [("node_scale_up", True, "adding a node to the cluster"),
     ("quota_exhausted", True, "a Google Cloud quota is exhausted"),
     ("quota_exhausted", "SSD_TOTAL_GB", "a Google Cloud quota is exhausted (SSD_TOTAL_GB)"),
     ("ready_delay", 600.0, f"pulling the image {IMAGE}")],
)  # fmt: skip
def test_a_start_up_reason_is_shown_while_it_lasts_and_cleared_after(
    sandboxes: GkeSandboxes,
    knobs: Callable[..., Any],
    knob: str,
    value: Any,
    reason: str,
) -> None:
    knobs(**{knob: value})
    info = sandboxes.create(spec())
    shown = until(sandboxes, info.id, lambda s: s.reason == reason)
    assert shown.state is SandboxState.PENDING
    assert sandboxes.await_status(info.id, 0) == shown  # the wait says it too
    knobs(**{knob: 0.0 if knob == "ready_delay" else False})
    assert sandboxes.await_status(info.id, 60) == SandboxStatus(SandboxState.READY)
    assert sandboxes.status(info.id) == SandboxStatus(SandboxState.READY)


def test_an_image_that_cannot_be_pulled_fails_the_wait_at_once_with_the_registrys_error(
    sandboxes: GkeSandboxes, knobs: Callable[..., Any]
) -> None:
    knobs(image_pull_failure=True)
    info = sandboxes.create(spec())
    status = sandboxes.await_status(info.id, 600)
    assert status.state is SandboxState.FAILED, status
    assert status.reason.startswith(
        f"the image {IMAGE} cannot be pulled (ErrImagePull): rpc error: code = NotFound"
    )


def test_a_ready_claim_costs_no_events_read(
    sandboxes: GkeSandboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = sandboxes.create(spec())
    assert sandboxes.await_status(info.id, 60).state is SandboxState.READY
    calls = _counted(sandboxes, monkeypatch)
    assert sandboxes.status(info.id) == SandboxStatus(SandboxState.READY)
    assert sandboxes.await_status(info.id, 5) == SandboxStatus(SandboxState.READY)
    assert EVENTS not in calls and len(calls) == 2


def test_a_pending_claim_costs_one_events_list_per_look(
    sandboxes: GkeSandboxes, knobs: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    knobs(node_scale_up=True)
    info = sandboxes.create(spec())
    until(sandboxes, info.id, lambda s: s.reason == "adding a node to the cluster")
    calls = _counted(sandboxes, monkeypatch)
    sandboxes.status(info.id)
    assert calls.count(EVENTS) == 1 and len(calls) == 2
