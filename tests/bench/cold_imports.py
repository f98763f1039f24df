"""Cold starts of the Cloud Run functions, each measured in a fresh interpreter.

- ``cold_import_api`` / ``cold_import_ticks`` (target 0.5 s, BRIEF §7): importing the
  function's ``main.py``, what an instance pays before it can take its first request.
- ``cold_build_api`` / ``cold_build_ticks`` (target 0.5 s, BRIEF §7: a cold function's first
  request): that import plus building the function from cloud settings (the runtime, the app),
  which the first request pays. Building contacts no service, so no emulator is needed.
- ``cold_first_mcp_api`` (no target of its own; the SDK's import is most of it): the api
  function's import, its build, and its first MCP request (``tools/list``, through the app in
  process), which builds the MCP server and starts its session manager. Its token is checked
  against an embedded database, so that nothing but the MCP path differs from a warm call.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = 0.5
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


def sample(name: str, build: bool, data_dir: Path) -> float:
    code = _PROBE.format(folder=str(ROOT / "functions" / name), build=build, name=name,
                         env=CLOUD_ENV, data=str(data_dir))  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT)  # fmt: skip
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


def sample_mcp(data_dir: Path) -> float:
    if not (data_dir / "admin-token").exists():
        subprocess.run([sys.executable, "-c", _TOKEN.format(data=str(data_dir))], check=True,
                       cwd=ROOT)  # fmt: skip
    code = _MCP_PROBE.format(folder=str(ROOT / "functions" / "api"), data=str(data_dir))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.strip().splitlines()[-1])


def lines(runs: int, data_dir: Path) -> list[dict[str, object]]:
    """One JSON line per measure: median seconds over ``runs`` fresh interpreters."""
    out: list[dict[str, object]] = []
    for name in ("api", "ticks"):
        for build in (False, True):
            samples = sorted(sample(name, build, data_dir) for _ in range(runs))
            out.append({
                "bench": f"cold_{'build' if build else 'import'}_{name}",
                "seconds": round(samples[len(samples) // 2], 4),
                "target": TARGET,
                "runs": runs,
                "samples": [round(s, 4) for s in samples],
            })  # fmt: skip
    samples = sorted(sample_mcp(data_dir / "mcp") for _ in range(runs))
    out.append({"bench": "cold_first_mcp_api", "seconds": round(samples[len(samples) // 2], 4),
                "runs": runs, "samples": [round(s, 4) for s in samples]})  # fmt: skip
    return out


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for line in lines(5, Path(tmp)):
            print(json.dumps(line))
