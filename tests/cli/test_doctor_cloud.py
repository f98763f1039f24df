"""``hangar doctor`` on cloud settings, called in-process with an environment mapping: the
functions read from the Cloud Run stand-in, keys from the KMS stand-in, checkpoints on
fake-gcs-server, the Cloud Tasks queue from a small gRPC server answering ``GetQueue``, and a
fake hangar REST API for the server check (so each run's exit status is the cloud checks' own).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import pytest
from hangar.blobs.local import LocalBlobs
from hangar.cli.doctor import doctor
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb

from emulators.cloudrun import CloudRunStandIn, service_doc
from emulators.kms import KmsStandIn
from emulators.kube import KubeStandIn

REGION = "europe-west1"
TOKEN = "hgr-secret-token-for-doctor-tests"
INVOKER = "hangar-tasks@demo.iam.gserviceaccount.com"
ROOT = Path(__file__).parents[2]


# -- servers ------------------------------------------------------------------------------


class _FakeApi(BaseHTTPRequestHandler):
    """hangar's REST surface, as far as doctor's server check reads it."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        doc: dict[str, Any]
        if self.path == "/api/openapi.json":
            status, doc = 200, {"openapi": "3.1.0"}
        elif self.headers.get("Authorization") == f"Bearer {TOKEN}":
            status, doc = 200, {"sessions": []}
        else:
            status, doc = 401, {"error": {"code": "unauthorized", "message": "no token"}}
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@dataclass
class Queues:
    """A Cloud Tasks gRPC endpoint serving ``GetQueue`` over the queues in ``states``."""

    states: dict[str, int] = field(default_factory=dict)
    endpoint: str = ""
    server: Any = None

    def start(self) -> None:
        import grpc  # type: ignore[import-untyped,unused-ignore]
        from google.cloud import tasks_v2

        def get_queue(request: Any, context: Any) -> Any:
            if request.name not in self.states:
                context.abort(grpc.StatusCode.NOT_FOUND, f"Queue {request.name} not found")
            return tasks_v2.Queue(name=request.name, state=self.states[request.name])

        method = grpc.unary_unary_rpc_method_handler(
            get_queue, request_deserializer=tasks_v2.GetQueueRequest.deserialize,
            response_serializer=tasks_v2.Queue.serialize,
        )  # fmt: skip
        handler = grpc.method_handlers_generic_handler(
            "google.cloud.tasks.v2.CloudTasks", {"GetQueue": method}
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.endpoint = f"127.0.0.1:{port}"


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[KubeStandIn]:
    """The sandbox cluster these deployments name (``gke://hangar-dev/...``): the Kubernetes
    stand-in, found through ``KUBECONFIG`` as an operator's machine would find it."""
    kube = KubeStandIn()
    kube.context = "hangar-dev"
    with kube, pytest.MonkeyPatch.context() as patch:
        patch.setenv("KUBECONFIG", kube.kubeconfig)
        yield kube


@pytest.fixture(scope="module")
def run() -> Iterator[CloudRunStandIn]:
    with CloudRunStandIn() as stand_in:
        yield stand_in


@pytest.fixture(scope="module")
def kms() -> Iterator[KmsStandIn]:
    with KmsStandIn() as stand_in:
        yield stand_in


@pytest.fixture
def gcs(cloud_emulators: Any) -> Any:
    """The run's fake-gcs-server (tests/conftest.py)."""
    return cloud_emulators.gcs


@pytest.fixture
def firestore(cloud_emulators: Any) -> Any:
    """The run's Firestore emulator (tests/conftest.py)."""
    return cloud_emulators.firestore


@pytest.fixture(scope="module")
def queues() -> Iterator[Queues]:
    endpoint = Queues()
    endpoint.start()
    yield endpoint
    endpoint.server.stop(0)


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeApi)
    Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def refused_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- a deployment -------------------------------------------------------------------------


@dataclass
class Deployment:
    """One project's worth of cloud: a bucket, a queue, a KMS key and the two functions."""

    project: str
    env: dict[str, str]
    run: CloudRunStandIn
    api_env: dict[str, str]

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{REGION}"

    def name(self, function: str) -> str:
        return f"{self.parent}/services/hangar-{function}"

    def deploy(self, function: str, **changes: Any) -> dict[str, Any]:
        doc = service_doc(self.name(function), **changes)
        self.run.put_service(doc)
        return doc


@pytest.fixture
def cloud(
    tmp_path: Path, run: CloudRunStandIn, kms: KmsStandIn, gcs: Any, queues: Queues, api_url: str,
    cloud_emulators: Any,
) -> Deployment:
    """Settings as an operator's machine has them, and the functions Terraform would deploy:
    both ready, sharing the backends, the api posting ticks to the ticks function, the api public
    and the ticks function invocable by the tasks service account only."""
    project = f"demo-{uuid.uuid4().hex[:8]}"
    bucket = f"hangar-{uuid.uuid4().hex[:12]}"
    gcs.create_bucket(bucket)
    queue = f"projects/{project}/locations/{REGION}/queues/hangar-ticks"
    queues.states[queue] = 1  # RUNNING
    backends = {
        "HANGAR_DB": f"firestore://{project}/hangar",
        "HANGAR_SESSION_STORE": f"gs://{bucket}/hangar",
        "HANGAR_KEYS": f"gcpkms://projects/{project}/locations/{REGION}/keyRings/hangar/"
        "cryptoKeys/vault",
        "HANGAR_TICKS": f"cloudtasks://{queue}",
    }
    deployment = Deployment(project, {}, run, {})
    ticks = deployment.deploy("ticks", env={**backends, "HANGAR_TASKS_INVOKER": INVOKER})
    deployment.api_env = {**backends, "HANGAR_TASKS_INVOKER": INVOKER,
                          "HANGAR_TICKS_URL": ticks["uri"]}  # fmt: skip
    deployment.deploy("api", uri=api_url, env=deployment.api_env)
    run.set_invokers(deployment.name("api"), ["allUsers"])
    run.set_invokers(deployment.name("ticks"), [f"serviceAccount:{INVOKER}"])
    data_dir = tmp_path / "data"
    SqliteDb.from_url(f"sqlite://{data_dir}/hangar.db").close()  # this machine's own db
    deployment.env = {
        "HOME": str(tmp_path),
        "HANGAR_DATA_DIR": str(data_dir),
        "HANGAR_URL": api_url,
        "HANGAR_TOKEN": TOKEN,
        "HANGAR_SANDBOXES": "gke://hangar-dev/sandboxes",
        "HANGAR_SESSION_STORE": backends["HANGAR_SESSION_STORE"],
        "STORAGE_EMULATOR_HOST": gcs.url,
        "HANGAR_KEYS": backends["HANGAR_KEYS"],
        "HANGAR_KMS_ENDPOINT": kms.url,
        "HANGAR_TICKS": backends["HANGAR_TICKS"],
        "HANGAR_TASKS_ENDPOINT": queues.endpoint,
        "HANGAR_TICKS_URL": ticks["uri"],
        "HANGAR_TASKS_INVOKER": INVOKER,
        "HANGAR_RUN_ENDPOINT": run.url,
        **cloud_emulators.signing_environment(),  # URLs signed as Terraform has the functions
    }
    return deployment


@dataclass
class Run:
    code: int
    lines: list[str]

    def at(self, level: str) -> list[str]:
        return [line for line in self.lines if line.split()[0] == level]

    def one(self, level: str, *words: str) -> str:
        found = [line for line in self.at(level) if all(w in line for w in words)]
        assert len(found) == 1, "\n".join(self.lines)
        return found[0]


def run_doctor(
    capsys: pytest.CaptureFixture[str], env: dict[str, str], timeout: float = 10.0
) -> Run:
    capsys.readouterr()
    code = doctor(env, timeout=timeout)
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert all(line.split()[0] in ("OK", "INFO", "WARN", "FAIL") for line in lines), out
    assert code == (1 if any(line.startswith("FAIL") for line in lines) else 0), out
    return Run(code, lines)


# -- the deployed functions ---------------------------------------------------------------


def test_a_correct_deployment_is_all_ok_and_shows_the_function_urls(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_doctor(capsys, cloud.env)
    assert result.code == 0
    assert result.at("FAIL") == [] and result.at("WARN") == [], "\n".join(result.lines)
    api_url = cloud.env["HANGAR_URL"]
    ticks_url = cloud.env["HANGAR_TICKS_URL"]
    assert result.one("OK", "function hangar-api: ready at", api_url)
    assert result.one("OK", "function hangar-ticks: ready at", ticks_url)
    assert result.one("OK", "hangar-api posts ticks to hangar-ticks")
    assert result.one("OK", "share the cloud backends")
    assert result.one("OK", "hangar-ticks is private")
    assert result.one("OK", "hangar-api is public")
    assert result.one("OK", "db (HANGAR_DB", "answered a read")
    assert result.one("OK", "blobs (HANGAR_SESSION_STORE gs://", "no checkpoints yet")
    assert result.one("OK", "keys (HANGAR_KEYS gcpkms://", "wrapped and unwrapped")
    assert result.one("OK", "ticks (HANGAR_TICKS cloudtasks://", "the queue is running")
    assert result.one("OK", "the token works")
    assert TOKEN not in "\n".join(result.lines)


def test_a_missing_ticks_function_fails(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    cloud.run.remove_service(cloud.name("ticks"))
    result = run_doctor(capsys, cloud.env)
    assert result.code == 1
    assert "not found" in result.one("FAIL", "function hangar-ticks")


def test_no_functions_at_all_is_a_warning_naming_the_prefix(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_doctor(capsys, {**cloud.env, "HANGAR_FUNCTIONS_PREFIX": "other"})
    assert result.code == 0
    line = result.one("WARN", "no other-api or other-ticks")
    assert "hangar-api" in line and "HANGAR_FUNCTIONS_PREFIX" in line


def test_the_one_prefix_with_both_functions_is_found_when_none_is_set(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    for function in ("api", "ticks"):  # Terraform's dev environment: name_prefix hangar-dev
        (doc,) = [s for s in cloud.run.services() if s["name"] == cloud.name(function)]
        cloud.run.remove_service(doc["name"])
        cloud.run.put_service({**doc, "name": doc["name"].replace("/hangar-", "/hangar-dev-")})
    cloud.run.set_invokers(cloud.name("api").replace("/hangar-", "/hangar-dev-"), ["allUsers"])
    result = run_doctor(capsys, cloud.env)
    assert result.code == 0 and result.at("WARN") == [], "\n".join(result.lines)
    assert result.one("INFO", "found hangar-dev-api and hangar-dev-ticks",
                      "HANGAR_FUNCTIONS_PREFIX=hangar-dev")  # fmt: skip
    assert result.one("OK", "function hangar-dev-ticks: ready")


def test_a_ticks_url_that_is_not_the_ticks_function_fails(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**cloud.api_env, "HANGAR_TICKS_URL": "https://elsewhere.run.app"}
    cloud.deploy("api", uri=cloud.env["HANGAR_URL"], env=env)
    result = run_doctor(capsys, cloud.env)
    assert result.code == 1
    line = result.one("FAIL", "HANGAR_TICKS_URL")
    assert "https://elsewhere.run.app" in line and cloud.env["HANGAR_TICKS_URL"] in line


def test_functions_on_different_backends_fail_naming_the_setting(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**cloud.api_env, "HANGAR_DB": f"firestore://{cloud.project}/other"}
    cloud.deploy("api", uri=cloud.env["HANGAR_URL"], env=env)
    result = run_doctor(capsys, cloud.env)
    assert result.code == 1
    assert "hangar-api has firestore://" in result.one("FAIL", "HANGAR_DB differs")


def test_functions_on_an_embedded_backend_fail(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {k: v for k, v in cloud.api_env.items() if k != "HANGAR_KEYS"}
    cloud.deploy("api", uri=cloud.env["HANGAR_URL"], env=env)
    ticks_env = {k: v for k, v in env.items() if k != "HANGAR_TICKS_URL"}
    cloud.deploy("ticks", uri=cloud.env["HANGAR_TICKS_URL"], env=ticks_env)
    result = run_doctor(capsys, cloud.env)
    assert "unset (the embedded default)" in result.one("FAIL", "HANGAR_KEYS of the functions")


def test_a_function_that_is_not_ready_fails_with_its_reason(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    cloud.deploy("ticks", uri=cloud.env["HANGAR_TICKS_URL"], env=cloud.api_env, ready=False,
                 message="Container failed to start")  # fmt: skip
    result = run_doctor(capsys, cloud.env)
    assert "Container failed to start" in result.one("FAIL", "function hangar-ticks: not ready")


@pytest.mark.parametrize("how", ["allUsers", "invokerIamDisabled"])
def test_a_public_ticks_function_is_a_warning(
    cloud: Deployment, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    # A WARN, not a FAIL: a forged tick costs one state read and changes nothing (ticks are
    # hints), but the function departs from Terraform and anyone can make it work.
    if how == "allUsers":
        cloud.run.set_invokers(cloud.name("ticks"), ["allUsers", f"serviceAccount:{INVOKER}"])
    else:
        cloud.deploy("ticks", uri=cloud.env["HANGAR_TICKS_URL"], env=cloud.api_env,
                     invoker_iam_disabled=True)  # fmt: skip
    result = run_doctor(capsys, cloud.env)
    assert result.code == 0
    assert how in result.one("WARN", "function hangar-ticks is public", "anyone can post ticks")


def test_an_api_function_that_is_not_public_is_a_warning(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    cloud.run.set_invokers(cloud.name("api"), [])
    result = run_doctor(capsys, cloud.env)
    assert result.code == 0
    assert "identity token" in result.one("WARN", "function hangar-api is not public")


def test_settings_that_differ_from_the_functions_are_a_warning(
    cloud: Deployment, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    result = run_doctor(capsys, {**cloud.env, "HANGAR_DB": f"sqlite://{tmp_path}/data/hangar.db"})
    assert "the functions use firestore://" in result.one("WARN", "HANGAR_DB here is sqlite://")


def test_an_unreachable_cloud_run_api_fails_naming_the_endpoint(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"http://127.0.0.1:{refused_port()}"
    result = run_doctor(capsys, {**cloud.env, "HANGAR_RUN_ENDPOINT": endpoint})
    assert result.code == 1
    assert result.one("FAIL", "functions (Cloud Run", f"HANGAR_RUN_ENDPOINT {endpoint}")


# -- where the functions are ----------------------------------------------------------------


def test_project_and_region_come_from_the_settings_when_no_url_names_them(
    cloud: Deployment, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = {k: v for k, v in cloud.env.items() if k not in ("HANGAR_KEYS", "HANGAR_TICKS")}
    result = run_doctor(capsys, env)
    assert result.one("INFO", "functions: not checked: set HANGAR_PROJECT and HANGAR_REGION")
    result = run_doctor(capsys, {**env, "HANGAR_PROJECT": cloud.project, "HANGAR_REGION": REGION})
    assert result.one("OK", "function hangar-api: ready")


def test_urls_naming_different_projects_are_a_warning(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_doctor(capsys, {**cloud.env, "HANGAR_DB": "firestore://another-project/hangar"})
    line = result.one("WARN", "different projects")
    assert "another-project (HANGAR_DB)" in line and f"{cloud.project} (HANGAR_TICKS)" in line


def test_embedded_settings_skip_the_functions_with_an_info_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], api_url: str
) -> None:
    env = {"HOME": str(tmp_path), "HANGAR_URL": api_url, "HANGAR_TOKEN": TOKEN}
    result = run_doctor(capsys, env)
    assert result.one("INFO", "functions: not checked (embedded settings")
    assert result.one("INFO", "db (HANGAR_DB sqlite://", "does not exist yet")
    assert not (tmp_path / ".hangar" / "hangar.db").exists()  # doctor makes nothing


def test_doctor_on_embedded_settings_loads_no_google_library(tmp_path: Path) -> None:
    # google and google.cloud are namespaces that .pth files make at start-up: not a load.
    script = ("import sys; from hangar.cli.doctor import doctor; "
              f"doctor({{'HOME': {str(tmp_path)!r}, 'HANGAR_URL': 'http://127.0.0.1:1'}}, "
              "timeout=5); print(sorted(m for m in sys.modules if m.startswith('google.') "
              "and m != 'google.cloud'))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=False).stdout  # fmt: skip
    assert out.splitlines()[-1] == "[]", out


# -- the configuration ----------------------------------------------------------------------


def test_gke_sandboxes_with_local_checkpoints_are_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], api_url: str
) -> None:
    env = {"HOME": str(tmp_path), "HANGAR_URL": api_url, "HANGAR_TOKEN": TOKEN,
           "HANGAR_SANDBOXES": "gke://hangar-dev/sandboxes"}  # fmt: skip
    result = run_doctor(capsys, env)
    assert result.code == 0
    line = result.one("WARN", "checkpoints are not on GCS while sandboxes run on GKE")
    assert "HANGAR_SESSION_STORE file://" in line and "gs://BUCKET/PREFIX" in line


def test_a_missing_key_file_with_checkpoints_stored_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], api_url: str
) -> None:
    settings = Settings.build(data_dir=tmp_path / "data", harness_dir=tmp_path / "harnesses")
    LocalBlobs.from_url(settings.session_store).put("sessions/s1/c1/meta.json", b"{}")
    env = {"HOME": str(tmp_path), "HANGAR_DATA_DIR": str(settings.data_dir),
           "HANGAR_URL": api_url, "HANGAR_TOKEN": TOKEN,
           "HANGAR_SANDBOXES": "gke://hangar-dev/sandboxes"}  # fmt: skip
    result = run_doctor(capsys, env)
    assert result.code == 1
    line = result.one("FAIL", "keys (HANGAR_KEYS local://")
    assert "missing but checkpoints exist" in line and "put the key file back" in line
    assert not (settings.data_dir / "vault.key").exists()  # doctor makes no new key


def test_a_local_key_file_that_others_can_read_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], api_url: str
) -> None:
    key = tmp_path / "data" / "vault.key"
    key.parent.mkdir()
    key.write_bytes(b"k" * 32)
    key.chmod(0o644)
    env = {"HOME": str(tmp_path), "HANGAR_DATA_DIR": str(key.parent), "HANGAR_URL": api_url,
           "HANGAR_TOKEN": TOKEN, "HANGAR_SANDBOXES": "gke://hangar-dev/ns"}  # fmt: skip
    result = run_doctor(capsys, env)
    assert "chmod 600" in result.one("WARN", "keys (HANGAR_KEYS", "mode 644")
    assert result.one("OK", "keys (HANGAR_KEYS", "wrapped and unwrapped")


def test_cloud_ticks_without_a_ticks_url_is_an_info_line(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {k: v for k, v in cloud.env.items() if k != "HANGAR_TICKS_URL"}
    result = run_doctor(capsys, env)
    assert result.one("INFO", "HANGAR_TICKS_URL is unset", "posted to itself")
    assert result.code == 0


# -- unreachable backends -------------------------------------------------------------------


def test_a_kms_endpoint_nobody_listens_on_fails_naming_hangar_keys(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"http://127.0.0.1:{refused_port()}"
    result = run_doctor(capsys, {**cloud.env, "HANGAR_KMS_ENDPOINT": endpoint})
    assert result.code == 1
    assert "backend_error" in result.one("FAIL", "keys (HANGAR_KEYS gcpkms://")


def test_a_kms_endpoint_that_never_answers_fails_within_the_timeout(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        result = run_doctor(capsys, {**cloud.env, "HANGAR_KMS_ENDPOINT": endpoint}, timeout=1)
    assert "no answer within 1 s" in result.one("FAIL", "keys (HANGAR_KEYS")


def test_a_storage_endpoint_nobody_listens_on_fails_naming_the_session_store(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    host = f"http://127.0.0.1:{refused_port()}"
    result = run_doctor(capsys, {**cloud.env, "STORAGE_EMULATOR_HOST": host})
    assert result.code == 1
    assert result.one("FAIL", "blobs (HANGAR_SESSION_STORE gs://")


def test_a_missing_bucket_fails_naming_the_session_store(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"gs://no-such-{uuid.uuid4().hex[:8]}/hangar"
    result = run_doctor(capsys, {**cloud.env, "HANGAR_SESSION_STORE": store})
    assert result.code == 1
    assert result.one("FAIL", f"blobs (HANGAR_SESSION_STORE {store})")


def test_a_missing_or_unreachable_queue_fails_naming_hangar_ticks(
    cloud: Deployment, capsys: pytest.CaptureFixture[str], queues: Queues
) -> None:
    queue = f"projects/{cloud.project}/locations/{REGION}/queues/nope"
    result = run_doctor(capsys, {**cloud.env, "HANGAR_TICKS": f"cloudtasks://{queue}"})
    assert "not found" in result.one("FAIL", "ticks (HANGAR_TICKS cloudtasks://").lower()
    endpoint = f"127.0.0.1:{refused_port()}"
    result = run_doctor(capsys, {**cloud.env, "HANGAR_TASKS_ENDPOINT": endpoint})
    assert result.one("FAIL", "ticks (HANGAR_TICKS", f"HANGAR_TASKS_ENDPOINT {endpoint}")


def test_a_paused_queue_is_a_warning(
    cloud: Deployment, capsys: pytest.CaptureFixture[str], queues: Queues
) -> None:
    queues.states[cloud.env["HANGAR_TICKS"].removeprefix("cloudtasks://")] = 2  # PAUSED
    result = run_doctor(capsys, cloud.env)
    assert result.one("WARN", "ticks (HANGAR_TICKS", "the queue is PAUSED")


def test_firestore_answers_a_read_and_an_unreachable_one_fails_naming_hangar_db(
    cloud: Deployment, capsys: pytest.CaptureFixture[str], firestore: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {**cloud.env, "HANGAR_DB": cloud.api_env["HANGAR_DB"]}  # the functions' own
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", firestore.host)  # the client reads os.environ
    result = run_doctor(capsys, env)
    assert result.code == 0, "\n".join(result.lines)
    assert result.one("OK", "db (HANGAR_DB firestore://", "answered a read")
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{refused_port()}")
    result = run_doctor(capsys, env, timeout=2)
    assert result.code == 1
    assert result.one("FAIL", "db (HANGAR_DB firestore://")


def test_a_db_url_no_backend_knows_fails_naming_hangar_db(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_doctor(capsys, {**cloud.env, "HANGAR_DB": "mongodb://x/y"})
    assert "invalid_settings" in result.one("FAIL", "db (HANGAR_DB mongodb://x/y)")


# -- direct checkpoints -----------------------------------------------------------------------


def test_gke_and_gcs_without_signing_credentials_warn_that_checkpoints_go_through_the_control_plane(
    cloud: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {k: v for k, v in cloud.env.items() if "SIGN" not in k}
    line = run_doctor(capsys, env).one("WARN", "direct checkpoints: nothing signs URLs")
    assert "HANGAR_SIGNING_SERVICE_ACCOUNT" in line and "through the control plane" in line


def test_gke_and_gcs_with_a_signing_account_sign_a_url_through_the_iam_api(
    cloud: Deployment, cloud_emulators: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    env = cloud.env
    result = run_doctor(capsys, env)
    assert result.one("OK", "direct checkpoints: signed a URL as", cloud_emulators.signer)
    assert not [line for line in result.lines if "direct checkpoints" in line and
                not line.startswith("OK")]  # fmt: skip
    unknown = {**env, "HANGAR_SIGNING_SERVICE_ACCOUNT": "nobody@example.iam.gserviceaccount.com"}
    assert run_doctor(capsys, unknown).one("FAIL", "direct checkpoints:")
