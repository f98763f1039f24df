"""What a person following a turn reads when the model API fails, from the real Claude Code,
Codex and pi on the host: each is pointed at an endpoint nobody listens on, then at one that
answers every model call with 503, and the first retry line their events render to
(:func:`hangar.harnesses.events.describe_event`, as ``-w``, ``session log`` and
``wait_for_turn`` show it) must name the cause. Each CLI is stopped at its first retry. And a pi
turn whose first attempt failed goes on through pi's own retry to its end."""

from __future__ import annotations

import http.client
import json
import os
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from emulators.model import ModelStub
from tests import installed_scripts as scripts
from hangar.harnesses import TurnSpec, get_harness
from hangar.harnesses.events import describe_event
from tests.harness.conftest import harness_dir

pytestmark = pytest.mark.harness

RETRY_SECONDS = 60
OUTAGE = "stub outage"


class _Outage(BaseHTTPRequestHandler):
    """503 with an Anthropic/OpenAI-shaped error body for every call; 200 for Claude Code's
    ``HEAD /`` probe."""

    protocol_version = "HTTP/1.1"

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"type": "error", "error": {"type": "api_error",
                                                      "message": OUTAGE}}).encode()  # fmt: skip
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def outage() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Outage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Recovering(_Outage):
    """503 for the server's first ``failures`` model calls, then each call passed on to the
    model stub at ``upstream`` (its whole answer, then relayed)."""

    def do_POST(self) -> None:
        server = self.server
        assert isinstance(server, _RecoveringServer)
        with server.lock:
            server.failures -= 1
            failing = server.failures >= 0
        if failing:
            super().do_POST()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        upstream = http.client.HTTPConnection("127.0.0.1", server.upstream, timeout=30)
        upstream.request("POST", self.path, body, {"Content-Type": "application/json"})
        answer = upstream.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.getheader("Content-Type") or "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _RecoveringServer(ThreadingHTTPServer):
    def __init__(self, upstream: int, failures: int) -> None:
        super().__init__(("127.0.0.1", 0), _Recovering)
        self.upstream, self.failures, self.lock = upstream, failures, threading.Lock()


@pytest.fixture
def recovering() -> Iterator[str]:
    """A model endpoint whose first three calls answer 503 (the OpenAI client's own two
    retries included: pi's first attempt fails), then the model stub's answers."""
    with ModelStub({"rules": [], "default": [{"text": "Recovered after the outage."}]}) as stub:
        server = _RecoveringServer(stub.port, failures=3)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()


@pytest.fixture
def nobody() -> str:
    """A loopback URL whose port was free a moment ago: a connection there is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def first_line(argv: list[str], home: Path, repo: Path, env: dict[str, str], starting: str) -> str:
    """Run a CLI with a short prompt on stdin until one of its stdout events renders as a line
    ``starting`` so; that line. The CLI is killed then (bounded by RETRY_SECONDS)."""
    proc = subprocess.Popen(
        argv, cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", **env},
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"say hello\n")
    proc.stdin.close()
    lines: queue.Queue[bytes] = queue.Queue()
    out = proc.stdout

    def read() -> None:
        for raw in out:
            lines.put(raw)
        lines.put(b"")  # the end

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + RETRY_SECONDS
    try:
        while True:
            try:
                raw = lines.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                raise AssertionError(f"no {starting!r} in {RETRY_SECONDS} s: {seen}") from None
            assert raw, f"{argv[0]} ended without a line {starting!r}: {seen}"
            said = describe_event(raw)
            seen.append(said or "")
            if said and said.startswith(starting):
                return said
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


def claude(home: Path, repo: Path, url: str, starting: str = "model API retry") -> str:
    argv = [str(harness_dir() / "node_modules" / ".bin" / "claude"), "-p", "--output-format",
            "stream-json", "--verbose", "--dangerously-skip-permissions", "--model",
            "claude-sonnet-4-5"]  # fmt: skip
    return first_line(argv, home, repo, {
        "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-stub", "IS_SANDBOX": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"},
        starting)  # fmt: skip


def codex(home: Path, repo: Path, url: str, starting: str) -> str:
    (home / ".codex").mkdir(exist_ok=True)
    (home / ".codex" / "config.toml").write_text(
        'model = "gpt-5-codex"\nmodel_provider = "stub"\n\n[model_providers.stub]\n'
        f'name = "stub"\nbase_url = "{url}/v1"\nenv_key = "STUB_API_KEY"\n'
        'wire_api = "responses"\n')  # fmt: skip
    argv = [str(harness_dir() / "node_modules" / ".bin" / "codex"), "exec", "--json",
            "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-"]  # fmt: skip
    return first_line(argv, home, repo, {"STUB_API_KEY": "sk-stub"}, starting)


PI_ENV = {"OPENAI_API_KEY": "sk-stub", "PI_OFFLINE": "1"}


def pi_command(home: Path, url: str) -> list[str]:
    """pi pointed at ``url`` as hangar runs it: its RPC mode under hangar's driver, the
    message on standard input."""
    (home / ".pi" / "agent").mkdir(parents=True, exist_ok=True)
    provider = {"baseUrl": f"{url}/v1", "api": "openai-completions", "apiKey": "OPENAI_API_KEY",
                "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                "models": [{"id": "stub-model", "contextWindow": 128000, "maxTokens": 16384}]}
    (home / ".pi" / "agent" / "models.json").write_text(
        json.dumps({"providers": {"hangar": provider}}))  # fmt: skip
    return scripts.command("pirpc", str(harness_dir() / "node_modules" / ".bin" / "pi"), "--mode",
                         "rpc", "--model", "hangar/stub-model")  # fmt: skip


def pi(home: Path, repo: Path, url: str, starting: str = "model API retry") -> str:
    return first_line(pi_command(home, url), home, repo, PI_ENV, starting)


def test_claude_code_retries_say_no_http_answer_for_a_refused_endpoint_and_a_503s_status(
    home: Path, repo: Path, nobody: str, outage: str
) -> None:
    # Claude Code's own event says only "error": "unknown" here; it names the cause (for
    # example "Unable to connect to API (ConnectionRefused)") after its last retry alone.
    refused = claude(home, repo, nobody)
    assert refused.startswith("model API retry 1/10 in ")
    assert refused.endswith(": no HTTP answer (connection refused, host unreachable or timed "
                            "out: Claude Code says which after its last retry)")  # fmt: skip
    answered = claude(home, repo, outage)
    assert answered.startswith("model API retry 1/10 in ")
    assert answered.endswith(": HTTP 503: server error")


def test_codex_retries_name_a_failed_connection_and_a_503_with_its_message(
    home: Path, repo: Path, nobody: str, outage: str
) -> None:
    refused = codex(home, repo, nobody, "model API: Reconnecting")
    assert "Connection failed" in refused
    answered = codex(home, repo, outage, "model API retry")
    assert answered == f"model API retry 1/5: HTTP 503 Service Unavailable: {OUTAGE}"


def test_pi_retries_name_a_refused_connection_and_a_503_with_its_message(
    home: Path, repo: Path, nobody: str, outage: str
) -> None:
    refused = pi(home, repo, nobody)
    assert refused == ("model API retry 1/3 in 2.0 s: Connection error. (no HTTP answer: refused, "
                       "not found or unreachable)")  # fmt: skip
    answered = pi(home, repo, outage)
    assert answered == f"model API retry 1/3 in 2.0 s: HTTP 503: {OUTAGE}"


def test_a_pi_turn_whose_first_attempt_failed_goes_on_through_pis_retry_to_its_end(
    home: Path, repo: Path, recovering: str
) -> None:
    # pi writes an agent_end for the failed attempt, then its retry's event: hangar's driver
    # must not end the session there.
    done = subprocess.run(pi_command(home, recovering), cwd=repo, input=b"say hello",
                          capture_output=True, timeout=RETRY_SECONDS,
                          env={"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
                               **PI_ENV})  # fmt: skip
    assert done.returncode == 0, done.stderr
    kinds = [json.loads(line)["type"] for line in done.stdout.splitlines()]
    first_end = kinds.index("agent_end")
    assert kinds[first_end + 1] == "auto_retry_start", kinds
    assert kinds.count("agent_end") == 2, kinds
    result = get_harness("pi").outcome(TurnSpec("say hello", str(repo)), done.returncode,
                                       done.stdout, done.stderr)  # fmt: skip
    assert result.ok and result.summary == "Recovered after the outage.", result
