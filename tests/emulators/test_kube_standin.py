"""The Kubernetes stand-in, driven by the official client (``kubernetes``) exactly as a program
would: a kubeconfig from the launcher, CoreV1Api and CustomObjectsApi, watches."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch

from emulators.kube import Knobs, KubeStandIn

EXT = "extensions.agents.x-k8s.io"
AGENTS = "agents.x-k8s.io"
V = "v1beta1"
Obj = dict[str, Any]
ROOT = Path(__file__).parents[2]


@pytest.fixture
def stand_in() -> Iterator[KubeStandIn]:
    with KubeStandIn() as server:
        yield server


@pytest.fixture
def api(stand_in: KubeStandIn) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=stand_in.kubeconfig, context=stand_in.context,
                            client_configuration=cfg, persist_config=False)  # fmt: skip
    return client.ApiClient(cfg)


@pytest.fixture
def ns(api: client.ApiClient) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def template(name: str = "tpl", **spec: Any) -> Obj:
    pod = {"spec": {"containers": [{"name": "main", "image": "example/env:1"}]},
           "metadata": {"labels": {"hangar.env": "app"}}}  # fmt: skip
    return {"apiVersion": f"{EXT}/{V}", "kind": "SandboxTemplate", "metadata": {"name": name},
            "spec": {"podTemplate": pod, **spec}}  # fmt: skip


def pool(name: str = "pool", replicas: int = 1, tpl: str = "tpl") -> Obj:
    return {"apiVersion": f"{EXT}/{V}", "kind": "SandboxWarmPool", "metadata": {"name": name},
            "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": tpl}}}  # fmt: skip


def claim(name: str, pool_name: str = "pool", **spec: Any) -> Obj:
    return {"apiVersion": f"{EXT}/{V}", "kind": "SandboxClaim", "metadata": {"name": name},
            "spec": {"warmPoolRef": {"name": pool_name}, **spec}}  # fmt: skip


def create(api: client.ApiClient, ns: str, plural: str, body: Obj) -> Obj:
    group = AGENTS if plural == "sandboxes" else EXT
    out: Obj = custom(api).create_namespaced_custom_object(group, V, ns, plural, body)
    return out


def wait_for(api: client.ApiClient, ns: str, plural: str, test: Callable[[Obj], bool],
             timeout: int = 20) -> Obj:  # fmt: skip
    """The first object of ``plural`` that passes ``test``, from a list and then a watch
    (bounded by ``timeout`` seconds); fails the test when none does in time."""
    group = AGENTS if plural == "sandboxes" else EXT
    listed = custom(api).list_namespaced_custom_object(group, V, ns, plural)
    for item in listed["items"]:
        if test(item):
            return item
    w = watch.Watch()
    rv = listed["metadata"]["resourceVersion"]
    for event in w.stream(custom(api).list_namespaced_custom_object, group, V, ns, plural,
                          resource_version=rv, timeout_seconds=timeout):  # fmt: skip
        if event["type"] != "DELETED" and test(event["object"]):
            w.stop()
            return dict(event["object"])
    raise AssertionError(f"no {plural} in {ns} passed the test within {timeout}s")


def message(exc: client.ApiException) -> str:
    """The ``message`` of the Status an ApiException carries."""
    return str(json.loads(exc.body)["message"])


def ready_condition(obj: Obj) -> Obj:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), {})


def is_ready(obj: Obj) -> bool:
    return ready_condition(obj).get("status") == "True"


def named(name: str, test: Callable[[Obj], bool] = lambda o: True) -> Callable[[Obj], bool]:
    return lambda o: o["metadata"]["name"] == name and test(o)


def ready_pool(api: client.ApiClient, ns: str, replicas: int = 1, **tpl: Any) -> None:
    create(api, ns, "sandboxtemplates", template(**tpl))
    create(api, ns, "sandboxwarmpools", pool(replicas=replicas))
    wait_for(api, ns, "sandboxwarmpools",
             named("pool", lambda p: p.get("status", {}).get("readyReplicas") == replicas))  # fmt: skip


def test_the_client_discovers_the_core_and_agent_sandbox_groups(api: client.ApiClient) -> None:
    assert client.VersionApi(api).get_code().major == "1"
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert {AGENTS, EXT} <= groups
    ext = {r.name: r for r in custom(api).get_api_resources(EXT, V).resources}
    assert ext["sandboxwarmpools/scale"].kind == "Scale"
    assert ext["sandboxclaims"].namespaced and "watch" in ext["sandboxclaims"].verbs
    assert {"sandboxtemplates", "sandboxclaims/status"} <= set(ext)
    agents = {r.name for r in custom(api).get_api_resources(AGENTS, V).resources}
    assert agents == {"sandboxes", "sandboxes/status"}
    core = {r.name for r in client.CoreV1Api(api).get_api_resources().resources}
    assert {"pods", "namespaces", "pods/exec"} <= core


def test_namespaces_are_created_read_and_listed(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    assert core.read_namespace(ns).metadata.uid
    assert {"default", ns} <= {n.metadata.name for n in core.list_namespace().items}
    with pytest.raises(client.ApiException) as exc:
        core.create_namespace({"metadata": {"name": ns}})
    assert exc.value.status == 409


def test_each_agent_sandbox_kind_is_created_read_listed_patched_and_deleted(
    api: client.ApiClient, ns: str
) -> None:
    sandbox = {"apiVersion": f"{AGENTS}/{V}", "kind": "Sandbox", "metadata": {"name": "sb"},
               "spec": {"podTemplate": {"spec": {"containers": [{"name": "m", "image": "i"}]}}}}  # fmt: skip
    bodies = {"sandboxtemplates": template(), "sandboxwarmpools": pool(replicas=0),
              "sandboxclaims": claim("cl", "absent"), "sandboxes": sandbox}  # fmt: skip
    co = custom(api)
    for plural, body in bodies.items():
        group = AGENTS if plural == "sandboxes" else EXT
        name = body["metadata"]["name"]
        made = create(api, ns, plural, body)
        assert made["metadata"]["uid"] and made["metadata"]["namespace"] == ns
        assert co.get_namespaced_custom_object(group, V, ns, plural, name)["spec"] == made["spec"]
        patch = {"metadata": {"labels": {"team": "x"}}}
        patched = co.patch_namespaced_custom_object(group, V, ns, plural, name, patch)
        assert patched["metadata"]["labels"] == {"team": "x"}
        listed = co.list_namespaced_custom_object(group, V, ns, plural, label_selector="team=x")
        assert [i["metadata"]["name"] for i in listed["items"]] == [name]
        assert int(listed["metadata"]["resourceVersion"]) >= int(patched["metadata"]["resourceVersion"])
        current = co.get_namespaced_custom_object(group, V, ns, plural, name)
        current["metadata"]["annotations"] = {"a": "b"}
        replaced = co.replace_namespaced_custom_object(group, V, ns, plural, name, current)
        assert replaced["metadata"]["annotations"] == {"a": "b"}
        co.delete_namespaced_custom_object(group, V, ns, plural, name)
        with pytest.raises(client.ApiException) as exc:
            co.get_namespaced_custom_object(group, V, ns, plural, name)
        assert exc.value.status == 404


def test_an_unknown_field_is_refused_as_a_strict_server_refuses_it(
    api: client.ApiClient, ns: str
) -> None:
    with pytest.raises(client.ApiException) as exc:
        create(api, ns, "sandboxclaims", claim("c", lifecycle={"shutdownTim": "x"}))
    assert exc.value.status == 400
    assert 'unknown field "spec.lifecycle.shutdownTim"' in message(exc.value)
    with pytest.raises(client.ApiException) as missing:
        create(api, ns, "sandboxclaims", {**claim("c"), "spec": {"env": []}})
    assert missing.value.status == 422 and "spec.warmPoolRef: Required value" in message(missing.value)
    with pytest.raises(client.ApiException) as bad_enum:
        create(api, ns, "sandboxtemplates", template(envVarsInjectionPolicy="Sometimes"))
    assert bad_enum.value.status == 422 and '"Sometimes"' in message(bad_enum.value)


def test_a_replace_from_a_stale_resource_version_conflicts(api: client.ApiClient, ns: str) -> None:
    co = custom(api)
    stale = create(api, ns, "sandboxtemplates", template())
    co.patch_namespaced_custom_object(EXT, V, ns, "sandboxtemplates", "tpl", {"metadata": {"labels": {"a": "1"}}})
    with pytest.raises(client.ApiException) as exc:
        co.replace_namespaced_custom_object(EXT, V, ns, "sandboxtemplates", "tpl", stale)
    assert exc.value.status == 409


def test_a_watch_sees_added_modified_and_deleted_in_order(api: client.ApiClient, ns: str) -> None:
    co = custom(api)
    start = co.list_namespaced_custom_object(EXT, V, ns, "sandboxtemplates")["metadata"]["resourceVersion"]
    create(api, ns, "sandboxtemplates", template())
    co.patch_namespaced_custom_object(EXT, V, ns, "sandboxtemplates", "tpl", {"metadata": {"labels": {"a": "1"}}})
    co.delete_namespaced_custom_object(EXT, V, ns, "sandboxtemplates", "tpl")
    seen: list[tuple[str, int]] = []
    w = watch.Watch()
    for event in w.stream(co.list_namespaced_custom_object, EXT, V, ns, "sandboxtemplates",
                          resource_version=start, timeout_seconds=10):  # fmt: skip
        seen.append((event["type"], int(event["object"]["metadata"]["resourceVersion"])))
        if event["type"] == "DELETED":
            w.stop()
    assert [t for t, _ in seen] == ["ADDED", "MODIFIED", "DELETED"]
    assert [rv for _, rv in seen] == sorted({rv for _, rv in seen})


def test_a_watch_from_an_expired_resource_version_gets_410_and_resumes_from_a_fresh_list(
    stand_in: KubeStandIn, api: client.ApiClient, ns: str
) -> None:
    co = custom(api)
    old = co.list_namespaced_custom_object(EXT, V, ns, "sandboxtemplates")["metadata"]["resourceVersion"]
    stand_in.store.set_history(2)
    for i in range(4):
        create(api, ns, "sandboxtemplates", template(f"t{i}"))
    with pytest.raises(client.ApiException) as exc:
        for _ in watch.Watch().stream(co.list_namespaced_custom_object, EXT, V, ns,
                                      "sandboxtemplates", resource_version=old, timeout_seconds=5):  # fmt: skip
            pass
    assert exc.value.status == 410
    fresh = co.list_namespaced_custom_object(EXT, V, ns, "sandboxtemplates")
    assert len(fresh["items"]) == 4
    create(api, ns, "sandboxtemplates", template("after"))
    w = watch.Watch()
    for event in w.stream(co.list_namespaced_custom_object, EXT, V, ns, "sandboxtemplates",
                          resource_version=fresh["metadata"]["resourceVersion"], timeout_seconds=10):  # fmt: skip
        w.stop()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "after")


def test_a_claim_is_served_warm_when_the_pool_has_a_ready_sandbox(api: client.ApiClient, ns: str) -> None:
    ready_pool(api, ns)
    warm = custom(api).list_namespaced_custom_object(AGENTS, V, ns, "sandboxes")["items"][0]
    labels = {"hangar.session": "s1"}
    create(api, ns, "sandboxclaims", claim("c1", additionalPodMetadata={"labels": labels}))
    bound = wait_for(api, ns, "sandboxclaims", named("c1", is_ready))
    assert bound["status"]["sandbox"]["name"] == warm["metadata"]["name"]
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector="hangar.session=s1").items
    assert [p.metadata.name for p in pods] == [warm["metadata"]["name"]]
    assert pods[0].metadata.labels["agents.x-k8s.io/launch-type"] == "warm"
    sandbox = custom(api).get_namespaced_custom_object(AGENTS, V, ns, "sandboxes", warm["metadata"]["name"])
    assert [o["kind"] for o in sandbox["metadata"]["ownerReferences"]] == ["SandboxClaim"]


def test_a_claim_is_served_cold_when_no_pool_sandbox_is_ready(api: client.ApiClient, ns: str) -> None:
    ready_pool(api, ns, replicas=0)
    create(api, ns, "sandboxclaims", claim("c2"))
    bound = wait_for(api, ns, "sandboxclaims", named("c2", is_ready))
    assert bound["status"]["sandbox"]["name"] == "c2"
    pod = client.CoreV1Api(api).read_namespaced_pod("c2", ns)
    assert pod.metadata.labels["agents.x-k8s.io/launch-type"] == "cold"
    assert pod.status.phase == "Running"
    assert any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)


def test_a_claim_that_sets_env_is_cold_even_when_the_pool_has_a_ready_sandbox(
    api: client.ApiClient, ns: str
) -> None:
    ready_pool(api, ns, envVarsInjectionPolicy="Allowed")
    create(api, ns, "sandboxclaims", claim("c3", env=[{"name": "A", "value": "1"}]))
    wait_for(api, ns, "sandboxclaims", named("c3", is_ready))
    pod = client.CoreV1Api(api).read_namespaced_pod("c3", ns)
    assert pod.metadata.labels["agents.x-k8s.io/launch-type"] == "cold"
    assert [(e.name, e.value) for e in pod.spec.containers[0].env] == [("A", "1")]


def test_env_on_a_claim_is_rejected_when_the_template_disallows_it(api: client.ApiClient, ns: str) -> None:
    ready_pool(api, ns)
    create(api, ns, "sandboxclaims", claim("c4", env=[{"name": "A", "value": "1"}]))
    refused = wait_for(api, ns, "sandboxclaims",
                       named("c4", lambda c: bool(ready_condition(c))))  # fmt: skip
    assert ready_condition(refused)["reason"] == "EnvVarsInjectionRejected"


def test_the_pool_refills_after_a_claim_takes_a_sandbox(api: client.ApiClient, ns: str) -> None:
    ready_pool(api, ns, replicas=1)
    create(api, ns, "sandboxclaims", claim("c5"))
    taken = wait_for(api, ns, "sandboxclaims", named("c5", is_ready))["status"]["sandbox"]["name"]
    wait_for(api, ns, "sandboxwarmpools", named("pool", lambda p: p["status"]["readyReplicas"] == 1))
    pods = {p.metadata.name for p in client.CoreV1Api(api).list_namespaced_pod(ns).items}
    assert taken in pods and len(pods) == 2


def test_deleting_a_claim_deletes_its_sandbox_and_pod(api: client.ApiClient, ns: str) -> None:
    ready_pool(api, ns, replicas=0)
    create(api, ns, "sandboxclaims", claim("c6"))
    wait_for(api, ns, "sandboxclaims", named("c6", is_ready))
    custom(api).delete_namespaced_custom_object(EXT, V, ns, "sandboxclaims", "c6")
    with pytest.raises(client.ApiException) as sandbox:
        custom(api).get_namespaced_custom_object(AGENTS, V, ns, "sandboxes", "c6")
    with pytest.raises(client.ApiException) as pod:
        client.CoreV1Api(api).read_namespaced_pod("c6", ns)
    assert (sandbox.value.status, pod.value.status) == (404, 404)


def test_a_claim_past_its_shutdown_time_loses_its_sandbox(api: client.ApiClient, ns: str) -> None:
    ready_pool(api, ns, replicas=0)
    at = (datetime.now(UTC) + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    create(api, ns, "sandboxclaims", claim("c7", lifecycle={"shutdownTime": at}))
    wait_for(api, ns, "sandboxclaims", named("c7", is_ready))
    expired = wait_for(api, ns, "sandboxclaims",
                       named("c7", lambda c: ready_condition(c).get("reason") == "ClaimExpired"))  # fmt: skip
    assert expired["status"]["sandbox"]["name"] == "c7"
    with pytest.raises(client.ApiException) as exc:
        client.CoreV1Api(api).read_namespaced_pod("c7", ns)
    assert exc.value.status == 404


def test_the_scale_subresource_changes_the_pool_replicas(api: client.ApiClient, ns: str) -> None:
    ready_pool(api, ns, replicas=1)
    co = custom(api)
    scale = co.get_namespaced_custom_object_scale(EXT, V, ns, "sandboxwarmpools", "pool")
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", 1)
    co.patch_namespaced_custom_object_scale(EXT, V, ns, "sandboxwarmpools", "pool", {"spec": {"replicas": 3}})
    wait_for(api, ns, "sandboxwarmpools", named("pool", lambda p: p["status"]["readyReplicas"] == 3))
    assert co.get_namespaced_custom_object(EXT, V, ns, "sandboxwarmpools", "pool")["spec"]["replicas"] == 3


def test_pods_are_listed_by_equality_and_set_based_selectors(api: client.ApiClient, ns: str) -> None:
    ready_pool(api, ns, replicas=0)
    for name, env in (("a", "x"), ("b", "y"), ("c", "z")):
        create(api, ns, "sandboxclaims", claim(name, additionalPodMetadata={"labels": {"e": env}}))
    wait_for(api, ns, "sandboxclaims", named("c", is_ready))
    core = client.CoreV1Api(api)

    def names(sel: str) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod(ns, label_selector=sel).items]

    assert names("e=x") == ["a"]
    assert names("e in (x, z)") == ["a", "c"]
    assert names("e notin (x),agents.x-k8s.io/launch-type=cold") == ["b", "c"]
    assert names("e!=y") == ["a", "c"]


def test_a_deleted_pod_is_seen_by_a_pod_watch_and_the_delete_hook() -> None:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    gone: list[str] = []
    deleted = threading.Event()

    def on_deleted(pod: Obj) -> None:
        gone.append(pod["metadata"]["name"])
        deleted.set()

    with KubeStandIn(on_pod_deleted=on_deleted) as server:
        cfg = client.Configuration()
        config.load_kube_config(config_file=server.kubeconfig, context=server.context,
                                client_configuration=cfg, persist_config=False)  # fmt: skip
        api = client.ApiClient(cfg)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
        ready_pool(api, ns, replicas=0)
        create(api, ns, "sandboxclaims", claim("h"))
        wait_for(api, ns, "sandboxclaims", named("h", is_ready))
        core = client.CoreV1Api(api)
        rv = core.list_namespaced_pod(ns).metadata.resource_version
        custom(api).delete_namespaced_custom_object(EXT, V, ns, "sandboxclaims", "h")
        w = watch.Watch()
        for event in w.stream(core.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=10):
            if event["type"] == "DELETED":
                w.stop()
        assert (event["type"], event["object"].metadata.name) == ("DELETED", "h")
        assert deleted.wait(10) and gone == ["h"]


@pytest.mark.parametrize(
    ("knob", "reason"),
    [("image_pull_failure", "ErrImagePull"), ("node_scale_up", "Insufficient cpu"),
     ("quota_exhausted", "Insufficient cpu")],
)  # fmt: skip
def test_a_start_up_knob_shows_as_the_claims_not_ready_reason_until_cleared(
    stand_in: KubeStandIn, api: client.ApiClient, ns: str, knob: str, reason: str
) -> None:
    ready_pool(api, ns, replicas=0)
    stand_in.set_knobs(**{knob: True})
    create(api, ns, "sandboxclaims", claim("k"))
    stuck = wait_for(api, ns, "sandboxclaims",
                     named("k", lambda c: reason in ready_condition(c).get("message", "")))  # fmt: skip
    assert ready_condition(stuck)["status"] == "False"
    stand_in.set_knobs(**{knob: False})
    assert is_ready(wait_for(api, ns, "sandboxclaims", named("k", is_ready)))


def test_knobs_are_set_through_the_admin_endpoint(stand_in: KubeStandIn) -> None:
    request = urllib.request.Request(
        f"{stand_in.url}/_stand-in/knobs", data=b'{"ready_delay": 5}', method="PUT",
        headers={"Authorization": f"Bearer {stand_in.token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    assert stand_in.knobs == Knobs(ready_delay=5.0)


def test_a_request_without_the_token_is_refused_with_401(stand_in: KubeStandIn) -> None:
    cfg = client.Configuration(host=stand_in.url)
    with pytest.raises(client.ApiException) as exc:
        client.CoreV1Api(client.ApiClient(cfg)).list_namespace()
    assert exc.value.status == 401
    with pytest.raises(urllib.error.HTTPError) as raw:
        urllib.request.urlopen(f"{stand_in.url}/api/v1/namespaces", timeout=10)
    assert raw.value.code == 401 and b'"kind": "Status"' in raw.value.read()


def test_status_is_written_only_through_the_status_subresource(api: client.ApiClient, ns: str) -> None:
    co = custom(api)
    create(api, ns, "sandboxclaims", claim("st", "absent"))
    wait_for(api, ns, "sandboxclaims", named("st", lambda c: bool(ready_condition(c))))
    co.patch_namespaced_custom_object(EXT, V, ns, "sandboxclaims", "st", {"status": {"sandbox": {"name": "x"}}})
    assert "name" not in co.get_namespaced_custom_object(EXT, V, ns, "sandboxclaims", "st")["status"].get("sandbox", {})
    patched = co.patch_namespaced_custom_object_status(
        EXT, V, ns, "sandboxclaims", "st", {"status": {"sandbox": {"name": "x"}}}
    )
    assert patched["status"]["sandbox"]["name"] == "x"
    assert ready_condition(patched)["reason"] == "WarmPoolNotFound"


def test_a_json_patch_applies_its_operations_in_order(api: client.ApiClient, ns: str) -> None:
    create(api, ns, "sandboxwarmpools", pool(replicas=0))
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "1"}},
           {"op": "replace", "path": "/spec/replicas", "value": 0},
           {"op": "add", "path": "/spec/updateStrategy", "value": {"type": "Recreate"}}]  # fmt: skip
    json_patch = "application/json-patch+json"  # custom objects default to merge patches
    patched = custom(api).patch_namespaced_custom_object(
        EXT, V, ns, "sandboxwarmpools", "pool", ops, _content_type=json_patch
    )
    assert patched["metadata"]["labels"] == {"a": "1"}
    assert patched["spec"]["updateStrategy"] == {"type": "Recreate"}
    bad = [{"op": "add", "path": "/spec/replica", "value": 2}]
    with pytest.raises(client.ApiException) as exc:
        custom(api).patch_namespaced_custom_object(
            EXT, V, ns, "sandboxwarmpools", "pool", bad, _content_type=json_patch
        )
    assert exc.value.status == 400 and "spec.replica" in message(exc.value)


def test_a_pod_stays_pending_until_the_ready_delay_passes(stand_in: KubeStandIn, api: client.ApiClient, ns: str) -> None:
    stand_in.set_knobs(ready_delay=1.5)
    ready_pool(api, ns, replicas=0)
    create(api, ns, "sandboxclaims", claim("slow"))
    pending = wait_for(api, ns, "sandboxclaims", named("slow", lambda c: bool(ready_condition(c))))
    assert ready_condition(pending)["status"] == "False"
    pod = client.CoreV1Api(api).read_namespaced_pod("slow", ns)
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    assert is_ready(wait_for(api, ns, "sandboxclaims", named("slow", is_ready)))


def test_exec_answers_a_not_implemented_status_until_a_handler_is_set(
    stand_in: KubeStandIn, api: client.ApiClient, ns: str
) -> None:
    ready_pool(api, ns, replicas=1)
    pod = client.CoreV1Api(api).list_namespaced_pod(ns).items[0].metadata.name
    request = urllib.request.Request(f"{stand_in.url}/api/v1/namespaces/{ns}/pods/{pod}/exec?command=ls",
                                     headers={"Authorization": f"Bearer {stand_in.token}"})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(request, timeout=10)
    body = json.loads(exc.value.read())
    assert (exc.value.code, body["kind"], body["code"]) == (501, "Status", 501)
    assert stand_in.server.requests > 0


def test_the_module_serves_until_terminated_and_prints_its_kubeconfig() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "emulators.kube", "--port", "0"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        kubeconfig = proc.stderr.readline().strip().removeprefix("KUBECONFIG=")
        assert proc.stdout.readline().startswith("kube stand-in listening on http://127.0.0.1:")
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg, persist_config=False)
        names = [n.metadata.name for n in client.CoreV1Api(client.ApiClient(cfg)).list_namespace().items]
        assert names == ["default"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_deleting_a_namespace_deletes_everything_in_it(api: client.ApiClient, ns: str) -> None:
    ready_pool(api, ns, replicas=2)
    core = client.CoreV1Api(api)
    assert len(core.list_namespaced_pod(ns).items) == 2
    core.delete_namespace(ns)
    assert core.list_namespaced_pod(ns).items == []
    assert custom(api).list_namespaced_custom_object(AGENTS, V, ns, "sandboxes")["items"] == []
    with pytest.raises(client.ApiException) as exc:
        core.read_namespace(ns)
    assert exc.value.status == 404


def test_a_sandbox_annotated_with_a_pod_name_gets_a_pod_of_that_name(api: client.ApiClient, ns: str) -> None:
    body = {"apiVersion": f"{AGENTS}/{V}", "kind": "Sandbox",
            "metadata": {"name": "sb", "annotations": {"agents.x-k8s.io/pod-name": "runner"}},
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "m", "image": "i"}]}}}}  # fmt: skip
    create(api, ns, "sandboxes", body)
    assert is_ready(wait_for(api, ns, "sandboxes", named("sb", is_ready)))
    pod = client.CoreV1Api(api).read_namespaced_pod("runner", ns)
    assert pod.metadata.owner_references[0].name == "sb"
    assert pod.metadata.labels["agents.x-k8s.io/launch-type"] == "cold"


def test_a_pod_whose_owner_is_gone_is_collected(stand_in: KubeStandIn, api: client.ApiClient, ns: str) -> None:
    owner = {"apiVersion": f"{AGENTS}/{V}", "kind": "Sandbox", "name": "gone",
             "uid": str(uuid.uuid4()), "controller": True}  # fmt: skip
    pod = {"metadata": {"name": "orphan", "ownerReferences": [owner]},
           "spec": {"containers": [{"name": "m", "image": "i"}]}}  # fmt: skip
    core = client.CoreV1Api(api)
    rv = core.create_namespaced_pod(ns, pod).metadata.resource_version
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=10):
        if event["type"] == "DELETED":
            w.stop()
    assert (event["type"], event["object"].metadata.name) == ("DELETED", "orphan")
