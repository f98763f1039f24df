"""``await_status`` on ``gke://`` sandboxes, on the stand-in: a pending claim is waited for
with one watch (no polling), a watch whose resourceVersion expires mid-wait (410 Gone) is
resumed from a fresh read, a claim deleted meanwhile is gone, and a claim still pending at
the timeout answers its pending status. Requests are counted, never times."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterator

import pytest
from hangar.errors import SandboxNotFound
from hangar.sandboxes import SandboxSpec, SandboxState, SandboxStatus
from hangar.sandboxes.gke import manifests as objects
from hangar.sandboxes.gke import GkeSandboxes

from emulators.kube import KubeStandIn, kinds
from tests.unit.sandboxes.test_gke import _counted, _wait, sandboxes, sandboxes_settings
from tests.unit.sandboxes.test_gke import stand_in

__all__ = ["sandboxes", "sandboxes_settings", "stand_in"]  # fixtures, used by name

pytestmark = pytest.mark.sandbox

CLAIM = f"/apis/{objects.EXTENSIONS_GROUP}/{objects.VERSION}/namespaces/default/sandboxclaims"
EVENTS = "GET /api/v1/namespaces/default/events"


def _claims(calls: list[str]) -> list[str]:
    """The requests about the claim (a pending claim's pod events read aside)."""
    return [c for c in calls if c != EVENTS]


@pytest.fixture
def slow_pods(stand_in: KubeStandIn) -> Iterator[KubeStandIn]:
    """Pods that turn ready only a while after they are made (the knob put back after)."""
    stand_in.set_knobs(ready_delay=2.0)
    try:
        yield stand_in
    finally:
        stand_in.set_knobs(ready_delay=0.0)
        stand_in.store.set_history(1000)


def _in_background(sandboxes: GkeSandboxes, sandbox_id: str, timeout: float
                   ) -> queue.Queue[SandboxStatus | Exception]:  # fmt: skip
    answer: queue.Queue[SandboxStatus | Exception] = queue.Queue()

    def wait() -> None:
        try:
            answer.put(sandboxes.await_status(sandbox_id, timeout))
        except Exception as exc:  # handed to the test, which asserts on it
            answer.put(exc)

    threading.Thread(target=wait, daemon=True).start()
    return answer


def test_a_pending_claim_is_seen_ready_by_one_read_and_one_watch(
    sandboxes: GkeSandboxes, slow_pods: KubeStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}))
    calls = _counted(sandboxes, monkeypatch)
    served = slow_pods.server.requests
    status = sandboxes.await_status(info.id, 60)
    assert status == SandboxStatus(SandboxState.READY)
    assert _claims(calls) == [f"GET {CLAIM}/{info.id}", f"GET {CLAIM}"]  # the read, the watch
    assert calls.count(EVENTS) <= 1  # before the watch, if the claim already held a sandbox
    assert slow_pods.server.requests - served == len(calls)
    assert sandboxes.exec(info.id, ["true"]).ok


def test_a_watch_that_expires_mid_wait_is_resumed_from_a_fresh_read(
    sandboxes: GkeSandboxes, slow_pods: KubeStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_pods.set_knobs(ready_delay=600.0)  # pending until the test says otherwise
    info = sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}))
    calls = _counted(sandboxes, monkeypatch)
    answer = _in_background(sandboxes, info.id, 120)
    _wait(lambda: len(_claims(calls)) == 2)  # the read, then the watch asked for
    # No history kept: the next change drops every event the watch could resume from.
    slow_pods.store.set_history(0)
    slow_pods.store.create(kinds.NAMESPACES.resource, "", {"metadata": {
        "name": f"expire-{uuid.uuid4().hex[:8]}"}})  # fmt: skip
    slow_pods.store.set_history(1000)
    _wait(lambda: len(_claims(calls)) == 4 or not answer.empty())  # read again, watched again
    assert answer.empty(), answer.get()
    slow_pods.set_knobs(ready_delay=0.0)
    status = answer.get(timeout=60)
    assert status == SandboxStatus(SandboxState.READY)
    # the claim, its watch; after the 410 a list of it (the server's resourceVersion), a watch
    assert _claims(calls) == [f"GET {CLAIM}/{info.id}", f"GET {CLAIM}", f"GET {CLAIM}", f"GET {CLAIM}"]


def test_a_claim_deleted_while_it_is_awaited_is_not_found(
    sandboxes: GkeSandboxes, slow_pods: KubeStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_pods.set_knobs(ready_delay=600.0)
    info = sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}))
    calls = _counted(sandboxes, monkeypatch)
    answer = _in_background(sandboxes, info.id, 120)
    _wait(lambda: len(_claims(calls)) == 2)
    slow_pods.store.delete(kinds.CLAIMS.resource, "default", info.id)
    gone = answer.get(timeout=60)
    assert isinstance(gone, SandboxNotFound), gone
    assert gone.data["sandbox_id"] == info.id


def test_a_claim_still_pending_at_the_timeout_answers_its_pending_reason(
    sandboxes: GkeSandboxes, slow_pods: KubeStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_pods.set_knobs(ready_delay=600.0)
    info = sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}))
    calls = _counted(sandboxes, monkeypatch)
    status = sandboxes.await_status(info.id, 1)
    assert status.state is SandboxState.PENDING and status.reason, status
    assert _claims(calls) == [f"GET {CLAIM}/{info.id}", f"GET {CLAIM}"]
    with pytest.raises(SandboxNotFound):
        sandboxes.await_status("hangar-00000000", 1)
