"""Context in and code out through the REST API, with real sandboxes, real git and the
Antigravity stand-in as the agent: files, a patch and a bundle going in (a large bundle by
upload in parts), what is refused at the request (nothing started) and what the sandbox
refuses (the turn fails as context_rejected, the tree as it was), and the pull answer."""

from __future__ import annotations

import base64
import hashlib
import io
import os
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from hangar.cli.localgit import from_local
from hangar.runtime import Runtime
from hangar.exchange.pull import read_package
from tests.api.conftest import add_env, settle, wait_turn
from tests.api.test_sessions import frames, output
from tests.conftest import git

pytestmark = pytest.mark.sandbox

LOOK = ("run: cat \"$HANGAR_IO/in/1/trace.txt\" > seen.txt\n"
        "run: git log --format=%s > history.txt\n"
        "run: git status --porcelain > status.txt")  # fmt: skip


def laptop(tmp_path: Path, remote: Path, name: str = "laptop") -> Path:
    """The user's clone of ``remote``, with git identity."""
    path = tmp_path / name
    git(tmp_path, "clone", "-q", str(remote), str(path))
    return path


def commit(repo: Path, name: str, text: str, message: str) -> str:
    """Commit file ``name`` with ``text`` in ``repo``; returns the commit."""
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def start(api: TestClient, name: str, message: str, context: list[dict[str, Any]],
          harness: str = "antigravity") -> Any:  # fmt: skip
    return api.post("/api/sessions", json={"name": name, "message": message, "env": "app",
                                           "harness": harness, "context": context})


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def sandbox_sh(api: TestClient, name: str, script: str) -> str:
    got = frames(api, name, {"argv": ["sh", "-c", script]})
    assert got[-1] == {"exit": 0}, got
    return output(got, "stdout").decode()


def test_a_file_a_patch_and_a_bundle_reach_the_agent_and_come_back_in_pull(
    api: TestClient, remote: Path, tmp_path: Path
) -> None:
    add_env(api, remote)
    user = laptop(tmp_path, remote)
    commit(user, "local.txt", "committed on the laptop\n", "laptop: unpushed work")
    (user / "README.md").write_text("# app\nedited on the laptop\n")
    (user / "notes.txt").write_text("untracked on the laptop\n")
    work = from_local(user)
    assert work.bundle and work.patch and work.base_commit == git(remote, "rev-parse", "main")

    context = [{"kind": "file", "name": "trace.txt", "content": "Traceback: boom\n"},
               {"kind": "url", "url": "https://example.com/issue/7"},
               {"kind": "bundle", "content": b64(work.bundle), "encoding": "base64",
                "base_commit": work.base_commit},
               {"kind": "patch", "content": work.patch.decode()}]  # fmt: skip
    answer = start(api, "ctx", LOOK, context)
    assert answer.status_code == 202, answer.text
    turn = wait_turn(api, "ctx", 1)
    assert turn["outcome"] == "exited", turn
    assert [c["kind"] for c in turn["context"]] == ["file", "url", "bundle", "patch"]
    assert turn["context"][0] == {"kind": "file", "name": "trace.txt", "url": None,
                                  "base_commit": None, "size": 16}  # fmt: skip

    assert sandbox_sh(api, "ctx", "cat seen.txt") == "Traceback: boom\n"
    assert sandbox_sh(api, "ctx", "cat history.txt").splitlines()[0] == "laptop: unpushed work"
    status = sandbox_sh(api, "ctx", "cat status.txt").splitlines()
    assert " M README.md" in status and "?? notes.txt" in status  # uncommitted, as sent
    assert sandbox_sh(api, "ctx", "git diff --cached --name-only") == ""  # nothing staged

    pulled = api.get("/api/sessions/ctx/pull")
    assert pulled.status_code == 200 and pulled.headers["content-type"] == "application/x-tar"
    info, members = read_package(io.BytesIO(pulled.content))
    assert info.head == git(user, "rev-parse", "HEAD") and info.base == work.base_commit
    assert set(members) == {"repo.bundle", "changes.patch"} and info.patch_base == "base"
    assert b"+edited on the laptop" in members["changes.patch"]
    assert b"+Traceback: boom" in members["changes.patch"]  # the agent's seen.txt


def test_a_large_bundle_goes_up_in_parts_and_lands_on_the_agents_branch(
    api: TestClient, runtime: Runtime, remote: Path, tmp_path: Path
) -> None:
    add_env(api, remote)
    user = laptop(tmp_path, remote)
    (user / "big.bin").write_bytes(os.urandom(40 << 20))  # incompressible: a 40 MB bundle
    git(user, "add", "big.bin")
    git(user, "commit", "-q", "-m", "laptop: a big file")
    work = from_local(user)
    assert work.bundle is not None and len(work.bundle) > 40 << 20

    made = api.post("/api/uploads", json={"kind": "bundle"})
    assert made.status_code == 201, made.text
    upload_id, part = made.json()["upload_id"], int(made.json()["part_mb"] * 2**20)
    assert part < runtime.settings.max_body_mb * 2**20
    chunks = [work.bundle[i:i + part] for i in range(0, len(work.bundle), part)]
    assert len(chunks) >= 3
    for n, chunk in enumerate(chunks, start=1):
        sent = api.put(f"/api/uploads/{upload_id}/parts/{n}", content=chunk)
        assert sent.json() == {"upload_id": upload_id, "part": n, "size": len(chunk)}
    wrong = api.post(f"/api/uploads/{upload_id}/complete", json={"sha256": "0" * 64})
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (400, "invalid_context")
    done = api.post(f"/api/uploads/{upload_id}/complete",
                    json={"sha256": hashlib.sha256(work.bundle).hexdigest()})  # fmt: skip
    assert done.json()["complete"] and done.json()["size"] == len(work.bundle)

    item = {"kind": "bundle", "upload_id": upload_id, "base_commit": work.base_commit}
    assert start(api, "big", "run: true", [item]).status_code == 202
    assert wait_turn(api, "big", 1, limit=120)["outcome"] == "exited"
    assert sandbox_sh(api, "big", "git rev-parse HEAD").strip() == git(user, "rev-parse", "HEAD")
    assert api.get(f"/api/uploads/{upload_id}").json()["error"]["code"] == "upload_not_found"
    assert runtime.blobs.list("uploads/") == []  # used up


BAD = [
    ({"kind": "file", "content": "x"}, "a file needs a name"),
    ({"kind": "file", "name": "../escape.txt", "content": "x"}, "must stay inside in/<turn>/"),
    ({"kind": "file", "name": "/etc/passwd", "content": "x"}, "plain relative path"),
    ({"kind": "text", "content": "x" * ((2 << 20) + 1)}, "over its limit"),
    ({"kind": "file", "name": "a.bin", "content": "not base64!", "encoding": "base64"},
     "not valid base64"),
    ({"kind": "patch", "content": "just some words\n"}, "not a diff"),
    ({"kind": "bundle", "content": b64(b"PK\x03\x04 a zip"), "encoding": "base64",
      "base_commit": "a" * 40}, "not a git bundle"),
    ({"kind": "bundle", "content": b64(b"# v2 git bundle\n"), "encoding": "base64",
      "base_commit": "main"}, "full commit id"),
    ({"kind": "url", "url": "file:///etc/passwd"}, "http(s) URL"),
    ({"kind": "text", "upload_id": "upl-" + "0" * 32}, "no upload"),
    ({"kind": "text"}, "give content or upload_id"),
]  # fmt: skip


@pytest.mark.parametrize(("item", "why"), BAD, ids=[w for _, w in BAD])
def test_a_malformed_or_oversize_item_is_refused_at_the_request_and_nothing_starts(
    api: TestClient, runtime: Runtime, remote: Path, item: dict[str, Any], why: str
) -> None:
    add_env(api, remote)
    refused = start(api, "nope", "run: true", [item])
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_context", "context.0")
    assert why in error["message"]
    assert api.get("/api/sessions").json()["sessions"] == []
    assert runtime.blobs.list("sessions/") == [] and runtime.sandboxes.list() == []


def test_too_many_items_and_a_patch_over_its_limit_are_refused_on_send_too(
    api: TestClient, runtime: Runtime, remote: Path
) -> None:
    add_env(api, remote)
    assert start(api, "s", "run: true", []).status_code == 202
    wait_turn(api, "s", 1)
    many = [{"kind": "text", "content": str(i)} for i in range(51)]
    big_patch = "diff --git a/x b/x\n" + "+" * (10 << 20)
    for context, why in ((many, "at most 50 items"), ([{"kind": "patch", "content": big_patch}],
                                                      "over its limit")):  # fmt: skip
        refused = api.post("/api/sessions/s/send", json={"message": "more", "context": context})
        assert refused.status_code == 400 and why in refused.json()["error"]["message"]
    assert len(api.get("/api/sessions/s").json()["turns"]) == 1
    assert runtime.blobs.list("sessions/") and not any(
        "/context/" in k for k in runtime.blobs.list("sessions/"))  # fmt: skip


def test_a_patch_that_does_not_apply_fails_the_turn_as_context_rejected_tree_unchanged(
    api: TestClient, remote: Path, tmp_path: Path
) -> None:
    add_env(api, remote)
    assert start(api, "p", "run: echo mine > mine.txt", []).status_code == 202
    wait_turn(api, "p", 1)
    before = sandbox_sh(api, "p", "git rev-parse HEAD; git status --porcelain; cat mine.txt")
    user = laptop(tmp_path, remote)
    (user / "src" / "main.py").write_text("print('laptop')\n")
    patch = git(user, "diff", "--binary").replace("print(1)", "print(99)") + "\n"  # stale

    sent = api.post("/api/sessions/p/send", json={"message": "run: true", "context": [
        {"kind": "patch", "content": patch}]})  # fmt: skip
    assert sent.status_code == 202, sent.text
    turn = wait_turn(api, "p", 2)
    assert (turn["outcome"], turn["error_code"]) == ("failed", "context_rejected"), turn
    assert "the patch does not apply" in turn["summary"] and "src/main.py" in turn["summary"]
    assert sandbox_sh(api, "p", "git rev-parse HEAD; git status --porcelain; cat mine.txt") == before
    assert settle(api, "p")["state"] == "idle"


def test_a_bundle_whose_base_is_not_on_the_remote_fails_the_turn_tree_unchanged(
    api: TestClient, remote: Path, tmp_path: Path
) -> None:
    add_env(api, remote)
    user = laptop(tmp_path, remote)
    local_base = commit(user, "a.txt", "a\n", "local only")
    commit(user, "b.txt", "b\n", "on top")
    bundle = tmp_path / "x.bundle"
    git(user, "bundle", "create", "-q", str(bundle), "HEAD", "--not", local_base)

    item = {"kind": "bundle", "content": b64(bundle.read_bytes()), "encoding": "base64",
            "base_commit": local_base}  # fmt: skip
    assert start(api, "b", "run: true", [item]).status_code == 202
    turn = wait_turn(api, "b", 1)
    assert (turn["outcome"], turn["error_code"]) == ("failed", "context_rejected"), turn
    assert f"base_commit {local_base} is not on the remote" in turn["summary"]
    head = sandbox_sh(api, "b", "git rev-parse HEAD; git status --porcelain")
    assert head == git(remote, "rev-parse", "main") + "\n"
