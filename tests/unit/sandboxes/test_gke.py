"""GKE sandboxes: the conformance suite against the Kubernetes stand-in (pods backed by local
sandboxes), plus the Agent Sandbox manifests, the claim's status, the URL and the error table."""

from __future__ import annotations

import importlib
import inspect
import json
import queue
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
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
from hangar.sandboxes import agentsandbox as objects
from hangar.sandboxes.agentsandbox import PodSettings
from hangar.sandboxes.gke import (
    TABLE,
    GkeSandboxes,
    configuration,
    parse_url,
    translate,
)
from hangar.sandboxes.local import LocalSandboxes
from hangar.sandboxes.podexec import BOOT
from hangar.testing.sandboxes import SandboxesConformance, make, run

from emulators.kube import KubeStandIn

pytestmark = pytest.mark.sandbox

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


def test_one_template_and_pool_per_image_are_made_and_claims_never_carry_env(
    sandboxes: GkeSandboxes, stand_in: KubeStandIn
) -> None:
    label = uuid.uuid4().hex
    spec = SandboxSpec(labels={"conformance": label}, env={"SECRET": "s3cret-value"})
    first = sandboxes.create(spec)
    sandboxes.create(SandboxSpec(labels={"conformance": label}))
    pool = objects.warm_pool(IMAGE, sandboxes.pod)["metadata"]["name"]
    claim = cast(dict[str, Any], sandboxes._objects.get_namespaced_custom_object(
        objects.EXTENSIONS_GROUP, objects.VERSION, "default", objects.CLAIMS, first.id))
    assert claim["spec"]["warmPoolRef"] == {"name": pool}
    assert "env" not in claim["spec"] and "s3cret-value" not in str(claim)
    assert claim["spec"]["additionalPodMetadata"]["labels"][objects.SANDBOX_ID] == first.id
    pools = cast(dict[str, Any], sandboxes._objects.list_namespaced_custom_object(
        objects.EXTENSIONS_GROUP, objects.VERSION, "default", objects.POOLS))["items"]
    assert [p["metadata"]["name"] for p in pools].count(pool) == 1


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
    made = objects.template(IMAGE, PodSettings(memory_mb=2048, runtime_class="gvisor"))
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


def test_templates_and_pools_are_named_by_what_defines_them_not_by_replicas() -> None:
    name = objects.template(IMAGE, PodSettings())["metadata"]["name"]
    assert objects.warm_pool(IMAGE, PodSettings(replicas=3))["metadata"]["name"] == name
    assert objects.warm_pool(IMAGE, PodSettings(replicas=3))["spec"] == {
        "replicas": 3, "sandboxTemplateRef": {"name": name}}
    assert objects.template("other:1", PodSettings())["metadata"]["name"] != name
    assert objects.template(IMAGE, PodSettings(memory_mb=1))["metadata"]["name"] != name


def test_a_claim_labels_itself_and_its_pod_and_keeps_the_time_to_the_microsecond() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    made = objects.claim("hangar-0123abcd", "pool", {"hangar.session": "s1"}, when)
    labels = made["metadata"]["labels"]
    assert labels == made["spec"]["additionalPodMetadata"]["labels"]
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


def test_the_url_names_a_context_a_namespace_and_optional_image_and_runtime_class() -> None:
    assert parse_url("gke://gke_p_z_c/agents") == ("gke_p_z_c", "agents", {})
    assert parse_url("gke://ctx/ns?image=a/b:1&runtime_class=gvisor") == (
        "ctx", "ns", {"image": "a/b:1", "runtime_class": "gvisor"})
    for bad in ("gke://ctx", "gke:///ns", "gke://ctx/", "gke://ctx/ns?colour=red", "local:///x"):
        with pytest.raises(InvalidSettings):
            parse_url(bad)


def test_an_endpoint_setting_configures_the_client_with_its_ca_and_a_bearer_token_hook(
    tmp_path: Path,
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read until a request")
    settings = Settings.build(data_dir=tmp_path, harness_dir=tmp_path,
                              gke_endpoint="https://10.0.0.1", gke_ca=ca)  # fmt: skip
    cfg = configuration("ignored", settings)
    assert cfg.host == "https://10.0.0.1" and cfg.ssl_ca_cert == str(ca)
    assert cfg.api_key_prefix == {"authorization": "Bearer"}
    assert callable(cfg.refresh_api_key_hook)


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
