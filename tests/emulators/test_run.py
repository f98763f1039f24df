"""``emulators/run -- CMD``: every cloud emulator up, CMD run against them, all stopped after."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "emulators" / "run"

PROBE = """
import json, os, uuid
from hangar.config import Settings
from hangar.runtime import Runtime
from hangar.models import Session

settings = Settings.from_env({**os.environ, "HANGAR_DATA_DIR": os.environ["PROBE_DIR"],
                              "HANGAR_TICKS_URL": "http://127.0.0.1:9/ticks"})
runtime = Runtime(settings)
made = runtime.db.create_session(Session(name="probe", environment="e", harness="claude"))
runtime.blobs.put("probe/object", b"hello")
key = os.urandom(32)
print(json.dumps({
    "env": {k: v for k, v in os.environ.items()
            if k.startswith(("HANGAR_", "FIRESTORE_", "STORAGE_"))},
    "session": runtime.db.get_session(made.id).name,
    "blob": runtime.blobs.get("probe/object").decode(),
    "key": runtime.keys.unwrap(runtime.keys.wrap(key)) == key,
    "backends": [type(p).__name__ for p in (runtime.db, runtime.blobs, runtime.keys,
                                             runtime.ticks)],
}))
runtime.close()
"""


def _refused(host_port: str) -> bool:
    host, _, port = host_port.removeprefix("http://").partition(":")
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


def test_run_points_hangar_at_every_emulator_and_stops_them_after(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(RUN), "--", sys.executable, "-c", PROBE],
        capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PROBE_DIR": str(tmp_path / "d")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["backends"] == ["FirestoreDb", "GcsBlobs", "GcpKmsKeys", "CloudTasksTicks"]
    assert probe["session"] == "probe" and probe["blob"] == "hello" and probe["key"] is True
    env = probe["env"]
    assert env["HANGAR_DB"].startswith("firestore://")
    assert env["HANGAR_TICKS"].startswith("cloudtasks://projects/")
    assert "HANGAR_SANDBOXES" not in env  # sandboxes stay local
    for name in ("FIRESTORE_EMULATOR_HOST", "STORAGE_EMULATOR_HOST", "HANGAR_KMS_ENDPOINT",
                 "HANGAR_TASKS_ENDPOINT"):  # fmt: skip
        assert env[name].removeprefix("http://").startswith("127.0.0.1:")
        assert _refused(env[name]), f"{name} still answers after the run"


def test_run_exits_with_the_commands_status() -> None:
    done = subprocess.run([str(RUN), "--", "sh", "-c", "exit 3"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 3, done.stderr


def test_run_says_clearly_when_the_command_cannot_be_run() -> None:
    done = subprocess.run([str(RUN), "--", "/nonexistent/tool"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 127
    assert "cannot run /nonexistent/tool" in done.stderr


GKE_PROBE = """
import json, os, sys, time
from hangar.config import Settings
from hangar.sandboxes import SandboxSpec, SandboxState, open_sandboxes

settings = Settings.from_env({**os.environ, "HANGAR_DATA_DIR": os.environ["PROBE_DIR"]})
sandboxes = open_sandboxes(settings.sandboxes, settings)
info = sandboxes.create(SandboxSpec(labels={"probe": "1"}))
deadline = time.monotonic() + 60
while sandboxes.status(info.id).state is not SandboxState.READY:
    assert time.monotonic() < deadline, "no ready pod in 60 s"
    time.sleep(0.1)
fetch = '''
import sys, urllib.error as e, urllib.request as u
try:
    print(u.urlopen(sys.argv[1], timeout=10).status)
except e.HTTPError as exc:
    print(exc.code)
except OSError:
    print("unreachable")
'''
answers = {}
paths = {"SERVICE_URL": "/", "STORAGE_EMULATOR_HOST": "/storage/v1/b?project=p",
         "HANGAR_SIGNED_URL_ENDPOINT": "/hangar-local/sessions/x"}
for name, path in paths.items():
    done = sandboxes.exec(info.id, ["python3", "-c", fetch, os.environ[name] + path], timeout=30)
    answers[name] = done.stdout.decode().strip() or done.stderr.decode()[-300:]
sandboxes.destroy(info.id)
print(json.dumps({"sandboxes": os.environ["HANGAR_SANDBOXES"], "answers": answers,
                  "backend": type(sandboxes).__name__}))
"""


def test_run_with_gke_sandboxes_gives_pods_that_reach_the_services_named_and_signed_storage_only(
    tmp_path: Path,
) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, *args: object) -> None:
            pass

    host = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    port = host.server_address[1]
    try:
        done = subprocess.run(
            [str(RUN), "--sandboxes", "gke", "--service", str(port), "--", sys.executable, "-c",
             GKE_PROBE], capture_output=True, text=True, timeout=180,
            env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(tmp_path),
                 "PROBE_DIR": str(tmp_path / "d"), "SERVICE_URL": f"http://127.0.0.1:{port}"},
        )  # fmt: skip
    finally:
        host.shutdown()
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["backend"] == "GkeSandboxes"
    assert probe["sandboxes"].startswith("gke://hangar-stand-in/default?image=")
    # The bucket only through the front's signed port, which refuses an unsigned request; its
    # API port (the control plane's, unchecked) is not relayed to pods.
    assert probe["answers"] == {"SERVICE_URL": "200", "STORAGE_EMULATOR_HOST": "unreachable",
                                "HANGAR_SIGNED_URL_ENDPOINT": "403"}


def test_run_refuses_a_service_without_gke_sandboxes() -> None:
    done = subprocess.run([str(RUN), "--service", "8080", "--", "true"], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "--service needs --sandboxes gke" in done.stderr
