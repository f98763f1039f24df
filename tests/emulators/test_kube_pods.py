"""Pods of the Kubernetes stand-in backed by real local sandboxes (``KubeStandIn(sandboxes=...)``),
driven by the official client: a claim's pod runs commands, pods are apart, and a pod's sandbox
lives exactly as long as the pod (and the stand-in)."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from hangar.sandboxes import Sandboxes, SandboxInfo, SandboxSpec
from hangar.sandboxes.local import LocalSandboxes
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from emulators.kube import KubeStandIn, kinds
from emulators.kube.backing import NAMESPACE, POD, PodSandboxes
from emulators.kube.store import Store
from tests.emulators.test_kube_standin import claim, create, pool, template, wait_for

WAIT = 120  # the bound on every wait; a healthy run takes a fraction of it
Obj = dict[str, Any]


class Backed:
    """A started stand-in whose pods are sandboxes of ``sandboxes``; ``deleted`` receives each
    pod record once its sandbox is destroyed."""

    def __init__(self, sandboxes: LocalSandboxes) -> None:
        self.sandboxes = sandboxes
        self.deleted: queue.Queue[Obj] = queue.Queue()
        self.kube = KubeStandIn(sandboxes=sandboxes, on_pod_deleted=self.deleted.put).start()
        cfg = client.Configuration()
        config.load_kube_config(config_file=self.kube.kubeconfig, context=self.kube.context,
                                client_configuration=cfg, persist_config=False)  # fmt: skip
        self.api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api)
        self.ns = f"t-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace({"metadata": {"name": self.ns}})
        create(self.api, self.ns, "sandboxtemplates", template())
        create(self.api, self.ns, "sandboxwarmpools", pool(replicas=1))

    def claim_pod(self, name: str) -> str:
        """Claim a sandbox of the pool; the name of its pod once the claim is Ready."""
        create(self.api, self.ns, "sandboxclaims", claim(name))
        ready = wait_for(self.api, self.ns, "sandboxclaims",
                         lambda c: c["metadata"]["name"] == name and _ready(c), timeout=WAIT)  # fmt: skip
        pod: str = ready["status"]["sandbox"]["name"]
        return pod

    def run(self, pod: str, script: str) -> str:
        """``sh -c script`` in ``pod`` through pods/exec; its stdout and stderr."""
        out: str = stream(self.core.connect_get_namespaced_pod_exec, pod, self.ns,
                          command=["sh", "-c", script], stdout=True, stderr=True, stdin=False,
                          tty=False, _request_timeout=WAIT)  # fmt: skip
        return out

    def live(self) -> set[str]:
        return {info.id for info in self.sandboxes.list()}


def _ready(obj: Obj) -> bool:
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


@pytest.fixture
def backed(sandboxes: LocalSandboxes) -> Iterator[Backed]:
    stand_in = Backed(sandboxes)
    yield stand_in
    stand_in.kube.stop()


def test_a_claimed_pod_runs_commands_in_its_own_sandbox(backed: Backed) -> None:
    pod = backed.claim_pod("one")
    sandbox_id = backed.kube.sandbox_id(backed.ns, pod)
    assert sandbox_id is not None and sandbox_id in backed.live()
    [info] = backed.sandboxes.list({NAMESPACE: backed.ns, POD: pod})
    assert info.id == sandbox_id
    backed.run(pod, "echo written-in-one > /hangar/probe")
    assert backed.run(pod, "cat /hangar/probe; id -u") == "written-in-one\n0\n"


def test_two_pods_are_two_sandboxes(backed: Backed) -> None:
    first, second = backed.claim_pod("first"), backed.claim_pod("second")
    assert first != second
    assert backed.kube.sandbox_id(backed.ns, first) != backed.kube.sandbox_id(backed.ns, second)
    backed.run(first, "echo mine > /hangar/probe")
    assert backed.run(second, "cat /hangar/probe 2>/dev/null || echo absent") == "absent\n"
    assert backed.run(first, "cat /hangar/probe") == "mine\n"


def test_deleting_the_claim_destroys_its_pods_sandbox(backed: Backed) -> None:
    pod = backed.claim_pod("gone")
    sandbox_id = backed.kube.sandbox_id(backed.ns, pod)
    assert sandbox_id is not None
    client.CustomObjectsApi(backed.api).delete_namespaced_custom_object(
        "extensions.agents.x-k8s.io", "v1beta1", backed.ns, "sandboxclaims", "gone")
    while (record := backed.deleted.get(timeout=WAIT))["metadata"]["name"] != pod:
        pass
    assert record["metadata"]["namespace"] == backed.ns
    assert sandbox_id not in backed.live()
    assert backed.kube.sandbox_id(backed.ns, pod) is None
    with pytest.raises(ApiException) as refused:
        backed.run(pod, "true")
    assert "Handshake status 404" in str(refused.value.reason)  # how the client reports it


def test_stopping_the_stand_in_leaves_no_sandbox(backed: Backed) -> None:
    backed.claim_pod("kept")
    assert backed.live()  # the claimed pod's and the refilled pool's
    backed.kube.stop()
    assert backed.live() == set()


class Gated:
    """A backend whose ``create`` waits for ``gate``, telling ``entered`` it has begun."""

    def __init__(self) -> None:
        self.entered, self.gate = threading.Event(), threading.Event()
        self.destroyed: list[str] = []

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        self.entered.set()
        assert self.gate.wait(WAIT)
        return SandboxInfo(id="sbx-gated", labels=dict(spec.labels), created_at=datetime.now(UTC))

    def destroy(self, sandbox_id: str) -> None:
        self.destroyed.append(sandbox_id)


@pytest.mark.parametrize("ending", ["pod deleted", "stand-in closed"])
def test_a_sandbox_finished_after_its_pod_is_gone_is_destroyed(ending: str) -> None:
    backend, store = Gated(), Store()
    pods = PodSandboxes(cast(Sandboxes, backend), store)
    pod = store.create(kinds.PODS.resource, "default", {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "p"}, "spec": {}})  # fmt: skip
    making = threading.Thread(target=pods.created, args=(pod,))
    making.start()
    assert backend.entered.wait(WAIT)
    if ending == "pod deleted":
        pods.deleted(store.delete(kinds.PODS.resource, "default", "p"))
    else:
        pods.close()
    backend.gate.set()
    making.join(WAIT)
    assert backend.destroyed == ["sbx-gated"]
    assert pods.sandbox_id("default", "p") is None
