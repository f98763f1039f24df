"""The session walk-through on GKE sandboxes: ``hangar serve`` with ``HANGAR_SANDBOXES=gke://``
on the Kubernetes stand-in, whose pods are real sandboxes, driven through the ``hangar`` CLI
with the real Claude Code, Codex and pi CLIs talking to the model stub; once more with direct
checkpoints (blobs in fake-gcs-server behind the verifying front, URLs signed through the IAM
stand-in), where the pods themselves move every checkpoint byte to and from the bucket.

The pods reach the model stub and a git server (``git daemon`` over the test's bare repo) the
way pods reach a cluster's Services: at ``127.0.0.1:PORT`` inside, relayed by the stand-in
(:mod:`emulators.kube.cluster`); hangar asks for no host port or host path.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from emulators.gcs import FakeGcs
from emulators.git import GitDaemon
from emulators.iam import IamStandIn
from emulators.kube import kinds
from emulators.kube.cluster import StandInCluster
from emulators.model import ModelStub
from hangar.db.sqlite import SqliteDb
from hangar.sandboxes.gke import manifests
from tests.direct_rig import BUCKET, SIGNER
from tests.e2e.conftest import HANGAR, Server, _server
from tests.e2e.test_acceptance import (
    IDENTITY,
    MODELS,
    SCENARIO,
    TURN_ONE,
    TURN_TWO,
    get,
    resume_and_check,
    until,
)
from tests.harness.conftest import harness_dir

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e, pytest.mark.harness]


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandInCluster]:
    """The stand-in, its pods real sandboxes showing the harness CLIs (as an image would)."""
    with StandInCluster(harness_dir()) as running:
        yield running


@pytest.fixture
def git(remote: Path) -> Iterator[GitDaemon]:
    """The bare repo's folder served by ``git daemon`` on a free loopback port (read-only)."""
    with GitDaemon(remote.parent) as daemon:
        yield daemon


@pytest.fixture
def git_url(git: GitDaemon, remote: Path) -> str:
    return git.url(remote.name)


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


@pytest.fixture
def gke_server(tmp_path: Path, cluster: StandInCluster, git: GitDaemon,
               stub: ModelStub) -> Iterator[Server]:  # fmt: skip
    """hangar serve on the embedded backends with gke:// sandboxes; the pods made from now on
    reach the model stub and the git server."""
    yield from serve_on(cluster, tmp_path, [stub.port, git.port])


def serve_on(cluster: StandInCluster, root: Path, services: list[int],
             **extra: str) -> Iterator[Server]:  # fmt: skip
    """hangar serve with gke:// sandboxes, on the embedded backends but for what ``extra``
    sets; the pods made from now on reach ``services``; the claims left are deleted after."""
    cluster.set_services(services)
    yield from _server(root / "data", harness_dir(), **cluster.environment(),
                       HANGAR_ACTIVITY_GRACE_SECONDS="1", **extra)  # fmt: skip
    for claim in claims(cluster):  # what the session left: the next test starts with none
        delete_claim(cluster, claim["metadata"]["name"])


def add_env(server: Server, git_url: str, stub: ModelStub) -> None:
    server.ok("env", "add", "app", "--repo", git_url, *IDENTITY,
              "--var", f"ANTHROPIC_BASE_URL={stub.url}", "--var", f"OPENAI_BASE_URL={stub.url}/v1",
              "--secret", "ANTHROPIC_API_KEY=sk-stub", "--secret", "OPENAI_API_KEY=sk-stub")  # fmt: skip


def claims(cluster: StandInCluster) -> list[dict[str, Any]]:
    """The live SandboxClaims on the stand-in."""
    found, _ = cluster.kube.store.list(kinds.CLAIMS.resource, "default")
    return [c for c in found if not c["metadata"].get("deletionTimestamp")]


def pod_of(cluster: StandInCluster, claim: str) -> dict[str, Any]:
    pods, _ = cluster.kube.store.list(kinds.PODS.resource, "default")
    [pod] = [p for p in pods if p["metadata"].get("labels", {}).get(manifests.SANDBOX_ID) == claim]  # fmt: skip
    return pod


def delete_claim(cluster: StandInCluster, name: str) -> None:
    """Delete a SandboxClaim as a person with kubectl would: through the API server."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=cluster.kube.kubeconfig, context=cluster.kube.context,
                            client_configuration=cfg, persist_config=False)  # fmt: skip
    with client.ApiClient(cfg) as api:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            manifests.EXTENSIONS_GROUP, manifests.VERSION, "default", manifests.CLAIMS,
            name)


@pytest.mark.parametrize("harness", ["claude", "codex", "pi"])
def test_a_session_on_gke_runs_suspends_and_resumes_in_a_new_pod_with_its_work_and_conversation(
    gke_server: Server, cluster: StandInCluster, git_url: str, stub: ModelStub, harness: str
) -> None:
    server = gke_server
    add_env(server, git_url, stub)
    out = server.ok("session", "new", "work", TURN_ONE, "--env", "app", "--harness", harness,
                    "--model", MODELS[harness], "-w")  # fmt: skip
    assert out.strip() == "Turn one done."
    first = get(server, "work")
    assert first["state"] == "idle" and first["turns"][0]["outcome"] == "exited"
    assert [c["metadata"]["name"] for c in claims(cluster)] == [first["sandbox_id"]]
    assert pod_of(cluster, first["sandbox_id"])["metadata"]["labels"]["hangar.session"] == first["id"]

    suspended = json.loads(server.ok("session", "suspend", "work", "--json"))
    assert suspended["state"] == "suspended" and suspended["sandbox_id"] is None
    assert claims(cluster) == []

    resume_and_check(server, stub, harness, first)


def test_on_gke_a_session_forks_survives_its_claim_deleted_opens_a_terminal_and_idles_out(
    gke_server: Server, cluster: StandInCluster, git_url: str, stub: ModelStub
) -> None:
    server = gke_server
    add_env(server, git_url, stub)
    server.ok("session", "new", "base", TURN_ONE, "--env", "app", "--harness", "claude",
              "--model", MODELS["claude"], "-w")  # fmt: skip
    base = get(server, "base")

    [fork] = server.ok("session", "fork", "base", "1").split()
    assert server.ok("session", "send", fork, f"fork {fork}", "-w").strip() == f"Forked: fork {fork}"
    forked = get(server, fork)
    assert forked["harness_session"] not in (None, base["harness_session"])
    assert server.ok("session", "shell", fork, "--", "cat", "notes.txt") == "note\n"

    # The claim deleted behind hangar's back: its pod and sandbox go, with no checkpoint of
    # hangar's; the next message resumes from the turn's checkpoint in a new pod.
    server.ok("session", "shell", "base", "--", "sh", "-c", "echo lost > lost.txt")
    delete_claim(cluster, base["sandbox_id"])
    until(lambda: base["sandbox_id"] not in [c["metadata"]["name"] for c in claims(cluster)])
    server.ok("session", "send", "base", TURN_TWO, "-w")
    resumed = get(server, "base")
    assert resumed["sandbox_id"] not in (None, base["sandbox_id"])
    assert resumed["harness_session"] == base["harness_session"]
    shown = server.ok("session", "shell", "base", "--", "sh", "-c",
                      "cat notes.txt; test -e lost.txt || echo no-lost")  # fmt: skip
    assert shown == "note\nno-lost\n"

    terminal = subprocess.run([HANGAR, "session", "shell", "base"], env=server.env(),
                              input=b"echo marker-$((6*7)); id -u; exit 4\n",
                              capture_output=True, timeout=120)  # fmt: skip
    assert terminal.returncode == 4, terminal.stderr
    assert b"marker-42" in terminal.stdout and b"1000" in terminal.stdout

    server.ok("session", "keep", "base", "--idle", "0.02")
    until(lambda: get(server, "base")["state"] == "suspended", timeout=120)
    idled = get(server, "base")
    assert idled["sandbox_id"] is None and idled["checkpoints"][-1]["reason"] == "suspend"
    assert resumed["sandbox_id"] not in [c["metadata"]["name"] for c in claims(cluster)]


PREFIX = "e2e-direct"
WORK_SHOWN = "git log -1 --format=%s; cat notes.txt; git diff --stat | tail -1"
"""Turn one's work as a shell shows it: its commit, its untracked file, its uncommitted edit."""


@pytest.fixture
def direct_gcs() -> Iterator[tuple[FakeGcs, dict[str, str]]]:
    """fake-gcs-server behind the verifying front, which trusts the key of :data:`SIGNER` (held
    by the IAM stand-in); with the settings that put hangar's blobs there and have it sign its
    URLs through the stand-in, as on Cloud Run."""
    with FakeGcs(front=True) as gcs, IamStandIn() as iam:
        gcs.create_bucket(BUCKET)
        gcs.trust(SIGNER, iam.add_account(SIGNER).public_key_pem)
        yield gcs, {**gcs.environment(), "HANGAR_SESSION_STORE": f"gs://{BUCKET}/{PREFIX}",
                    "HANGAR_SIGNING_SERVICE_ACCOUNT": SIGNER, "HANGAR_IAM_ENDPOINT": iam.url,
                    "HANGAR_SIGNED_URL_ENDPOINT": gcs.signed_url}  # fmt: skip


@pytest.fixture
def direct_server(tmp_path: Path, cluster: StandInCluster, git: GitDaemon, stub: ModelStub,
                  direct_gcs: tuple[FakeGcs, dict[str, str]]) -> Iterator[Server]:  # fmt: skip
    """:func:`gke_server` with its blobs in GCS behind the verifying front; the pods reach the
    front's signed port too (as pods reach the storage endpoint), and no other port of it."""
    gcs, settings = direct_gcs
    signed = urlsplit(gcs.signed_url).port
    assert signed is not None
    yield from serve_on(cluster, tmp_path, [stub.port, git.port, signed], **settings)


def bucket_objects(gcs: FakeGcs) -> set[str]:
    """The names of the objects in :data:`BUCKET`, asked of fake-gcs-server itself."""
    listed = httpx.get(f"{gcs.url}/storage/v1/b/{BUCKET}/o", params={"prefix": f"{PREFIX}/"},
                       timeout=10)  # fmt: skip
    listed.raise_for_status()
    return {item["name"] for item in listed.json().get("items", [])}


def test_on_gke_with_direct_checkpoints_a_session_suspends_resumes_and_forks_with_its_work(
    direct_server: Server, direct_gcs: tuple[FakeGcs, dict[str, str]], cluster: StandInCluster,
    git_url: str, stub: ModelStub,
) -> None:  # fmt: skip
    server, (gcs, _) = direct_server, direct_gcs
    assert gcs.front is not None
    add_env(server, git_url, stub)
    out = server.ok("session", "new", "work", TURN_ONE, "--env", "app", "--harness", "claude",
                    "--model", MODELS["claude"], "-w")  # fmt: skip
    assert out.strip() == "Turn one done."
    first = get(server, "work")

    suspended = json.loads(server.ok("session", "suspend", "work", "--json"))
    assert suspended["state"] == "suspended" and suspended["sandbox_id"] is None
    assert claims(cluster) == []
    read_before = len(gcs.front.served)
    resume_and_check(server, stub, "claude", first)  # a fresh pod, the conversation carried on
    read = {name for method, name in gcs.front.served[read_before:] if method == "GET"}

    [fork] = server.ok("session", "fork", "work", "1").split()
    assert server.ok("session", "send", fork, f"fork {fork}", "-w").strip() == f"Forked: fork {fork}"
    forked = get(server, fork)
    assert forked["harness_session"] not in (None, first["harness_session"])
    assert server.ok("session", "shell", fork, "--", "sh", "-c", WORK_SHOWN) == (
        "first change\nnote\n 1 file changed, 1 insertion(+)\n")

    # Every checkpoint went straight from its pod to the bucket, and the restores back.
    assert server.log is not None
    assert "go through the control plane" not in server.log.read_text()
    db = SqliteDb.from_url(f"sqlite://{server.data_dir / 'hangar.db'}")
    try:
        mine = db.list_checkpoints(first["id"])
        recorded = mine + db.list_checkpoints(forked["id"])
    finally:
        db.close()
    assert [c.reason.value for c in mine][:2] == ["turn", "suspend"]
    assert {c.format for c in recorded} == {2} and all(c.packs for c in recorded)
    packs = {f"{BUCKET}/{PREFIX}/{key}" for c in recorded for key in c.packs}
    uploaded = {name for method, name in gcs.front.served if method == "PUT"}
    assert packs <= uploaded  # each one PUT through a signed URL, by a pod
    assert {name.partition("/")[2] for name in packs} <= bucket_objects(gcs)
    assert {f"{BUCKET}/{PREFIX}/{key}" for key in mine[1].packs} <= read
