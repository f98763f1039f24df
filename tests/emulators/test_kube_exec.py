"""pods/exec of the Kubernetes stand-in, driven by the official client's websocket (``WSClient``)
over a real local sandbox, on both fronts (the stand-in's ``http.server`` hook and Starlette):
what the GKE backend will rely on."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

import pytest
import uvicorn
from kubernetes.client import ApiClient, Configuration, CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import V4_CHANNEL_PROTOCOL, V5_CHANNEL_PROTOCOL, WSClient
from starlette.applications import Starlette

from emulators.kube.exec import add_exec_route, exec_handler
from hangar.errors import SandboxNotFound
from hangar.sandboxes import ExecResult, Sandboxes, SandboxSpec, SandboxUser
from hangar.sandboxes.local import LocalSandboxes

EXEC = re.compile(r"^/api/v1/namespaces/(?P<namespace>[^/]+)/pods/(?P<name>[^/]+)/exec$")
WAIT = 120.0  # the bound on every wait; a healthy run takes a fraction of it

# A thread of the stand-in failing (its reader on a closed file) is an error, not a warning.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


class Recording:
    """The pod's sandboxes, telling the test each exec's result as it returns."""

    def __init__(self, inner: LocalSandboxes) -> None:
        self.inner = inner
        self.results: queue.Queue[ExecResult] = queue.Queue()

    def exec(self, sandbox_id: str, argv: Sequence[str], **options: Any) -> ExecResult:
        result = self.inner.exec(sandbox_id, argv, **options)
        self.results.put(result)
        return result


class Pod:
    """One stand-in pod (``ns/pod``) served on 127.0.0.1 in a thread, by ``front``: the
    ``http.server`` hook the stand-in's server calls, or a Starlette app under uvicorn."""

    def __init__(self, sandboxes: LocalSandboxes, front: str) -> None:
        self.sandboxes = sandboxes
        self.sandbox_id = sandboxes.create(SandboxSpec()).id
        self.recording = Recording(sandboxes)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)  # connections wait in the backlog until the server accepts them
        self.stop = self.serve_http() if front == "http.server" else self.serve_starlette()
        host, port = self.sock.getsockname()
        self.api = CoreV1Api(ApiClient(Configuration(host=f"http://{host}:{port}")))

    def serve_starlette(self) -> Callable[[], None]:
        app = Starlette()
        add_exec_route(app, self.resolve)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, args=([self.sock],), daemon=True)
        thread.start()

        def stop() -> None:
            server.should_exit = True
            thread.join(WAIT)

        return stop

    def serve_http(self) -> Callable[[], None]:
        handle = exec_handler(self.resolve)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                found = EXEC.match(self.path.partition("?")[0])
                if found is None:
                    self.send_error(404)
                    return
                handle(self, found["namespace"], found["name"])

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(self.sock.getsockname(), Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = self.sock
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()

        def stop() -> None:
            server.shutdown()
            thread.join(WAIT)

        return stop

    def resolve(self, namespace: str, name: str) -> tuple[Sandboxes, str]:
        if (namespace, name) != ("ns", "pod"):
            raise SandboxNotFound(f"no pod {namespace}/{name}", sandbox_id=name)
        return cast(Sandboxes, self.recording), self.sandbox_id

    def open(
        self, argv: list[str], *, stdin: bool = False, post: bool = False,
        protocol: str | None = None, name: str = "pod", tty: bool = False,
    ) -> WSClient:  # fmt: skip
        """The client's exec websocket, as the GKE backend will open it."""
        method = self.api.connect_post_namespaced_pod_exec if post else (
            self.api.connect_get_namespaced_pod_exec)  # fmt: skip
        headers = {"_headers": {"sec-websocket-protocol": protocol}} if protocol else {}
        return cast(WSClient, stream(
            method, name, "ns", command=argv, stdin=stdin, stdout=True, stderr=True, tty=tty,
            binary=True, _preload_content=False, **headers,
        ))  # fmt: skip

    def run(
        self, argv: list[str], stdin: Iterable[bytes] | None = None, **options: Any
    ) -> WSClient:
        """Run ``argv`` to its end: stdin written then closed (v5), every frame read."""
        client = self.open(argv, stdin=stdin is not None, **options)
        if stdin is not None:
            for chunk in stdin:
                client.write_stdin(chunk)
            client.close_channel(0)
        client.run_forever(timeout=WAIT)
        assert not client.is_open(), "the server did not close the websocket after the command"
        return client

    def close(self) -> None:
        self.stop()
        self.sock.close()


@pytest.fixture(params=["http.server", "starlette"])
def pod(sandboxes: LocalSandboxes, request: pytest.FixtureRequest) -> Iterator[Pod]:
    served = Pod(sandboxes, request.param)
    yield served
    served.close()


def output(client: WSClient) -> tuple[bytes, bytes]:
    return client.read_channel(1), client.read_channel(2)


def test_stdout_and_stderr_arrive_apart_and_exit_zero_is_success(pod: Pod) -> None:
    client = pod.run(["sh", "-c", "echo out; echo err >&2; echo more"])
    assert output(client) == (b"out\nmore\n", b"err\n")
    assert client.returncode == 0
    assert client.subprotocol == V5_CHANNEL_PROTOCOL


def test_a_non_zero_exit_comes_through_the_error_channel(pod: Pod) -> None:
    client = pod.run(["sh", "-c", "echo failing >&2; exit 3"])
    assert output(client) == (b"", b"failing\n")
    assert client.returncode == 3


def test_a_command_that_does_not_exist_exits_127_and_says_so(pod: Pod) -> None:
    client = pod.run(["no-such-command-here", "arg"])
    assert client.returncode == 127
    assert b"no-such-command-here" in output(client)[1]


def test_stdin_streamed_in_and_closed_ends_cat(pod: Pod) -> None:
    client = pod.run(["cat"], stdin=[b"hello ", b"over ", b"the socket\n"])
    assert output(client) == (b"hello over the socket\n", b"")
    assert client.returncode == 0


def test_fifty_megabytes_through_stdin_in_one_exec_arrive_intact(pod: Pod) -> None:
    size = 50 << 20
    data = os.urandom(size)
    chunks = (data[i : i + (1 << 20)] for i in range(0, size, 1 << 20))
    script = f"head -c {size} > /hangar/tmp/blob && sha256sum < /hangar/tmp/blob"
    client = pod.run(["sh", "-c", script], stdin=chunks)
    stdout, stderr = output(client)
    assert (client.returncode, stderr) == (0, b"")
    assert stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()


def test_closing_the_websocket_mid_command_kills_it(pod: Pod) -> None:
    client = pod.open(["sh", "-c", "echo $$; exec sleep 600"], stdin=True)
    pid = client.readline_stdout(timeout=WAIT).strip()
    assert pid.isdigit(), f"the command did not start: {pid!r}"
    client.close()
    result = pod.recording.results.get(timeout=WAIT)
    assert result.exit_code == 137  # killed, as exec's cancel kills
    # gone, or a zombie its pid namespace's init has yet to reap: not running either way
    stat = ["sh", "-c", f"cat /proc/{pid.decode()}/stat 2>/dev/null || echo 'gone) X'"]
    state = pod.sandboxes.exec(pod.sandbox_id, stat, user=SandboxUser.HANGAR).stdout
    assert state.rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"), f"still running: {state!r}"


def test_a_v4_only_client_still_runs_commands(pod: Pod) -> None:
    client = pod.run(["sh", "-c", "echo four; exit 4"], protocol=V4_CHANNEL_PROTOCOL)
    assert client.subprotocol == V4_CHANNEL_PROTOCOL
    assert output(client) == (b"four\n", b"")
    assert client.returncode == 4


def test_the_post_form_of_exec_is_served_too(pod: Pod) -> None:
    client = pod.run(["echo", "posted"], post=True)
    assert (output(client), client.returncode) == ((b"posted\n", b""), 0)


def test_exec_is_the_pods_root_and_setpriv_makes_the_agent_who_cannot_read_hangars_files(
    pod: Pod,
) -> None:
    as_agent = "setpriv --reuid=1000 --regid=1000 --clear-groups"
    script = (f"umask 077; echo secret > /hangar/tmp/hangars; id -u; {as_agent} id -u; "
              f"{as_agent} cat /hangar/tmp/hangars")  # fmt: skip
    client = pod.run(["sh", "-c", script])
    stdout, stderr = output(client)
    assert stdout.split() == [b"0", b"1000"]
    assert b"Permission denied" in stderr and b"secret" not in stdout
    assert client.returncode != 0


def test_a_pod_that_is_not_there_is_refused_with_404(pod: Pod) -> None:
    with pytest.raises(ApiException) as refused:
        pod.open(["true"], name="missing")
    assert "404" in str(refused.value)


def test_a_terminal_is_refused_before_the_upgrade_with_400(pod: Pod) -> None:
    with pytest.raises(ApiException) as refused:
        pod.open(["sh"], stdin=True, tty=True)
    assert "400" in str(refused.value)


def test_a_sandbox_gone_under_the_pod_is_an_internal_error_on_the_error_channel(pod: Pod) -> None:
    pod.sandboxes.destroy(pod.sandbox_id)
    client = pod.run(["true"])
    end = json.loads(client.read_channel(3))
    assert (end["status"], end["reason"], end["code"]) == ("Failure", "InternalError", 500)
    assert pod.sandbox_id in end["message"]
