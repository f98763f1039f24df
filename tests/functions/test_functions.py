"""The two Cloud Run functions, as deployed: each built by ``make package``'s script, unpacked,
and run by the functions-framework CLI on emulator-backed settings (local sandboxes). A whole
session is driven through the api function with the ``hangar`` CLI; its idle suspend arrives as
a Cloud Tasks tick at the ticks function (the api function runs no ticker)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from emulators.cloud import CloudEmulators
from hangar.sandboxes.local import LocalSandboxes
from tests.e2e.conftest import HANGAR, STANDIN, free_port
from tests.e2e.test_acceptance import until
from tests.mcp.client import Mcp
from tests.mcp.test_tools import every_tool

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORK = str(Path(sys.executable).with_name("functions-framework"))


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each function's archive, built and unpacked into its own folder."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "package-functions"),
                           "--out", str(out)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    unpacked = {}
    for name in ("api", "ticks"):
        target = out / name
        with zipfile.ZipFile(out / f"{name}.zip") as archive:
            archive.extractall(target)
        unpacked[name] = target
    return unpacked


@dataclass
class Function:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start_function(name: str, source: Path, env: dict[str, str], log: Path) -> Function:
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [FRAMEWORK, "--asgi", "--target", name, "--source", str(source / "main.py"),
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=source, env={**env, "PYTHONPATH": str(source)}, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    function = Function(name, f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(function.url + "/robots.txt", timeout=1)
            return function
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                function.stop()
                raise AssertionError(f"{name} did not start:\n{log.read_text()}") from None
            time.sleep(0.1)


@dataclass
class Deployment:
    api: Function
    ticks: Function
    env: dict[str, str]
    sandboxes: LocalSandboxes

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([HANGAR, *args], env=self.env, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip

    def ok(self, *args: str) -> str:
        done = self.cli(*args)
        logs = "\n".join(f"--- {f.name}\n{f.log.read_text()[-3000:]}" for f in (self.api, self.ticks))
        assert done.returncode == 0, f"hangar {' '.join(args)}: {done.stderr}{done.stdout}\n{logs}"
        return done.stdout

    def session(self, name: str) -> dict[str, object]:
        return dict(json.loads(self.ok("session", "get", name, "--json")))


@pytest.fixture
def deployment(
    cloud_emulators: CloudEmulators, packages: dict[str, Path], tmp_path: Path
) -> Iterator[Deployment]:
    harnesses = tmp_path / "harnesses"
    (harnesses / "bin").mkdir(parents=True)
    shutil.copy(STANDIN, harnesses / "bin" / "agy")
    (harnesses / "bin" / "agy").chmod(0o755)
    data = tmp_path / "data"
    base = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env = {
        **base,
        **cloud_emulators.environment(f"fn-{uuid.uuid4().hex[:10]}"),
        "HANGAR_DATA_DIR": str(data),
        "HANGAR_SANDBOXES": f"local://{tmp_path / 'sandboxes'}",
        "HANGAR_HARNESS_DIR": str(harnesses),
        "HANGAR_ACTIVITY_GRACE_SECONDS": "1",
    }
    started: list[Function] = []
    try:
        ticks = start_function("ticks", packages["ticks"], env, tmp_path / "ticks.log")
        started.append(ticks)
        api = start_function("api", packages["api"], {**env, "HANGAR_TICKS_URL": ticks.url},
                             tmp_path / "api.log")  # fmt: skip
        started.append(api)
        sandboxes = LocalSandboxes(tmp_path / "sandboxes", harnesses)
        yield Deployment(api, ticks, {**env, "HANGAR_URL": api.url}, sandboxes)
    finally:
        for function in started:
            function.stop()
        leftovers = LocalSandboxes(tmp_path / "sandboxes", harnesses)
        for info in leftovers.list():
            leftovers.destroy(info.id)


def test_a_session_runs_through_the_functions_and_suspends_by_a_cloud_tasks_tick(
    deployment: Deployment, remote: Path
) -> None:
    d = deployment
    made = d.ok("admin-token")
    assert "admin token" in made and "mode 0600" in made
    d.ok("env", "add", "app", "--repo", str(remote), "--var", "GIT_AUTHOR_NAME=A", "--var",
         "GIT_AUTHOR_EMAIL=a@example.com", "--var", "GIT_COMMITTER_NAME=A", "--var",
         "GIT_COMMITTER_EMAIL=a@example.com")  # fmt: skip
    out = d.ok("session", "new", "work", "write notes", "--env", "app", "--harness",
               "antigravity", "--idle", "0", "-w")  # fmt: skip
    assert out.strip()
    first = d.session("work")
    assert first["state"] == "idle" and first["sandbox_id"]
    d.ok("session", "keep", "work", "--idle", "0.02")  # from now on: suspend when unused

    # Nobody calls the api now: only a tick, posted by Cloud Tasks to the ticks function,
    # can suspend the session.
    until(lambda: d.session("work")["state"] == "suspended")
    suspended = d.session("work")
    assert suspended["sandbox_id"] is None
    checkpoints = suspended["checkpoints"]
    assert isinstance(checkpoints, list) and checkpoints[-1]["reason"] == "suspend"
    assert d.sandboxes.list() == []

    d.ok("session", "keep", "work", "--idle", "0")  # so the resumed session stays up to look at
    d.ok("session", "send", "work", "again", "-w")
    resumed = d.session("work")
    assert resumed["sandbox_id"] and resumed["sandbox_id"] != first["sandbox_id"]
    turns = resumed["turns"]
    assert isinstance(turns, list) and [t["n"] for t in turns] == [1, 2]
    d.ok("session", "delete", "work")
    assert d.cli("session", "get", "work").returncode != 0


def test_every_mcp_tool_through_the_api_function(deployment: Deployment, remote: Path) -> None:
    deployment.ok("admin-token")
    token = (Path(deployment.env["HANGAR_DATA_DIR"]) / "admin-token").read_text().strip()
    every_tool(Mcp(deployment.api.url, token), deployment.ok, remote)


def test_the_api_function_checks_tokens_and_does_not_take_ticks(deployment: Deployment) -> None:
    api = deployment.api.url
    assert httpx.get(api + "/api/sessions").status_code == 401
    assert httpx.post(api + "/ticks", content=b"{}").status_code in (401, 404, 405)
    assert httpx.get(api + "/api/openapi.json").json()["paths"]


def test_the_api_function_serves_the_dashboard_and_its_assets_with_their_policy(
    deployment: Deployment,
) -> None:
    from hangar.dashboard import POLICY

    for path in ("/", "/sessions/any", "/static/app.js", "/static/vendor/xterm.js"):
        answer = httpx.get(deployment.api.url + path)
        assert answer.status_code == 200, path
        assert answer.headers["content-security-policy"] == POLICY, path
    assert httpx.get(deployment.api.url + "/static/package.json").status_code == 404


def test_a_forged_tick_at_the_ticks_function_changes_nothing(deployment: Deployment) -> None:
    forged = {"key": "idle:ses-nonexistent", "version": 1,
              "due_at": "2020-01-01T00:00:00+00:00", "url": deployment.ticks.url}  # fmt: skip
    answer = httpx.post(deployment.ticks.url, json=forged)
    assert answer.status_code == 200 and answer.text.strip() == "gone"
    assert httpx.post(deployment.ticks.url, content=b"not json").status_code == 400
