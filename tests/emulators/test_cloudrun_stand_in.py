"""The Cloud Run stand-in, read through the official client (``google.cloud.run_v2`` over REST)
the way ``hangar doctor`` reads it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import run_v2

from emulators.cloudrun import CloudRunStandIn, service_doc

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def stand_in() -> Iterator[CloudRunStandIn]:
    with CloudRunStandIn() as server:
        yield server


@pytest.fixture
def parent() -> str:
    return f"projects/p-{uuid.uuid4().hex[:10]}/locations/europe-west1"


def client(url: str) -> run_v2.ServicesClient:
    return run_v2.ServicesClient(
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        transport="rest",
        client_options=ClientOptions(api_endpoint=url),
    )


def test_the_client_lists_the_services_of_one_parent_across_pages(
    stand_in: CloudRunStandIn, parent: str
) -> None:
    for i in range(5):
        stand_in.put_service(service_doc(f"{parent}/services/svc-{i}"))
    stand_in.put_service(service_doc(parent.replace("europe-west1", "us-east1") + "/services/x"))
    request = {"parent": parent, "page_size": 2}
    pages = list(client(stand_in.url).list_services(request=request).pages)
    assert [len(page.services) for page in pages] == [2, 2, 1]
    listed = client(stand_in.url).list_services(request=request)
    assert [s.name for s in listed] == [f"{parent}/services/svc-{i}" for i in range(5)]


def test_the_client_reads_every_field_doctor_relies_on(
    stand_in: CloudRunStandIn, parent: str
) -> None:
    name = f"{parent}/services/hangar-api"
    doc = service_doc(
        name, uri="https://hangar-api-1.europe-west1.run.app",
        env={"HANGAR_DB": "firestore://p/hangar"}, ingress="INGRESS_TRAFFIC_INTERNAL_ONLY",
        invoker_iam_disabled=True,
    )  # fmt: skip
    doc["template"]["containers"][0]["env"].append(
        {"name": "TOKEN", "valueSource": {"secretKeyRef": {"secret": "tok", "version": "1"}}}
    )
    stand_in.put_service(doc)
    service = client(stand_in.url).get_service(name=name)
    assert service.uri == "https://hangar-api-1.europe-west1.run.app"
    assert list(service.urls) == [service.uri]
    assert service.ingress == run_v2.IngressTraffic.INGRESS_TRAFFIC_INTERNAL_ONLY
    assert service.invoker_iam_disabled is True
    assert service.terminal_condition.type_ == "Ready"
    assert service.terminal_condition.state == run_v2.Condition.State.CONDITION_SUCCEEDED
    env = service.template.containers[0].env
    assert (env[0].name, env[0].value) == ("HANGAR_DB", "firestore://p/hangar")
    assert env[1].value_source.secret_key_ref.secret == "tok"


def test_a_failed_service_carries_its_condition_message(
    stand_in: CloudRunStandIn, parent: str
) -> None:
    name = f"{parent}/services/broken"
    stand_in.put_service(service_doc(name, ready=False, message="Container failed to start"))
    condition = client(stand_in.url).get_service(name=name).terminal_condition
    assert condition.state == run_v2.Condition.State.CONDITION_FAILED
    assert condition.message == "Container failed to start"


def test_an_unknown_service_is_not_found(stand_in: CloudRunStandIn, parent: str) -> None:
    with pytest.raises(exceptions.NotFound) as caught:
        client(stand_in.url).get_service(name=f"{parent}/services/nope")
    assert f"{parent}/services/nope" in caught.value.message


def test_a_removed_service_is_gone_and_a_put_replaces(
    stand_in: CloudRunStandIn, parent: str
) -> None:
    name = f"{parent}/services/svc"
    stand_in.put_service(service_doc(name, uri="https://one.run.app"))
    stand_in.put_service(service_doc(name, uri="https://two.run.app"))
    assert client(stand_in.url).get_service(name=name).uri == "https://two.run.app"
    stand_in.remove_service(name)
    with pytest.raises(exceptions.NotFound):
        client(stand_in.url).get_service(name=name)
    assert list(client(stand_in.url).list_services(parent=parent)) == []


def test_the_iam_policy_names_the_invokers(stand_in: CloudRunStandIn, parent: str) -> None:
    name = f"{parent}/services/svc"
    stand_in.put_service(service_doc(name))
    runs = client(stand_in.url)
    assert list(runs.get_iam_policy(request={"resource": name}).bindings) == []
    stand_in.set_invokers(name, ["allUsers"])
    (binding,) = runs.get_iam_policy(request={"resource": name}).bindings
    assert (binding.role, list(binding.members)) == ("roles/run.invoker", ["allUsers"])
    with pytest.raises(exceptions.NotFound):
        runs.get_iam_policy(request={"resource": f"{parent}/services/nope"})


def test_writes_are_refused_in_googles_error_shape(
    stand_in: CloudRunStandIn, parent: str
) -> None:
    with pytest.raises(exceptions.MethodNotAllowed):
        client(stand_in.url).delete_service(name=f"{parent}/services/svc")


def test_a_service_without_a_full_name_is_refused(stand_in: CloudRunStandIn) -> None:
    with pytest.raises(ValueError):
        stand_in.put_service({"name": "hangar-api"})


def test_the_module_serves_services_from_a_file_and_says_where(tmp_path: Path) -> None:
    name = "projects/p/locations/europe-west1/services/from-file"
    services = tmp_path / "services.json"
    services.write_text(json.dumps([service_doc(name)]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulators.cloudrun", "--port", "0", "--services", str(services)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("cloud run stand-in listening on http://127.0.0.1:"), line
        url = line.rsplit(" ", 1)[1].strip()
        assert client(url).get_service(name=name).name == name
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
