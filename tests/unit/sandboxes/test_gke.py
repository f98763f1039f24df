"""GKE sandboxes: the conformance suite against the Kubernetes stand-in (pods backed by local
sandboxes), plus the Agent Sandbox manifests, the claim's status, the URL and the error table."""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest
from hangar.config import Settings
from hangar.errors import (
    HangarError,
    InvalidInput,
    InvalidSettings,
    SandboxError,
    SandboxNotFound,
    SandboxUnavailable,
)
from hangar.sandboxes import ExecResult, SandboxSpec, SandboxState, SandboxStatus, SandboxUser
from hangar.sandboxes import open_sandboxes
from hangar.sandboxes.gke import manifests as objects
from hangar.sandboxes.gke.manifests import Network, PodSettings
from hangar.sandboxes.gke import (
    LEASE_MARGIN,
    LEASE_SLACK,
    TABLE,
    GkeSandboxes,
    configuration,
    parse_url,
    translate,
)
from hangar.sandboxes.local import LocalSandboxes
from hangar.sandboxes.gke.podexec import BOOT
from hangar.testing.sandboxes import SandboxesConformance, make, run

from emulators.kube import KubeStandIn

pytestmark = [pytest.mark.sandbox,  # a thread of the stand-in failing is an error here
              pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")]

IMAGE = "hangar-conformance/agent:1"


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeStandIn]:
    """The stand-in, once per module, its pods local sandboxes; KUBECONFIG names it (so that a
    backend opened afresh, in this process or a child, finds it)."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap (bwrap) is not installed: the stand-in's pods need it",
                    pytrace=False)  # fmt: skip
    root = tmp_path_factory.mktemp("pods")
    local = LocalSandboxes(root / "sandboxes", memory_mb=1024, disk_gb=0)
    with pytest.MonkeyPatch.context() as patch:
        kube = KubeStandIn(sandboxes=local).start()
        patch.setenv("KUBECONFIG", kube.kubeconfig)
        try:
            yield kube
        finally:
            kube.stop()


@pytest.fixture
def sandboxes_settings(stand_in: KubeStandIn, tmp_path: Path) -> Settings:
    url = f"gke://{stand_in.context}/default?image={IMAGE}"
    (tmp_path / "harnesses").mkdir()
    return Settings.build(data_dir=tmp_path, harness_dir=tmp_path / "harnesses", sandboxes=url)


@pytest.fixture
def sandboxes(sandboxes_settings: Settings) -> Iterator[GkeSandboxes]:
    backend = GkeSandboxes.from_url(sandboxes_settings.sandboxes, sandboxes_settings)
    yield backend
    for info in backend.list():
        backend.destroy(info.id)


@pytest.fixture
def sandboxes_image() -> str:
    return IMAGE


class TestGkeSandboxes(SandboxesConformance):
    """The shared contract, against the Agent Sandbox kinds on the stand-in."""


# -- on the stand-in, beyond the suite -------------------------------------------------------


def test_a_spec_without_an_image_on_a_url_without_one_is_invalid_input_naming_the_image(
    stand_in: KubeStandIn, sandboxes_settings: Settings
) -> None:
    url = f"gke://{stand_in.context}/default"
    backend = open_sandboxes(url, sandboxes_settings)
    label = uuid.uuid4().hex
    with pytest.raises(InvalidInput, match="image"):
        backend.create(SandboxSpec(labels={"conformance": label}))
    assert backend.list({"conformance": label}) == []


def _get(backend: GkeSandboxes, plural: str, name: str, group: str = objects.EXTENSIONS_GROUP
         ) -> dict[str, Any]:  # fmt: skip
    return cast(dict[str, Any], backend._objects.get_namespaced_custom_object(
        group, objects.VERSION, "default", plural, name))


def _names(backend: GkeSandboxes, plural: str, selector: str = "",
           group: str = objects.EXTENSIONS_GROUP) -> list[str]:  # fmt: skip
    found = cast(dict[str, Any], backend._objects.list_namespaced_custom_object(
        group, objects.VERSION, "default", plural, label_selector=selector))
    return sorted(o["metadata"]["name"] for o in found["items"])


def _counted(backend: GkeSandboxes, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The requests ``backend`` makes from now on (method and path)."""
    calls: list[str] = []
    inner = backend._api.call_api

    def call_api(*args: Any, **kwargs: Any) -> Any:
        method, url = (a for a in args[:2])  # the client's order varies by version
        if str(url).isupper():
            method, url = url, method
        calls.append(f"{method} {urlsplit(str(url)).path}")
        return inner(*args, **kwargs)

    monkeypatch.setattr(backend._api, "call_api", call_api)
    return calls


def test_one_pool_per_environment_is_made_and_claims_never_carry_env(
    sandboxes: GkeSandboxes, stand_in: KubeStandIn
) -> None:
    label, env = uuid.uuid4().hex, f"env {uuid.uuid4().hex[:6]}"
    spec = SandboxSpec(labels={"conformance": label}, env={"SECRET": "s3cret-value"}, pool=env)
    first = sandboxes.create(spec)
    sandboxes.create(SandboxSpec(labels={"conformance": label}, pool=env))
    pool = objects.pool_name(env)
    claim = _get(sandboxes, objects.CLAIMS, first.id)
    assert claim["spec"]["warmPoolRef"] == {"name": pool}
    assert "env" not in claim["spec"] and "s3cret-value" not in str(claim)
    assert claim["spec"]["additionalPodMetadata"]["labels"][objects.SANDBOX_ID] == first.id
    assert _names(sandboxes, objects.POOLS).count(pool) == 1
    [template] = _names(sandboxes, objects.TEMPLATES, f"{objects.POOL_LABEL}={pool}")
    assert _get(sandboxes, objects.POOLS, pool)["spec"]["sandboxTemplateRef"] == {"name": template}
    assert claim["metadata"]["labels"][objects.TEMPLATE_LABEL] == template


def test_a_create_with_nothing_changed_makes_one_request(
    sandboxes: GkeSandboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = f"env-{uuid.uuid4().hex[:6]}"
    sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}, pool=env))
    calls = _counted(sandboxes, monkeypatch)
    sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}, pool=env))
    claims = f"/apis/{objects.EXTENSIONS_GROUP}/v1beta1/namespaces/default/sandboxclaims"
    assert calls == [f"POST {claims}"]


def test_a_changed_image_repoints_the_pool_and_collects_templates_no_live_claim_was_made_on(
    sandboxes: GkeSandboxes, sandboxes_settings: Settings
) -> None:
    env = f"env-{uuid.uuid4().hex[:6]}"
    pool = objects.pool_name(env)
    first = sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}, pool=env))
    [one] = _names(sandboxes, objects.TEMPLATES, f"{objects.POOL_LABEL}={pool}")
    other = GkeSandboxes.from_url(sandboxes_settings.sandboxes, sandboxes_settings)
    spec = SandboxSpec(labels={"conformance": uuid.uuid4().hex}, pool=env, image=f"{IMAGE}-2")
    other.create(spec)  # the first claim still lives: its template stays
    two = _get(sandboxes, objects.POOLS, pool)["spec"]["sandboxTemplateRef"]["name"]
    assert two != one
    assert _names(sandboxes, objects.TEMPLATES, f"{objects.POOL_LABEL}={pool}") == sorted([one, two])
    sandboxes.destroy(first.id)
    sandboxes.pools.fresh = 0.0  # what it knows of the pool is old: it looks again
    third = sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}, pool=env))
    assert _get(sandboxes, objects.POOLS, pool)["spec"]["sandboxTemplateRef"] == {"name": one}
    assert _names(sandboxes, objects.TEMPLATES, f"{objects.POOL_LABEL}={pool}") == sorted([one, two])
    for info in other.list({"conformance": spec.labels["conformance"]}):
        other.destroy(info.id)
    sandboxes.destroy(third.id)
    other.pools.fresh = 0.0
    other.create(spec)  # nothing lives on one now: it goes
    assert _names(sandboxes, objects.TEMPLATES, f"{objects.POOL_LABEL}={pool}") == [two]


def test_a_repointed_warm_pool_replaces_its_ready_sandboxes_with_the_new_templates(
    stand_in: KubeStandIn, sandboxes_settings: Settings
) -> None:
    url = f"{sandboxes_settings.sandboxes}&warm_pool=1"
    backend = GkeSandboxes.from_url(url, sandboxes_settings)
    env = f"env-{uuid.uuid4().hex[:6]}"
    pool = objects.pool_name(env)
    selector = f"agents.x-k8s.io/warm-pool-sandbox={pool}"

    def warm(template: str) -> bool:
        names = _names(backend, objects.SANDBOXES, selector, objects.AGENTS_GROUP)
        return len(names) == 1 and all(
            _get(backend, objects.SANDBOXES, n, objects.AGENTS_GROUP)["metadata"]["annotations"]
            ["agents.x-k8s.io/sandbox-template-ref"] == template for n in names)

    try:
        first = backend.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}, pool=env))
        backend.destroy(first.id)
        one = _get(backend, objects.POOLS, pool)["spec"]["sandboxTemplateRef"]["name"]
        assert _get(backend, objects.POOLS, pool)["spec"]["replicas"] == 1
        _wait(lambda: warm(one))
        second = backend.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}, pool=env,
                                            image=f"{IMAGE}-2"))  # fmt: skip
        backend.destroy(second.id)
        two = _get(backend, objects.POOLS, pool)["spec"]["sandboxTemplateRef"]["name"]
        assert two != one
        _wait(lambda: warm(two))
        assert _names(backend, objects.TEMPLATES, f"{objects.POOL_LABEL}={pool}") == [two]
    finally:
        backend._objects.patch_namespaced_custom_object(
            objects.EXTENSIONS_GROUP, objects.VERSION, "default", objects.POOLS, pool,
            {"spec": {"replicas": 0}})


def test_a_create_on_a_backend_with_another_warm_pool_count_leaves_the_pools_replicas(
    sandboxes: GkeSandboxes, sandboxes_settings: Settings
) -> None:
    env = f"env-{uuid.uuid4().hex[:6]}"
    pool = objects.pool_name(env)
    sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}, pool=env))
    assert _get(sandboxes, objects.POOLS, pool)["spec"]["replicas"] == 0
    url = f"{sandboxes_settings.sandboxes}&warm_pool=2"
    other = GkeSandboxes.from_url(url, sandboxes_settings)
    info = other.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}, pool=env))
    other.destroy(info.id)
    assert _get(sandboxes, objects.POOLS, pool)["spec"]["replicas"] == 0  # keep_pool's alone


def test_the_template_the_stand_in_keeps_holds_the_network_policy_denying_the_control_plane(
    sandboxes: GkeSandboxes,
) -> None:
    env = f"env-{uuid.uuid4().hex[:6]}"
    sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}, pool=env))
    [name] = _names(sandboxes, objects.TEMPLATES, f"{objects.POOL_LABEL}={objects.pool_name(env)}")
    spec = _get(sandboxes, objects.TEMPLATES, name)["spec"]
    assert spec["networkPolicyManagement"] == "Managed"
    control_plane = f"{urlsplit(sandboxes.cfg.host).hostname}/32"  # named by address here
    assert spec["networkPolicy"] == objects.network_policy(sandboxes.network, (control_plane,))
    assert control_plane in spec["networkPolicy"]["egress"][1]["to"][0]["ipBlock"]["except"]


def test_a_claims_lease_is_the_ttl_and_a_margin_and_extend_moves_it_on_never_back(
    sandboxes: GkeSandboxes, sandboxes_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = datetime.now(UTC)
    info = sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}))
    lease = objects.shutdown_time(_get(sandboxes, objects.CLAIMS, info.id))
    assert lease is not None
    expected = before + sandboxes.ttl + LEASE_MARGIN
    assert expected - timedelta(seconds=1) <= lease <= expected + timedelta(minutes=1)
    assert _get(sandboxes, objects.CLAIMS, info.id)["spec"]["lifecycle"]["shutdownPolicy"] == \
        "Delete"  # fmt: skip
    until = datetime(2100, 1, 2, 3, 4, 5, tzinfo=UTC)
    sandboxes.extend(info.id, until)
    renewed = until + LEASE_MARGIN + LEASE_SLACK
    assert objects.shutdown_time(_get(sandboxes, objects.CLAIMS, info.id)) == renewed
    calls = _counted(sandboxes, monkeypatch)
    sandboxes.extend(info.id, until - timedelta(days=1))  # earlier: nothing asked, nothing moved
    sandboxes.extend(info.id, until + LEASE_SLACK)  # within the slack: nothing asked either
    assert calls == []
    sandboxes.extend(info.id, until + LEASE_SLACK + timedelta(seconds=1))  # past it: one patch
    assert [c.split()[0] for c in calls] == ["PATCH"]
    fresh = GkeSandboxes.from_url(sandboxes_settings.sandboxes, sandboxes_settings)
    fresh.extend(info.id, until - timedelta(days=1))  # another process: read, not shortened
    assert objects.shutdown_time(_get(sandboxes, objects.CLAIMS, info.id)) == \
        until + 2 * LEASE_SLACK + timedelta(seconds=1) + LEASE_MARGIN  # fmt: skip


def _wait(done: Any, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "not done in time"
        time.sleep(0.05)


def test_an_image_that_cannot_be_pulled_is_a_failed_sandbox_with_the_reason(
    sandboxes: GkeSandboxes, stand_in: KubeStandIn
) -> None:
    stand_in.set_knobs(image_pull_failure=True)
    try:
        info = sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}))
        deadline = time.monotonic() + 60
        status = sandboxes.status(info.id)
        while status.state is SandboxState.PENDING:
            assert time.monotonic() < deadline, status
            time.sleep(0.05)
            status = sandboxes.status(info.id)
        assert status.state is SandboxState.FAILED and "ErrImagePull" in status.reason
    finally:
        stand_in.set_knobs(image_pull_failure=False)


def test_the_exec_request_url_carries_neither_the_environment_the_user_nor_the_command(
    sandboxes: GkeSandboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.stream import ws_client

    info = make(sandboxes, SandboxSpec(env={"SPEC_SECRET": "spec-s3cret"}))
    urls: list[str] = []
    create: Any = ws_client.create_websocket

    def recorded(configuration: Any, url: str, headers: Any = None) -> Any:
        urls.append(url)
        return create(configuration, url, headers)

    monkeypatch.setattr(ws_client, "create_websocket", recorded)
    script = 'printf "%s %s" "$SPEC_SECRET" "$CALL_SECRET"; echo argv-marker >/dev/null'
    result = sandboxes.exec(info.id, ["sh", "-c", script], env={"CALL_SECRET": "call-s3cret"},
                            user=SandboxUser.AGENT)  # fmt: skip
    assert result.stdout == b"spec-s3cret call-s3cret"
    assert urls
    for url in urls:
        query = parse_qs(urlsplit(url).query)
        assert query["command"] == ["python3", "-I", "-S", "-c", BOOT]
        assert not any(word in url for word in ("s3cret", "argv-marker", "CALL_SECRET"))


def test_a_running_exec_is_killed_by_its_id_without_its_stream_closing(
    sandboxes: GkeSandboxes,
) -> None:
    """What a cancel does after closing the stream, for runtimes that leave the command be."""
    info = make(sandboxes)
    results: queue.Queue[ExecResult] = queue.Queue()
    script = "sleep 300 & echo $! > /tmp/child; wait"
    worker = threading.Thread(target=lambda: results.put(
        sandboxes.exec(info.id, ["sh", "-c", script])), daemon=True)
    worker.start()
    other = ('for i in $(seq 200); do for f in /hangar/tmp/exec-*; do [ -f "$f" ] && '
             '[ "$(cat "$f")" != "$$" ] && { echo "${f#*/exec-}"; exit 0; }; done; sleep 0.05; '
             "done; exit 1")  # the other exec's mark (this one's holds its own pid)
    exec_id = run(sandboxes, info.id, other, SandboxUser.HANGAR).strip()
    sandboxes._kill(info.id, exec_id)
    assert results.get(timeout=60).exit_code == 137
    gone = ('p=$(cat /tmp/child); for i in $(seq 200); do kill -0 "$p" 2>/dev/null || exit 0; '
            "sleep 0.05; done; exit 1")
    assert sandboxes.exec(info.id, ["sh", "-c", gone]).ok


# -- manifests and status --------------------------------------------------------------------


def test_the_template_runs_the_image_as_root_with_only_the_uid_split_capabilities() -> None:
    made = objects.template("t", "p", IMAGE, PodSettings(memory_mb=2048, runtime_class="gvisor"),
                            objects.network_policy(Network()))  # fmt: skip
    spec = made["spec"]["podTemplate"]["spec"]
    [container] = spec["containers"]
    assert container["image"] == IMAGE
    assert spec["automountServiceAccountToken"] is False
    assert spec["runtimeClassName"] == "gvisor"
    assert container["securityContext"]["runAsUser"] == 0
    assert container["securityContext"]["capabilities"] == {
        "drop": ["ALL"], "add": list(objects.AGENT_CAPABILITIES)}
    assert container["resources"]["limits"] == {"memory": "2048Mi"}
    assert made["spec"]["envVarsInjectionPolicy"] == "Disallowed"


def test_pools_are_named_by_environment_and_templates_by_pool_and_what_defines_them() -> None:
    pool = objects.pool_name("My Env_1")
    assert pool.startswith("hangar-my-env-1-") and len(pool) == len("hangar-my-env-1-") + 6
    assert objects.pool_name("my env 1") != pool  # same slug, another name: another pool
    assert objects.pool_name(None) == objects.DEFAULT_POOL
    long = objects.pool_name("x" * 200 + "!")
    assert len(long) <= 44 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", long)
    assert objects.pool_name("***").startswith("hangar-")
    policy = objects.network_policy(Network())
    name = objects.template_name(pool, IMAGE, PodSettings(), policy)
    assert name.startswith(f"{pool}-") and len(name) <= 63
    assert objects.template_name(pool, "other:1", PodSettings(), policy) != name
    assert objects.template_name(pool, IMAGE, PodSettings(memory_mb=1), policy) != name
    other = objects.network_policy(Network(("10.0.0.0/8",)))
    assert objects.template_name(pool, IMAGE, PodSettings(), other) != name
    assert objects.warm_pool(pool, name, 3)["spec"] == {
        "replicas": 3, "sandboxTemplateRef": {"name": name},
        "updateStrategy": {"type": "Recreate"}}
    made = objects.template(name, pool, IMAGE, PodSettings(), {})
    assert made["metadata"]["labels"][objects.POOL_LABEL] == pool


def test_the_network_policy_denies_ingress_and_internal_metadata_and_control_plane_egress(
) -> None:
    policy = objects.network_policy(Network(), ("34.1.2.3/32",))
    assert policy["ingress"] == []
    dns, anywhere = policy["egress"]
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    system = {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    assert {"namespaceSelector": system,
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}} in dns["to"]
    v4, v6 = (peer["ipBlock"] for peer in anywhere["to"])
    assert "ports" not in anywhere
    assert v4["cidr"] == "0.0.0.0/0" and v6["cidr"] == "::/0"
    for cidr in ("169.254.169.254/32", "169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12",
                 "192.168.0.0/16", "100.64.0.0/10", "34.1.2.3/32"):
        assert cidr in v4["except"]
    assert v6["except"] == ["fd20:ce::254/128", "fd00::/8", "fe80::/10"]
    kept = objects.network_policy(Network(("10.8.0.0/14",)))["egress"][1]["to"][0]["ipBlock"]
    assert kept["except"] == ["169.254.169.254/32", "169.254.0.0/16", "10.8.0.0/14"]


def test_the_stand_in_takes_the_policy_and_refuses_a_field_the_v1beta1_types_lack(
    sandboxes: GkeSandboxes,
) -> None:
    from kubernetes.client.exceptions import ApiException

    policy = objects.network_policy(Network(), ("34.1.2.3/32",))
    name = f"hangar-check-{uuid.uuid4().hex[:6]}"
    body = objects.template(name, "p", IMAGE, PodSettings(), policy)
    create = functools.partial(sandboxes._objects.create_namespaced_custom_object,
                               objects.EXTENSIONS_GROUP, objects.VERSION, "default",
                               objects.TEMPLATES)  # fmt: skip
    create(body)
    assert _get(sandboxes, objects.TEMPLATES, name)["spec"]["networkPolicy"] == policy
    wrong = objects.template(f"{name}-x", "p", IMAGE, PodSettings(),
                             {**policy, "policyTypes": ["Egress"]})  # fmt: skip
    with pytest.raises(ApiException) as refused:
        create(wrong)
    assert "policyTypes" in str(refused.value.body)
    sandboxes._objects.delete_namespaced_custom_object(
        objects.EXTENSIONS_GROUP, objects.VERSION, "default", objects.TEMPLATES, name)


def test_a_claim_labels_itself_and_its_pod_and_keeps_the_time_to_the_microsecond() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    made = objects.claim("hangar-0123abcd", "pool", {"hangar.session": "s1"}, when, None, "t1")
    labels = made["metadata"]["labels"]
    assert labels == {**made["spec"]["additionalPodMetadata"]["labels"],
                      objects.TEMPLATE_LABEL: "t1"}  # fmt: skip
    assert labels[objects.SANDBOX_ID] == "hangar-0123abcd" and labels["hangar.session"] == "s1"
    assert objects.user_labels(made) == {"hangar.session": "s1"}
    assert objects.created_at(made) == when
    assert set(made["spec"]) == {"warmPoolRef", "additionalPodMetadata"}


@pytest.mark.parametrize(("condition", "expected"), [
    (None, SandboxState.PENDING),
    ({"status": "False", "reason": "SandboxNotReady", "message": "Sandbox is not ready"},
     SandboxState.PENDING),
    ({"status": "False", "reason": "DependenciesNotReady",
      "message": "Unschedulable: pod triggered scale-up"}, SandboxState.PENDING),
    ({"status": "False", "reason": "DependenciesNotReady", "message": "ErrImagePull: no such"},
     SandboxState.FAILED),
    ({"status": "False", "reason": "ClaimExpired"}, SandboxState.FAILED),
    ({"status": "True", "reason": "DependenciesReady"}, SandboxState.READY),
])  # fmt: skip
def test_a_claims_ready_condition_reads_as_pending_ready_or_failed_with_its_reason(
    condition: dict[str, str] | None, expected: SandboxState
) -> None:
    status: dict[str, Any] = {"sandbox": {"name": "hangar-0123abcd"}}
    if condition is not None:
        status["conditions"] = [{"type": "Ready", **condition}]
    read = objects.claim_status({"metadata": {"name": "x"}, "status": status})
    assert read.state is expected
    assert read == SandboxStatus(SandboxState.READY) if expected is SandboxState.READY \
        else read.reason  # fmt: skip


# -- the URL and the configuration -----------------------------------------------------------


def test_the_url_names_a_context_a_namespace_and_optional_image_runtime_pool_and_denials(
) -> None:
    assert parse_url("gke://gke_p_z_c/agents") == ("gke_p_z_c", "agents", {})
    assert parse_url("gke://ctx/ns?image=a/b:1&runtime_class=gvisor&warm_pool=2&"
                     "deny=10.0.0.0/8,fd00::/8") == (
        "ctx", "ns", {"image": "a/b:1", "runtime_class": "gvisor", "warm_pool": "2",
                      "deny": "10.0.0.0/8,fd00::/8"})
    for bad in ("gke://ctx", "gke:///ns", "gke://ctx/", "gke://ctx/ns?colour=red", "local:///x",
                "gke://ctx/ns?warm_pool=-1", "gke://ctx/ns?warm_pool=two",
                "gke://ctx/ns?deny=10.0.0.0/33"):
        with pytest.raises(InvalidSettings):
            parse_url(bad)


def test_an_endpoint_setting_configures_the_client_with_its_ca_and_a_bearer_token_hook(
    tmp_path: Path,
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read until a request")
    settings = Settings.build(data_dir=tmp_path, harness_dir=tmp_path,
                              gke_endpoint="https://10.0.0.1", gke_ca=str(ca))  # fmt: skip
    cfg = configuration("ignored", settings)
    assert cfg.host == "https://10.0.0.1" and cfg.ssl_ca_cert == str(ca)
    assert cfg.api_key_prefix == {"authorization": "Bearer"}
    assert callable(cfg.refresh_api_key_hook)


def test_a_ca_given_as_pem_text_is_written_once_to_a_private_file_the_client_reads(
    tmp_path: Path,
) -> None:
    pem = f"-----BEGIN CERTIFICATE-----\n{uuid.uuid4().hex}\n-----END CERTIFICATE-----"
    settings = Settings.build(data_dir=tmp_path, harness_dir=tmp_path,
                              gke_endpoint="https://10.0.0.1", gke_ca=pem)  # fmt: skip
    first = configuration("ignored", settings).ssl_ca_cert
    assert Path(first).read_text() == pem + "\n"
    assert Path(first).stat().st_mode & 0o777 == 0o600
    assert configuration("ignored", settings).ssl_ca_cert == first
    Path(first).unlink()


def test_the_backend_reads_kubeconfig_as_it_is_when_it_opens_not_at_import(
    stand_in: KubeStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kubernetes  # noqa: F401  (imported before KUBECONFIG names the file below)

    moved = tmp_path / "elsewhere.yaml"
    moved.write_text(Path(stand_in.kubeconfig).read_text().replace(
        stand_in.context, "moved-context"))
    monkeypatch.setenv("KUBECONFIG", str(moved))
    settings = Settings.build(data_dir=tmp_path, harness_dir=tmp_path)
    backend = GkeSandboxes.from_url("gke://moved-context/default", settings)
    assert backend.list({"conformance": uuid.uuid4().hex}) == []
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(InvalidSettings, match="moved-context"):
        GkeSandboxes.from_url("gke://moved-context/default", settings)


def test_an_unknown_kubeconfig_context_is_invalid_settings(
    stand_in: KubeStandIn, tmp_path: Path
) -> None:
    settings = Settings.build(data_dir=tmp_path, harness_dir=tmp_path)
    with pytest.raises(InvalidSettings, match="no-such-context"):
        GkeSandboxes.from_url("gke://no-such-context/default", settings)


# -- errors ----------------------------------------------------------------------------------


_MODULES = ("kubernetes.client.exceptions", "kubernetes.config.config_exception",
            "urllib3.exceptions", "websocket._exceptions")  # fmt: skip


def test_every_exception_class_of_the_client_and_its_transports_is_in_the_table() -> None:
    missing = []
    for name in _MODULES:
        module = importlib.import_module(name)
        for cls_name, cls in vars(module).items():
            if (inspect.isclass(cls) and issubclass(cls, BaseException)
                    and cls.__module__ == module.__name__
                    and (name, cls_name) not in TABLE):  # fmt: skip
                missing.append(f"{name}.{cls_name}")
    assert missing == []


def test_api_errors_map_by_status_and_transport_errors_are_unavailable() -> None:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import MaxRetryError
    from websocket import WebSocketConnectionClosedException

    assert isinstance(translate(ApiException(status=404), "hangar-0123abcd"), SandboxNotFound)
    handshake = ApiException(status=0, reason="Handshake status 404 Not Found")
    assert isinstance(translate(handshake, "hangar-0123abcd"), SandboxNotFound)
    assert isinstance(translate(ApiException(status=0, reason="refused")), SandboxUnavailable)
    assert isinstance(translate(ApiException(status=503)), SandboxUnavailable)
    forbidden = translate(ApiException(status=403))
    assert isinstance(forbidden, SandboxError) and not isinstance(forbidden, SandboxUnavailable)
    assert isinstance(translate(MaxRetryError(None, "/x")), SandboxUnavailable)  # type: ignore[arg-type]
    assert isinstance(translate(WebSocketConnectionClosedException()), SandboxUnavailable)
    for module, name in TABLE:
        cls = getattr(importlib.import_module(module), name)
        try:
            exc = cls("x")
        except TypeError:
            continue  # needs more arguments; its table entry is checked above
        assert isinstance(translate(exc), HangarError)


# -- import time -----------------------------------------------------------------------------

_COLD = """
import json, os, sys
from hangar.functions import ApiFunction

os.environ.update(json.loads(sys.argv[1]))
ApiFunction.from_env(os.environ)
print(json.dumps(sorted(m for m in sys.modules
                        if m.split(".")[0] in ("kubernetes", "websocket")
                        or m == "hangar.sandboxes.gke")))
"""


def test_a_cold_api_function_on_gke_imports_neither_the_backend_nor_the_kubernetes_client(
    tmp_path: Path,
) -> None:
    cloud = {"HANGAR_DB": "firestore://bench/(default)", "HANGAR_SESSION_STORE": "gs://b/s",
             "HANGAR_KEYS": "gcpkms://projects/p/locations/global/keyRings/r/cryptoKeys/k",
             "HANGAR_TICKS": "cloudtasks://projects/p/locations/l/queues/q",
             "HANGAR_TICKS_URL": "http://127.0.0.1:9/", "HANGAR_DATA_DIR": str(tmp_path),
             "HANGAR_SANDBOXES": "gke://no-such-context/agents"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _COLD, json.dumps(cloud)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []
