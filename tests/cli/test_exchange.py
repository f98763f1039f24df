"""The exchange from the CLI against a real ``hangar serve`` (the Antigravity stand-in runs
the turn's ``run:`` lines, calling ``hangar-agent``): ``--schema`` on new and send, the result
and artifacts after ``-w``, ``session artifacts`` listing and downloading, and the REST
download."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.cli.conftest import Cli, Server
from tests.cli.test_cli import identity
from tests.e2e.test_acceptance import until

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
TURN = ("make the report\n"
        "run: echo '# Report' > report.md && hangar-agent artifact report.md\n"
        "run: hangar-agent result '{\"ok\": true}' && hangar-agent done 'Report made.'")  # fmt: skip


@pytest.mark.sandbox
def test_a_schema_a_result_and_artifacts_from_the_cli(
    server: Server, cli: Cli, remote: Path, tmp_path: Path
) -> None:
    assert cli("env", "add", "app", "--repo", str(remote), *identity())[0] == 0
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "wrong"}))
    code, _, err = cli("session", "new", "rep", TURN, "--env", "app", "--harness",
                       "antigravity", "--schema", str(schema))  # fmt: skip
    assert code == 1 and "(invalid_schema)" in err
    for ref, says in (("http://127.0.0.1:9/x.json", "is not inside the schema"),
                      ("#/$defs/nope", "points to nothing in the schema")):  # fmt: skip
        schema.write_text(json.dumps({"$ref": ref}))
        code, _, err = cli("session", "new", "rep", TURN, "--env", "app", "--harness",
                           "antigravity", "--schema", str(schema))  # fmt: skip
        assert code == 1 and "(invalid_schema)" in err and says in err and ref in err, err
    (tmp_path / "broken.json").write_text("{not json")
    code, _, err = cli("session", "new", "rep", TURN, "--env", "app", "--schema",
                       str(tmp_path / "broken.json"))  # fmt: skip
    assert code == 2 and "not JSON" in err
    assert json.loads(cli("session", "list", "--json")[1])["sessions"] == []

    schema.write_text(json.dumps(SCHEMA))
    code, out, err = cli("session", "new", "rep", TURN, "--env", "app", "--harness",
                         "antigravity", "--schema", str(schema), "-w")  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[:4] == ["Report made.", "{", '  "ok": true', "}"]
    assert "artifact: report.md (9 bytes; hangar session artifacts rep --get report.md)" in out

    code, out, _ = cli("session", "artifacts", "rep")
    assert (code, out) == (0, "turn 1  report.md  9 bytes\n")
    target = tmp_path / "got.md"
    code, _, err = cli("session", "artifacts", "rep", "--get", "report.md", "-o", str(target))
    assert code == 0 and target.read_text() == "# Report\n" and "turn 1" in err
    code, _, err = cli("session", "artifacts", "rep", "--get", "nope.md")
    assert code == 1 and "(artifact_not_found)" in err
    code, out, _ = cli("session", "get", "rep")
    assert 'result: {"ok": true}' in out and "artifacts: report.md" in out

    token = (server.data_dir / "admin-token").read_text().strip()
    auth = {"Authorization": f"Bearer {token}"}
    listed = httpx.get(f"{server.url}/api/sessions/rep/artifacts", headers=auth)
    assert listed.json() == [{"path": "report.md", "turn": 1, "size": 9,
                              "uri": "hangar://sessions/rep/artifacts/1/report.md"}]  # fmt: skip
    got = httpx.get(f"{server.url}/api/sessions/rep/artifacts/1/report.md", headers=auth)
    assert got.content == b"# Report\n"
    assert got.headers["content-disposition"] == 'attachment; filename="report.md"'
    assert httpx.get(f"{server.url}/api/sessions/rep/artifacts?turn=2", headers=auth
                     ).json()["error"]["code"] == "invalid_input"  # fmt: skip
    assert httpx.get(f"{server.url}/api/sessions/rep/artifacts/1/x", headers=auth
                     ).status_code == 404  # fmt: skip


@pytest.mark.sandbox
def test_an_environment_that_sets_path_cannot_hide_hangar_agent(
    server: Server, cli: Cli, remote: Path
) -> None:
    assert cli("env", "add", "app", "--repo", str(remote), *identity(),
               "--var", "PATH=/hangar/harnesses/bin:/usr/bin:/bin")[0] == 0  # fmt: skip
    turn = 'run: hangar-agent done "$(command -v hangar-agent) $PATH"'
    code, out, err = cli("session", "new", "p", turn, "--env", "app", "--harness",
                         "antigravity", "-w")  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[0] == ("/hangar/bin/hangar-agent "
                                   "/hangar/bin:/hangar/harnesses/bin:/usr/bin:/bin")
    code, out, _ = cli("session", "shell", "p", "--", "sh", "-c", "command -v hangar-agent")
    assert (code, out) == (0, "/hangar/bin/hangar-agent\n")
    code, out, _ = cli("session", "shell", "p", "--", "sh", "-c", "echo hi > /hangar/bin/x")
    assert code != 0  # hangar's folder: the agent cannot add or replace anything there


@pytest.mark.sandbox
def test_a_question_from_a_turn_that_was_interrupted_is_not_carried_on(
    server: Server, cli: Cli, remote: Path, tmp_path: Path
) -> None:
    assert cli("env", "add", "app", "--repo", str(remote), *identity())[0] == 0
    turn = "run: hangar-agent ask 'Which way?'\nwait-for: /nonexistent/never"
    assert cli("session", "new", "q", turn, "--env", "app", "--harness", "antigravity")[0] == 0
    until(lambda: json.loads(cli("session", "get", "q", "--json")[1])["state"] == "active")
    asked = ["session", "shell", "q", "--", "test", "-f", "/root/.hangar/sessions/q/out/QUESTION.md"]
    until(lambda: cli(*asked)[0] == 0)  # the question is written; the turn waits on
    code, out, err = cli("session", "interrupt", "q")
    assert code == 0 and "interrupted" in out, err
    code, out, _ = cli("session", "get", "q", "--json")
    session = json.loads(out)
    assert (session["needs_input"], session["question_options"]) == (None, [])
    assert (session["turns"][0]["outcome"], session["turns"][0]["question"]) == ("interrupted", None)
