"""Spec 004's round trip from the CLI and MCP, with the real Claude Code and the model stub
against ``hangar serve``: a laptop's unpushed commits, uncommitted changes and a file go in
(``--from-local``, ``--file``), the agent sees them, more context comes over MCP, and the code
comes back as a patch that applies to a fresh clone and through ``session pull``."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.model import ModelStub
from tests.conftest import git
from tests.e2e.conftest import Server, _server
from tests.e2e.test_acceptance import MODELS, add_env
from tests.harness.conftest import harness_dir
from tests.mcp.client import Mcp

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e, pytest.mark.harness]

SCENARIO = {
    "rules": [
        {"when": "CONTEXT-IN", "steps": [
            {"shell": "cat \"$HANGAR_IO/in/1/trace.txt\" > seen.txt && "
                      "git log --format=%s > history.txt && git status --porcelain > status.txt "
                      "&& echo 'the agent was here' > agent.txt && git add agent.txt && "
                      "git commit -qm 'agent: add agent.txt'"},
            {"text": "Read the trace and left a note."}]},
        {"when": "MORE-CONTEXT", "steps": [
            {"shell": "cp \"$HANGAR_IO/in/2/ci.log\" seen-ci.log && echo patched >> README.md"},
            {"text": "Copied the CI log."}]},
    ],
    "models": [MODELS["claude"]],
}  # fmt: skip


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    with ModelStub(SCENARIO) as running:
        yield running


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from _server(tmp_path / "data", harness_dir())


def clone(tmp_path: Path, remote: Path, name: str) -> Path:
    path = tmp_path / name
    git(tmp_path, "clone", "-q", str(remote), str(path))
    return path


def status(repo: Path) -> list[str]:
    done = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True,
                          text=True, check=True)  # fmt: skip
    return done.stdout.splitlines()


def test_local_work_goes_in_with_from_local_and_comes_back_by_patch_and_pull(
    server: Server, remote: Path, stub: ModelStub, tmp_path: Path
) -> None:
    add_env(server, remote, stub)
    laptop = clone(tmp_path, remote, "laptop")
    (laptop / "local.txt").write_text("committed on the laptop, never pushed\n")
    git(laptop, "add", "local.txt")
    git(laptop, "commit", "-q", "-m", "laptop: unpushed work")
    (laptop / "README.md").write_text("# app\nedited on the laptop\n")
    (laptop / "notes.txt").write_text("untracked on the laptop\n")
    (laptop / "trace.txt").write_bytes(b"Traceback: boom\n")
    laptop_before = status(laptop)

    out = server.ok("session", "new", "ctx", "CONTEXT-IN: read the trace", "--env", "app",
                    "--model", MODELS["claude"], "--file", "trace.txt", "--from-local", "-w",
                    cwd=laptop)  # fmt: skip
    assert "Read the trace and left a note." in out
    assert status(laptop) == laptop_before  # --from-local changed nothing here
    seen = server.ok("session", "shell", "ctx", "--", "cat", "seen.txt", "history.txt",
                     "status.txt")  # fmt: skip
    assert "Traceback: boom" in seen  # the file, in $HANGAR_IO/in/1/
    assert "laptop: unpushed work" in seen  # the bundle's commit, on the agent's branch
    assert " M README.md" in seen and "?? notes.txt" in seen  # the patch, uncommitted

    token = (server.data_dir / "admin-token").read_text().strip()
    mcp = Mcp(server.url, token)
    log = base64.b64encode(b"FAILED test_csv.py::test_columns\n").decode()
    more = ("diff --git a/more.txt b/more.txt\nnew file mode 100644\n--- /dev/null\n"
            "+++ b/more.txt\n@@ -0,0 +1 @@\n+more from the laptop\n")  # fmt: skip
    mcp.ok("send_to_session", ref="ctx", message="MORE-CONTEXT: here is the CI log",
           context=[{"kind": "log", "name": "ci.log", "content": log, "encoding": "base64"},
                    {"kind": "url", "url": "https://ci.example.com/runs/42"},
                    {"kind": "patch", "content": more}])  # fmt: skip
    waited = mcp.ok("wait_for_turn", ref="ctx", timeout_seconds=300)
    assert (waited["done"], waited["outcome"]) == (True, "exited"), waited
    prompts = repr(stub.requests("anthropic")[-1]["body"])
    assert "in/2/: ci.log" in prompts and "https://ci.example.com/runs/42" in prompts

    # Code out: the session's patch applies to a fresh clone with both sides' work.
    patch = server.ok("session", "patch", "ctx")
    fresh = clone(tmp_path, remote, "fresh")
    subprocess.run(["git", "-C", str(fresh), "apply", "--binary", "-"], input=patch, text=True,
                   check=True)  # fmt: skip
    assert (fresh / "local.txt").read_text() == "committed on the laptop, never pushed\n"
    assert (fresh / "notes.txt").read_text() == "untracked on the laptop\n"
    assert (fresh / "agent.txt").read_text() == "the agent was here\n"
    assert (fresh / "seen-ci.log").read_text() == "FAILED test_csv.py::test_columns\n"
    assert (fresh / "more.txt").read_text() == "more from the laptop\n"  # MCP's patch
    assert (fresh / "README.md").read_text() == "# app\nedited on the laptop\npatched\n"

    # session pull onto a clean clone: the commits on hangar/ctx, the current branch untouched.
    clean = clone(tmp_path, remote, "clean")
    main = git(clean, "rev-parse", "HEAD")
    said = server.ok("session", "pull", "ctx", cwd=clean)
    assert "hangar/ctx made" in said
    assert git(clean, "log", "--format=%s", "-2", "hangar/ctx").splitlines() == [
        "agent: add agent.txt", "laptop: unpushed work"]  # fmt: skip
    assert git(clean, "rev-parse", "HEAD") == main and status(clean) == []

    # --checkout on a dirty clone refuses to touch an untracked file, and changes nothing.
    dirty = clone(tmp_path, remote, "dirty")
    (dirty / "seen-ci.log").write_text("mine\n")
    refused = server.cli("session", "pull", "ctx", "--checkout", cwd=dirty)
    assert refused.returncode == 1 and "seen-ci.log" in refused.stderr, refused.stderr
    assert (dirty / "seen-ci.log").read_text() == "mine\n"
    assert git(dirty, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert "hangar/ctx" not in git(dirty, "branch", "--list")

    # A diverged hangar/ctx is refused without --force and moved with it.
    git(clean, "checkout", "-q", "hangar/ctx")
    (clean / "mine.txt").write_text("my own\n")
    git(clean, "add", "mine.txt")
    git(clean, "commit", "-q", "-m", "mine")
    git(clean, "checkout", "-q", "main")
    diverged = server.cli("session", "pull", "ctx", cwd=clean)
    assert diverged.returncode == 1 and "--force" in diverged.stderr, diverged.stderr
    forced = server.ok("session", "pull", "ctx", "--force", "--checkout", cwd=clean)
    assert "moved (--force)" in forced and "switched to hangar/ctx" in forced
    assert git(clean, "rev-parse", "HEAD") == git(clean, "rev-parse", "hangar/ctx")
    assert (clean / "seen-ci.log").read_text() == "FAILED test_csv.py::test_columns\n"
    assert not (clean / "mine.txt").exists()


def test_from_local_without_an_upstream_is_refused_with_the_reason(
    server: Server, remote: Path, tmp_path: Path
) -> None:
    add_env(server, remote)
    laptop = clone(tmp_path, remote, "laptop")
    git(laptop, "checkout", "-q", "-b", "topic")
    done = server.cli("session", "new", "x", "hi", "--env", "app", "--from-local", cwd=laptop)
    assert done.returncode != 0 and "no upstream" in done.stderr, done.stderr
    assert json.loads(server.ok("session", "list", "--json"))["sessions"] == []

