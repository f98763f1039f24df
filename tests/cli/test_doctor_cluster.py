"""``hangar doctor`` on a ``gke://`` deployment, against the Kubernetes stand-in: the cluster
answers, the Agent Sandbox kinds are served, hangar's identity is granted what the backend
needs (SelfSubjectAccessReviews); each check passing, and failing with its fix named."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hangar.cli.doctor import doctor
from hangar.cli.doctor.cluster import NEEDED, cluster
from hangar.cli.doctor.report import Report
from hangar.config import Settings

from emulators.kube import KubeStandIn, kinds


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeStandIn]:
    with KubeStandIn() as server:
        monkeypatch.setenv("KUBECONFIG", server.kubeconfig)
        yield server


def settings_for(stand_in: KubeStandIn, tmp_path: Path) -> Settings:
    url = f"gke://{stand_in.context}/default?image=hangar-test/env:1"
    return Settings.build(data_dir=tmp_path, harness_dir=tmp_path, sandboxes=url)


def run(
    stand_in: KubeStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[bool, list[str]]:
    report = Report()
    cluster(report, settings_for(stand_in, tmp_path), 10)
    return report.failed, capsys.readouterr().out.splitlines()


def test_a_cluster_with_the_agent_sandbox_and_the_rbac_hangar_needs_passes_every_check(
    stand_in: KubeStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failed, lines = run(stand_in, tmp_path, capsys)
    assert not failed, lines
    assert [line.split()[0] for line in lines] == ["OK", "OK", "OK"]
    assert "answers (Kubernetes v1.33" in lines[0]
    assert "Agent Sandbox kinds are served" in lines[1]
    assert f"({len(NEEDED)} access reviews)" in lines[2]


def test_a_cluster_that_does_not_answer_fails_naming_where_to_look_and_stops_there(
    stand_in: KubeStandIn,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc = stand_in.kubeconfig_doc()
    for entry in doc["clusters"]:
        entry["cluster"]["server"] = (
            "http://127.0.0.1:9"  # discard port: nothing listens
        )
    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(json.dumps(doc))
    monkeypatch.setenv("KUBECONFIG", str(dead))
    failed, lines = run(stand_in, tmp_path, capsys)
    assert failed and len(lines) == 1, lines
    assert lines[0].startswith("FAIL") and "127.0.0.1:9" in lines[0]
    assert "reaches the API server" in lines[0]


def test_a_cluster_without_the_agent_sandbox_fails_naming_the_missing_kinds_and_the_install(
    stand_in: KubeStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in.set_knobs(agent_sandbox=False)
    failed, lines = run(stand_in, tmp_path, capsys)
    assert failed and len(lines) == 2, lines
    assert (
        lines[1].startswith("FAIL")
        and "sandboxclaims" in lines[1]
        and "sandboxes" in lines[1]
    )
    assert "--enable-agent-sandbox" in lines[1] and "agent_sandbox_config" in lines[1]


def test_missing_rbac_fails_naming_each_verb_denied_and_the_role_to_grant(
    stand_in: KubeStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in.set_knobs(
        denied=["create pods/exec", "list events", "patch sandboxclaims"]
    )
    failed, lines = run(stand_in, tmp_path, capsys)
    assert failed and lines[-1].startswith("FAIL"), lines
    for denied in ("create pods/exec", "list events",
                   "patch extensions.agents.x-k8s.io/sandboxclaims"):  # fmt: skip
        assert denied in lines[-1]
    assert "watch events" not in lines[-1] and "cluster_access" in lines[-1]


def test_doctor_runs_the_cluster_checks_when_sandboxes_are_on_gke(
    stand_in: KubeStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"gke://{stand_in.context}/default?image=hangar-test/env:1"
    env = {"HANGAR_SANDBOXES": url, "HANGAR_DATA_DIR": str(tmp_path),
           "HANGAR_URL": "http://127.0.0.1:9"}  # fmt: skip
    doctor(env, timeout=5)
    out = capsys.readouterr().out
    assert "Agent Sandbox kinds are served" in out and "access reviews" in out


def _pool(stand_in: KubeStandIn, env: str, replicas: int) -> None:
    """A warm pool as the backend makes it for environment ``env`` (on an existing template)."""
    from hangar.sandboxes.gke import manifests as objects

    name = objects.pool_name(env)
    template = {"apiVersion": f"{objects.EXTENSIONS_GROUP}/{objects.VERSION}",
                "kind": "SandboxTemplate", "metadata": {"name": name},
                "spec": {"podTemplate": {"spec": {"containers": [
                    {"name": "sandbox", "image": "hangar-test/env:1"}]}}}}  # fmt: skip
    stand_in.store.create(kinds.TEMPLATES.resource, "default", template)
    stand_in.store.create(kinds.WARM_POOLS.resource, "default",
                          objects.warm_pool(name, name, replicas))  # fmt: skip


def prebuilt(stand_in: KubeStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str],
             setting: str) -> tuple[bool, list[str]]:  # fmt: skip
    url = f"gke://{stand_in.context}/default?image=hangar-test/env:1"
    settings = Settings.build(data_dir=tmp_path, harness_dir=tmp_path, sandboxes=url,
                              prebuild_environments=setting)  # fmt: skip
    report = Report()
    cluster(report, settings, 10)
    return report.failed, capsys.readouterr().out.splitlines()[3:]


def test_a_prebuilt_environments_pool_with_its_sandboxes_ready_passes(
    stand_in: KubeStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _pool(stand_in, "app", 0)
    failed, lines = prebuilt(stand_in, tmp_path, capsys, "app")
    assert not failed and len(lines) == 1, lines
    assert lines[0].startswith("OK") and "environment app's warm pool" in lines[0]
    assert "0 of 0 sandboxes ready" in lines[0]


def test_a_prebuilt_environment_without_its_pool_or_with_sandboxes_waiting_fails_saying_why(
    stand_in: KubeStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in.set_knobs(ready_delay=600)  # its sandboxes never turn ready during the test
    _pool(stand_in, "web", 2)
    failed, lines = prebuilt(stand_in, tmp_path, capsys, "api, web")
    assert failed and len(lines) == 2, lines
    assert lines[0].startswith("FAIL") and "environment api's warm pool" in lines[0]
    assert "is not made" in lines[0] and "hangar env get api" in lines[0]
    assert lines[1].startswith("FAIL") and "0 of 2 sandboxes ready" in lines[1]
    assert "kubectl get events -n default" in lines[1]
