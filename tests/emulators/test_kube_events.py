"""The stand-in's core/v1 Events, read with the official client as a program reads a cluster's:
each start-up knob makes the pod carry the events a real cluster records (reason, source,
message format), listed by ``involvedObject`` field selectors and watched."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from emulators.kube import KubeStandIn
from tests.emulators.test_kube_standin import (
    api,
    claim,
    create,
    is_ready,
    ns,
    ready_pool,
    wait_for,
)

__all__ = ["api", "ns"]  # fixtures, used by name

EXPECTED = {
    "node_scale_up": [("FailedScheduling", "default-scheduler", "0/3 nodes are available: 3 Insufficient cpu."),
                      ("TriggeredScaleUp", "cluster-autoscaler", "pod triggered scale-up: [{")],
    "quota_exhausted": [("FailedScaleUp", "cluster-autoscaler", "failed: GCE quota exceeded. Pod is at risk"),
                        ("NotTriggerScaleUp", "cluster-autoscaler",
                         "pod didn't trigger scale-up: 1 in backoff after failed scale-up")],
    "image_pull_failure": [("Pulling", "kubelet", 'Pulling image "example/env:1"'),
                           ("Failed", "kubelet", ('Failed to pull image "example/env:1": rpc error: '
                                                 "code = NotFound")),
                           ("Failed", "kubelet", "Error: ErrImagePull"),
                           ("BackOff", "kubelet", 'Back-off pulling image "example/env:1"')],
}  # fmt: skip


@pytest.fixture
def stand_in() -> Iterator[KubeStandIn]:
    with KubeStandIn() as server:
        yield server


def pod_events(api: client.ApiClient, ns: str, pod: str) -> list[Any]:
    found = client.CoreV1Api(api).list_namespaced_event(
        ns, field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}"
    )
    return list(found.items)


def wait_events(
    api: client.ApiClient, ns: str, pod: str, reason: str, timeout: float = 20
) -> list[Any]:
    """The pod's events once one has ``reason`` (bounded wait)."""
    deadline = time.monotonic() + timeout
    while True:
        events = pod_events(api, ns, pod)
        if any(e.reason == reason for e in events):
            return events
        assert time.monotonic() < deadline, f"no {reason} event on {pod}: {events}"
        time.sleep(0.05)


@pytest.mark.parametrize("knob", sorted(EXPECTED))
def test_a_start_up_knob_gives_the_pod_the_events_a_cluster_records(
    stand_in: KubeStandIn, api: client.ApiClient, ns: str, knob: str
) -> None:
    ready_pool(api, ns, replicas=0)
    stand_in.set_knobs(**{knob: True})
    create(api, ns, "sandboxclaims", claim("k"))
    last = EXPECTED[knob][-1][0]
    events = wait_events(api, ns, "k", last)
    said = [(e.reason, e.source.component, e.message, e.type) for e in events]
    for reason, component, text in EXPECTED[knob]:
        assert any(
            r == reason and c == component and text in m for r, c, m, _ in said
        ), said
    assert all(
        e.involved_object.kind == "Pod" and e.involved_object.name == "k"
        for e in events
    )
    assert {t for *_, t in said} <= {"Normal", "Warning"}


def test_a_named_quota_is_named_in_the_failed_scale_up(
    stand_in: KubeStandIn, api: client.ApiClient, ns: str
) -> None:
    ready_pool(api, ns, replicas=0)
    stand_in.set_knobs(quota_exhausted="SSD_TOTAL_GB")
    create(api, ns, "sandboxclaims", claim("q"))
    events = wait_events(api, ns, "q", "FailedScaleUp")
    failed = next(e for e in events if e.reason == "FailedScaleUp")
    assert (
        "Quota 'SSD_TOTAL_GB' exceeded" in failed.message and failed.type == "Warning"
    )


def test_a_pod_that_starts_records_pulled_created_and_started_after_pulling(
    api: client.ApiClient, ns: str
) -> None:
    ready_pool(api, ns, replicas=0)
    create(api, ns, "sandboxclaims", claim("ok"))
    assert is_ready(wait_for(api, ns, "sandboxclaims", lambda c: c["metadata"]["name"] == "ok"
                             and is_ready(c)))  # fmt: skip
    events = wait_events(api, ns, "ok", "Started")
    reasons = [
        e.reason for e in sorted(events, key=lambda e: int(e.metadata.resource_version))
    ]
    assert reasons == ["Scheduled", "Pulling", "Pulled", "Created", "Started"]


def test_a_cleared_knob_lets_the_pod_start_and_its_later_events_say_so(
    stand_in: KubeStandIn, api: client.ApiClient, ns: str
) -> None:
    ready_pool(api, ns, replicas=0)
    stand_in.set_knobs(node_scale_up=True)
    create(api, ns, "sandboxclaims", claim("n"))
    wait_events(api, ns, "n", "TriggeredScaleUp")
    stand_in.set_knobs(node_scale_up=False)
    events = wait_events(api, ns, "n", "Started")
    reasons = [
        e.reason for e in sorted(events, key=lambda e: int(e.metadata.resource_version))
    ]
    assert (
        reasons.index("TriggeredScaleUp")
        < reasons.index("Scheduled")
        < reasons.index("Pulled")
    )


def test_events_are_watched_by_field_selector_and_another_pods_are_not_seen(
    stand_in: KubeStandIn, api: client.ApiClient, ns: str
) -> None:
    core = client.CoreV1Api(api)
    rv = core.list_namespaced_event(ns).metadata.resource_version
    ready_pool(api, ns, replicas=0)
    create(api, ns, "sandboxclaims", claim("w1"))
    create(api, ns, "sandboxclaims", claim("w2"))
    w = watch.Watch()
    seen: list[str] = []
    for event in w.stream(core.list_namespaced_event, ns, resource_version=rv, timeout_seconds=20,
                          field_selector="involvedObject.name=w2"):  # fmt: skip
        seen.append(event["object"].involved_object.name)
        if event["object"].reason == "Started":
            w.stop()
    assert seen and set(seen) == {"w2"}


def test_an_unknown_event_field_label_is_refused(
    api: client.ApiClient, ns: str
) -> None:
    with pytest.raises(client.ApiException) as exc:
        client.CoreV1Api(api).list_namespaced_event(
            ns, field_selector="involvedObject.fieldPath=x"
        )
    assert exc.value.status == 400
