"""Environments never show secret values; sandboxes can be listed and destroyed by hand, and a
destroyed sandbox's session is checkpointed first and suspended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.testclient import TestClient

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
