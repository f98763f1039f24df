"""Environments never show secret values, and name an image only where the sandbox backend runs
images; sandboxes can be listed and destroyed by hand, and a destroyed sandbox's session is
checkpointed first and suspended."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from hangar.runtime import Runtime
from hangar.sandboxes import Sandboxes
from tests.api.conftest import add_env, new_session, wait_turn

pytestmark = pytest.mark.sandbox


def test_environments_show_names_of_vars_and_secrets_never_values(
    api: TestClient, remote: Path
) -> None:
    created = add_env(api, remote, setup="true", vars={"MODE": "plain-var-value"})
    assert created == {**created, "name": "app", "repo": str(remote), "branch": None,
                       "setup": "true", "vars": ["MODE"], "secrets": ["API_TOKEN"]}  # fmt: skip
    listed = api.get("/api/envs")
    assert [e["name"] for e in listed.json()] == ["app"]
    everything = json.dumps(created) + listed.text + api.get("/api/openapi.json").text
    assert "very-secret-value" not in everything and "plain-var-value" not in everything

    assert api.delete("/api/envs/app").status_code == 204
    assert api.get("/api/envs").json() == []
    gone = api.delete("/api/envs/app")
    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "environment_not_found")


def test_destroying_a_sandbox_by_hand_checkpoints_and_suspends_its_session(
    api: TestClient, remote: Path
) -> None:
    add_env(api, remote)
    new_session(api, "demo", "run: echo draft > draft.txt")
    wait_turn(api, "demo", 1)
    sandbox = api.get("/api/sessions/demo").json()["sandbox_id"]
    listed = api.get("/api/sandboxes").json()
    assert [(b["id"], b["session"]) for b in listed] == [(sandbox, "demo")]
    assert listed[0]["created_at"] and listed[0]["labels"]

    assert api.delete(f"/api/sandboxes/{sandbox}").status_code == 204
    assert api.get("/api/sandboxes").json() == []
    session = api.get("/api/sessions/demo").json()
    assert session["state"] == "suspended" and session["sandbox_id"] is None
    assert session["checkpoints"][-1]["reason"] == "destroy"
    assert b"+draft" in api.get("/api/sessions/demo/patch").content  # from the checkpoint

    missing = api.delete(f"/api/sandboxes/{sandbox}")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "sandbox_not_found")


IMAGE = "registry.example:5000/team/agent:1.2"


class RunsImages:
    """The local backend as one that runs images would be: it declares the capability and
    passes every other call through (no sandbox is made by these tests)."""

    def __init__(self, backend: Sandboxes) -> None:
        self.backend = backend
        self.capabilities = replace(backend.capabilities, images=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


def test_an_image_on_the_local_backend_is_refused_at_once_and_nothing_is_made_or_changed(
    api: TestClient, runtime: Runtime, remote: Path
) -> None:
    body = {"name": "app", "repo": str(remote), "image": IMAGE}
    refused = api.post("/api/envs", json=body)
    error = refused.json()["error"]
    assert (refused.status_code, error["code"]) == (400, "sandbox_capability_missing")
    assert error["capability"] == "images" and error["backend"] == "local"
    assert f"environment app would name image {IMAGE}" in error["message"]
    assert api.get("/api/envs").json() == [] and runtime.db.list_environments() == []

    before = add_env(api, remote)
    assert before["image"] is None
    patched = api.patch("/api/envs/app", json={"image": IMAGE, "setup": "make"})
    assert patched.json()["error"]["code"] == "sandbox_capability_missing"
    unknown = api.patch("/api/envs/nope", json={"image": IMAGE})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "environment_not_found"
    bad = api.patch("/api/envs/app", json={"image": "Team/Agent"})
    assert bad.json()["error"]["code"] == "invalid_input"
    assert bad.json()["error"]["field"] == "image" and "lowercase" in bad.text
    assert api.get("/api/envs/app").json() == before


def test_on_a_backend_that_runs_images_the_view_shows_the_image_set_changed_and_cleared(
    api: TestClient, runtime: Runtime, remote: Path
) -> None:
    runtime.sandboxes.backend = RunsImages(runtime.sandboxes.backend)
    bad = api.post("/api/envs", json={"name": "app", "repo": str(remote), "image": "a//b"})
    assert bad.json()["error"]["code"] == "invalid_input" and api.get("/api/envs").json() == []

    assert add_env(api, remote, image=IMAGE)["image"] == IMAGE
    assert [e["image"] for e in api.get("/api/envs").json()] == [IMAGE]
    digest = "team/agent@sha256:" + "ab" * 32
    assert api.patch("/api/envs/app", json={"image": digest}).json()["image"] == digest
    assert api.patch("/api/envs/app", json={"setup": "make"}).json()["image"] == digest
    assert api.patch("/api/envs/app", json={"image": None}).json()["image"] is None
    assert api.get("/api/envs/app").json()["image"] is None
    schema = api.get("/api/openapi.json").json()["components"]["schemas"]
    assert {"NewEnvironment", "EnvironmentPatch", "EnvironmentView"} <= set(schema)
    assert all("image" in schema[name]["properties"]
               for name in ("NewEnvironment", "EnvironmentPatch", "EnvironmentView"))


class OnOtherMachines:
    """The local backend as a cluster's would be: no host paths, no host ports."""

    def __init__(self, backend: Sandboxes) -> None:
        self.backend = backend
        self.capabilities = replace(backend.capabilities, ro_paths=False, host_ports=False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


def test_where_sandboxes_run_elsewhere_a_host_path_repo_or_host_ports_are_refused_at_once(
    api: TestClient, runtime: Runtime, remote: Path
) -> None:
    runtime.sandboxes.backend = OnOtherMachines(runtime.sandboxes.backend)
    path = api.post("/api/envs", json={"name": "app", "repo": str(remote)})
    assert (path.status_code, path.json()["error"]["code"]) == (400, "sandbox_capability_missing")
    assert path.json()["error"]["capability"] == "ro_paths" and "git URL" in path.text
    url = f"file://{remote}"
    ports = api.post("/api/envs", json={"name": "app", "repo": url, "host_ports": [8080]})
    assert ports.json()["error"]["capability"] == "host_ports"
    assert api.get("/api/envs").json() == [] and runtime.db.list_environments() == []

    made = api.post("/api/envs", json={"name": "app", "repo": url}).json()
    patched = api.patch("/api/envs/app", json={"host_ports": [8080], "setup": "make"})
    assert patched.json()["error"]["code"] == "sandbox_capability_missing"
    assert api.get("/api/envs/app").json() == made


def test_a_loopback_url_warns_with_the_fix_the_backend_allows() -> None:
    from hangar.models import Environment
    from hangar.sessions.environments import loopback_warnings

    env = Environment(name="app", repo="https://git.example/app", host_ports=[9000],
                      vars={"MODEL": "http://127.0.0.1:8080", "OK": "http://127.0.0.1:9000"})  # fmt: skip
    [local] = loopback_warnings(env)
    assert "MODEL" in local and "--host-port 8080" in local
    elsewhere = loopback_warnings(env, host_ports=False)
    assert [w.split(" ")[0] for w in elsewhere] == ["MODEL", "OK"]
    assert all("--host-port" not in w and "cluster routes" in w for w in elsewhere)
