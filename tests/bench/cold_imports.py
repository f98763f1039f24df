"""Cold starts of the Cloud Run functions, each measured in a fresh interpreter on the function
as deployed: its archive, built by ``make package``'s script and unpacked, first on
``sys.path``, with nothing written back (``PYTHONDONTWRITEBYTECODE``: every cold instance starts
from the archive). The archive's bytecode is compiled for the interpreter running the bench
(the deployed one carries the pinned Python's), so what is measured is what a cold instance of
the archive pays.

- ``cold_import_api`` / ``cold_import_ticks`` (target 0.5 s): importing the function's
  ``main.py``, what an instance pays before it can take its first request.
- ``cold_build_api`` (target 0.4 s, issue 22) / ``cold_build_ticks`` (0.5 s): that import plus
  building the function from cloud settings (the runtime, the app), which the first request
  pays. Building contacts no service, so no emulator is needed.
- ``cold_build_api_no_bytecode`` (no target): the same from the archive without its bytecode,
  every module of hangar compiled from source, as every cold start did before the archive
  carried it.
- ``cold_first_mcp_api`` (target 0.8 s, issue 22): the api function's import, its build, and
  its first MCP request (``tools/list``, through the app in process), which builds the MCP
  server and starts its session manager. Its token is checked against an embedded database, so
  that nothing but the MCP path differs from a warm call.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = 0.5
TARGETS = {"cold_build_api": 0.4, "cold_first_mcp_api": 0.8}
CLOUD_ENV = {
    "HANGAR_DB": "firestore://bench/(default)",
    "HANGAR_SESSION_STORE": "gs://bench/sessions",
    "HANGAR_KEYS": "gcpkms://projects/bench/locations/global/keyRings/r/cryptoKeys/k",
    "HANGAR_TICKS": "cloudtasks://projects/bench/locations/us-central1/queues/q",
    "HANGAR_TICKS_URL": "http://127.0.0.1:9/",
}
_PROBE = """
import os, sys, time
sys.path.insert(0, {folder!r})
start = time.perf_counter()
import main
imported = time.perf_counter() - start
if {build!r}:
    from hangar import functions
    kind = functions.ApiFunction if {name!r} == "api" else functions.TicksFunction
    os.environ.update({env!r}, HANGAR_DATA_DIR={data!r})
    kind.from_env(os.environ)
print(time.perf_counter() - start if {build!r} else imported)
"""


def unpacked(root: Path) -> dict[str, Path]:
    """Each function's archive, built (its bytecode for this interpreter) and unpacked under
    ``root``; ``api-source`` is the api function's without its bytecode."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "package-functions"), "--out",
                           str(root), "--python", sys.executable], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    folders = {}
    for name in ("api", "ticks"):
        with zipfile.ZipFile(root / f"{name}.zip") as archive:
            archive.extractall(root / name)
        folders[name] = root / name
    shutil.copytree(root / "api", root / "api-source", ignore=shutil.ignore_patterns("*.pyc"))
    folders["api-source"] = root / "api-source"
    return folders


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                          env=env)  # fmt: skip


def sample(name: str, build: bool, data_dir: Path, folder: Path) -> float:
    code = _PROBE.format(folder=str(folder), build=build, name=name, env=CLOUD_ENV,
                         data=str(data_dir))  # fmt: skip
    done = _run(code, folder)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.strip().splitlines()[-1])


_TOKEN = """
import os
from pathlib import Path
from hangar.operations.auth import ensure_admin_token
from hangar.config import Settings
from hangar.runtime import Runtime
runtime = Runtime(Settings.from_env(dict(os.environ, HANGAR_DATA_DIR={data!r})))
ensure_admin_token(runtime.db, Path({data!r}) / "admin-token")
runtime.close()
"""
_MCP_PROBE = """
import asyncio, os, sys, time
sys.path.insert(0, {folder!r})
os.environ.update(HANGAR_DATA_DIR={data!r})
token = open({data!r} + "/admin-token").read().strip()
import httpx
start = time.perf_counter()
import main
from hangar import functions
function = functions.ApiFunction.from_env(os.environ)
async def first():
    transport = httpx.ASGITransport(app=function.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        answer = await client.post("/mcp", json={{"jsonrpc": "2.0", "id": 1,
            "method": "tools/list", "params": {{}}}}, headers={{"Authorization": "Bearer " + token,
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25"}})
        assert answer.status_code == 200 and "wait_for_turn" in answer.text, answer.text[:300]
    took = time.perf_counter() - start
    await function.aclose()
    return took
print(asyncio.run(first()))
"""


def sample_mcp(data_dir: Path, folder: Path) -> float:
    if not (data_dir / "admin-token").exists():
        subprocess.run([sys.executable, "-c", _TOKEN.format(data=str(data_dir))], check=True,
                       cwd=ROOT)  # fmt: skip
    done = _run(_MCP_PROBE.format(folder=str(folder), data=str(data_dir)), folder)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.strip().splitlines()[-1])


def _line(bench: str, samples: list[float], target: float | None) -> dict[str, object]:
    samples = sorted(samples)
    return {"bench": bench, "seconds": round(samples[len(samples) // 2], 4), "target": target,
            "runs": len(samples), "samples": [round(s, 4) for s in samples]}  # fmt: skip


def lines(runs: int, data_dir: Path) -> list[dict[str, object]]:
    """One JSON line per measure: median seconds over ``runs`` fresh interpreters."""
    folders = unpacked(data_dir / "dist")
    out: list[dict[str, object]] = []
    for name in ("api", "ticks"):
        for build in (False, True):
            bench = f"cold_{'build' if build else 'import'}_{name}"
            samples = [sample(name, build, data_dir, folders[name]) for _ in range(runs)]
            out.append(_line(bench, samples, TARGETS.get(bench, TARGET)))
    samples = [sample("api", True, data_dir, folders["api-source"]) for _ in range(runs)]
    out.append(_line("cold_build_api_no_bytecode", samples, None))
    samples = [sample_mcp(data_dir / "mcp", folders["api"]) for _ in range(runs)]
    out.append(_line("cold_first_mcp_api", samples, TARGETS["cold_first_mcp_api"]))
    return out


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for line in lines(5, Path(tmp)):
            print(json.dumps(line))
