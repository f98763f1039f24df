"""The conformance suite every :class:`hangar.sandboxes.Sandboxes` backend runs, unchanged.

Subclass :class:`SandboxesConformance` in a test module and give it two function-scoped
fixtures: ``sandboxes``, a fresh backend instance (the bare port, no policy above it) that
destroys every sandbox it made at teardown, and ``sandboxes_settings``, settings whose
``sandboxes`` URL opens that same backend (the suite opens it afresh, in this process and in a
new one, to find its sandboxes again). A backend that declares ``images`` gives a third,
``sandboxes_image``: a container image reference it can run that holds ``python3``, ``git``
and ``tar``. The suite only uses the port, so it runs unchanged
against any backend; each test labels its sandboxes with a unique ``conformance`` value, so a
shared backend is fine. Every sandbox is awaited until ``status`` says ready before it is used;
optional capabilities are tried where the backend declares them and must be refused where it
does not.
"""

from __future__ import annotations

import hashlib
import io
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hangar.config import Settings
from hangar.errors import ExecTimeout, SandboxCapabilityMissing, SandboxError, SandboxNotFound
from hangar.sandboxes import HANGAR_BIN, HANGAR_DIR, HANGAR_TMP, HOME, WORKSPACE, SandboxInfo
from hangar.sandboxes import Sandboxes, SandboxSpec, SandboxState, SandboxStatus, SandboxUser
from hangar.sandboxes import open_sandboxes

READY_SECONDS = 900.0
"""How long a new sandbox may stay pending (a cluster may have to bring a node up)."""

GONE = (
    "for p in $(cat /tmp/parent) $(cat /tmp/child); do i=0; "
    "while kill -0 $p 2>/dev/null; do i=$((i+1)); [ $i -lt 200 ] || exit 1; "
    "sleep 0.05; done; done"
)
"""A script that succeeds once the processes named in /tmp/parent and /tmp/child are gone (a
bounded wait inside the sandbox)."""

CONNECT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
    print("got", s.recv(100).decode())
except OSError as exc:
    print("refused", type(exc).__name__)
"""
"""Connects to HOST PORT and prints ``got GREETING`` or ``refused ERROR``."""


def until_ready(sandboxes: Sandboxes, sandbox_id: str,
                timeout: float = READY_SECONDS) -> list[SandboxStatus]:  # fmt: skip
    """Wait (bounded) until the sandbox is ready; returns every status seen. AssertionError if
    it fails or is still pending after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    seen = [sandboxes.status(sandbox_id)]
    pause = 0.01
    while seen[-1].state is SandboxState.PENDING:
        assert time.monotonic() < deadline, f"{sandbox_id} still pending: {seen[-1].reason}"
        time.sleep(pause)
        pause = min(pause * 2, 2.0)
        seen.append(sandboxes.status(sandbox_id))
    assert seen[-1].state is SandboxState.READY, seen[-1]
    return seen


def make(sandboxes: Sandboxes, spec: SandboxSpec | None = None, **labels: str) -> SandboxInfo:
    """Create a sandbox (from ``spec``) labelled with ``labels`` plus a unique ``conformance``
    label, and wait until it is ready."""
    spec = spec or SandboxSpec()
    labelled = {**spec.labels, "conformance": uuid.uuid4().hex, **labels}
    info = sandboxes.create(replace(spec, labels=labelled))
    until_ready(sandboxes, info.id)
    return info


def run(sandboxes: Sandboxes, sandbox_id: str, script: str, user: SandboxUser = SandboxUser.AGENT
        ) -> str:  # fmt: skip
    """Run a shell script that must succeed; return its stdout as text."""
    result = sandboxes.exec(sandbox_id, ["sh", "-c", script], user=user)
    assert result.exit_code == 0, result
    return result.stdout.decode()


def connect(sandboxes: Sandboxes, sandbox_id: str, host: str, port: int) -> str:
    """From inside, as the agent: ``got GREETING`` or ``refused ERROR`` (:data:`CONNECT`)."""
    result = sandboxes.exec(sandbox_id, ["python3", "-I", "-c", CONNECT, host, str(port)])
    assert result.ok, result
    return result.stdout.decode().strip()


class Listener:
    """A TCP server on the host's loopback that answers every connection with ``greeting``."""

    def __init__(self, greeting: bytes) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        self.greeting = greeting
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(self.greeting)

    def close(self) -> None:
        self.server.close()


class Digest:
    """A binary sink that keeps only the count and the SHA-256 of what is written to it."""

    def __init__(self) -> None:
        self.count = 0
        self.hash = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.count += len(data)
        self.hash.update(data)
        return len(data)


_CHILD = """
import json, sys
from hangar.config import Settings
from hangar.sandboxes import SandboxSpec, open_sandboxes
from hangar.testing.sandboxes import run, until_ready

settings = Settings.build(**json.loads(sys.stdin.read()))
sandboxes = open_sandboxes(settings.sandboxes, settings)
info = sandboxes.create(SandboxSpec(labels={"conformance": sys.argv[1]}))
until_ready(sandboxes, info.id)
run(sandboxes, info.id, "sleep 300 </dev/null >/dev/null 2>&1 & echo $! > /tmp/bg.pid")
print(info.id)
"""


class SandboxesConformance:
    """Behaviour every sandboxes backend shares (see the contract in :mod:`hangar.sandboxes`)."""

    # -- finding sandboxes ----------------------------------------------------------------------

    def test_create_returns_a_sandbox_that_get_finds(self, sandboxes: Sandboxes) -> None:
        before = time.time()
        info = make(sandboxes, role="test")
        assert info.labels["role"] == "test"
        assert before - 60 < info.created_at.timestamp() < time.time() + 60
        assert sandboxes.get(info.id) == info

    def test_list_returns_live_sandboxes_with_every_label_oldest_first(
        self, sandboxes: Sandboxes
    ) -> None:
        group = uuid.uuid4().hex
        first = make(sandboxes, group=group, kind="a")
        second = make(sandboxes, group=group, kind="b")
        make(sandboxes, group=uuid.uuid4().hex, kind="a")
        assert [i.id for i in sandboxes.list({"group": group})] == [first.id, second.id]
        assert [i.id for i in sandboxes.list({"group": group, "kind": "b"})] == [second.id]
        assert sandboxes.list({"group": group, "kind": "c"}) == []
        assert {first.id, second.id} <= {i.id for i in sandboxes.list()}

    # -- exec ----------------------------------------------------------------------------------

    def test_exec_returns_the_exit_code_and_output(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        result = sandboxes.exec(info.id, ["sh", "-c", "printf out; printf err >&2; exit 3"])
        assert (result.exit_code, result.stdout, result.stderr) == (3, b"out", b"err")
        assert not result.ok
        assert sandboxes.exec(info.id, ["true"]).ok

    def test_exec_streams_stdin_from_bytes_a_file_or_chunks(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        assert sandboxes.exec(info.id, ["cat"], stdin=b"from bytes").stdout == b"from bytes"
        from_file = sandboxes.exec(info.id, ["cat"], stdin=io.BytesIO(b"from a file"))
        assert from_file.stdout == b"from a file"
        chunks = (f"chunk {i}\n".encode() for i in range(100))
        expected = b"".join(f"chunk {i}\n".encode() for i in range(100))
        assert sandboxes.exec(info.id, ["cat"], stdin=chunks).stdout == expected

    def test_exec_streams_megabytes_in_and_out_at_once(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        data = os.urandom(4 * 1024 * 1024)
        chunks = (data[i : i + 100_000] for i in range(0, len(data), 100_000))
        result = sandboxes.exec(info.id, ["cat"], stdin=chunks)
        assert result.ok and result.stdout == data

    def test_exec_streams_stdout_and_stderr_to_files(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            script = "head -c 3000000 /dev/zero; printf oops >&2"
            result = sandboxes.exec(info.id, ["sh", "-c", script], stdout=out, stderr=err)
            assert (result.exit_code, result.stdout, result.stderr) == (0, b"", b"")
            out.seek(0)
            err.seek(0)
            assert out.read() == b"\0" * 3_000_000
            assert err.read() == b"oops"

    def test_exec_uses_the_spec_env_then_the_call_env(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes, SandboxSpec(env={"ONE": "spec", "TWO": "spec"}))
        script = 'printf "%s %s %s %s" "$ONE" "$TWO" "$THREE" "$HOME"'
        result = sandboxes.exec(info.id, ["sh", "-c", script], env={"TWO": "call", "THREE": "x y"})
        assert result.stdout.decode() == f"spec call x y {HOME}"

    def test_exec_runs_in_home_unless_given_a_cwd(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        assert run(sandboxes, info.id, "pwd").strip() == HOME
        result = sandboxes.exec(info.id, ["pwd"], cwd=WORKSPACE)
        assert result.stdout.decode().strip() == WORKSPACE

    def test_exec_timeout_raises_exec_timeout_and_kills_the_command(
        self, sandboxes: Sandboxes
    ) -> None:
        info = make(sandboxes)
        script = "echo $$ > /tmp/parent; sleep 300 & echo $! > /tmp/child; wait"
        started = time.monotonic()
        with pytest.raises(ExecTimeout):
            sandboxes.exec(info.id, ["sh", "-c", script], timeout=1.5)
        assert time.monotonic() - started < 30
        assert sandboxes.exec(info.id, ["sh", "-c", GONE]).ok

    def test_a_cancelled_exec_kills_the_command_and_returns_137(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        cancel = threading.Event()
        script = "echo $$ > /tmp/parent; sleep 300 & echo $! > /tmp/child; echo up; wait"

        class Screen(io.BytesIO):
            def write(self, data: bytes) -> int:  # type: ignore[override]
                cancel.set()  # the command has started (and said so): cancel it now
                return super().write(data)

        started = time.monotonic()
        result = sandboxes.exec(info.id, ["sh", "-c", script], stdout=Screen(), cancel=cancel)
        assert result.exit_code == 137
        assert time.monotonic() - started < 30
        assert sandboxes.exec(info.id, ["sh", "-c", GONE]).ok
        assert sandboxes.exec(info.id, ["true"], cancel=threading.Event()).ok  # unset: no effect

    # -- files ---------------------------------------------------------------------------------

    def test_put_file_and_get_file_round_trip_megabytes_with_mode(
        self, sandboxes: Sandboxes
    ) -> None:
        info = make(sandboxes)
        data = os.urandom(3 * 1024 * 1024 + 17)
        path = f"{WORKSPACE}/deep/er/blob.bin"
        sandboxes.put_file(info.id, path, io.BytesIO(data), mode=0o600)
        out = io.BytesIO()
        assert sandboxes.get_file(info.id, path, out) == len(data)
        assert out.getvalue() == data
        assert run(sandboxes, info.id, f"stat -c %a {path}").strip() == "600"

    def test_put_file_replaces_a_file_and_defaults_to_mode_644(
        self, sandboxes: Sandboxes
    ) -> None:
        info = make(sandboxes)
        path = f"{HOME}/note.txt"
        sandboxes.put_file(info.id, path, b"first version, longer")
        sandboxes.put_file(info.id, path, b"second")
        assert run(sandboxes, info.id, f"cat {path}") == "second"
        assert run(sandboxes, info.id, f"stat -c %a {path}").strip() == "644"
        sandboxes.put_file(info.id, f"{HOME}/run.sh", b"#!/bin/sh\necho ran\n", mode=0o755)
        assert run(sandboxes, info.id, f"{HOME}/run.sh") == "ran\n"

    def test_get_file_of_a_missing_path_raises_sandbox_error(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        with pytest.raises(SandboxError, match="no/such/file"):
            sandboxes.get_file(info.id, f"{WORKSPACE}/no/such/file", io.BytesIO())

    # -- destroy -------------------------------------------------------------------------------

    def test_destroy_is_idempotent_and_the_port_has_no_hooks(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        sandboxes.destroy(info.id)
        sandboxes.destroy(info.id)
        sandboxes.destroy(f"{info.id}-never-made")
        with pytest.raises(SandboxNotFound):
            sandboxes.get(info.id)
        # Hooks, the veto and force are the policy's (hangar.sandboxes.policy), not a backend's.
        assert not hasattr(sandboxes, "add_pre_destroy_hook")

    def test_extend_keeps_a_sandbox_usable_and_of_a_missing_one_does_nothing(
        self, sandboxes: Sandboxes
    ) -> None:
        info = make(sandboxes)
        soon = datetime.now(UTC) + timedelta(hours=1)
        sandboxes.extend(info.id, soon + timedelta(hours=1))
        sandboxes.extend(info.id, soon)  # never shortens
        assert run(sandboxes, info.id, "echo still") == "still\n"
        assert sandboxes.get(info.id) == info
        sandboxes.destroy(info.id)
        sandboxes.extend(info.id, soon)
        sandboxes.extend(f"{info.id}-never-made", soon)
        with pytest.raises(SandboxNotFound):
            sandboxes.get(info.id)

    def test_a_destroyed_sandbox_is_not_found_and_not_listed(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        kept = make(sandboxes)
        sandboxes.destroy(info.id)
        with pytest.raises(SandboxNotFound):
            sandboxes.get(info.id)
        with pytest.raises(SandboxNotFound):
            sandboxes.exec(info.id, ["true"])
        with pytest.raises(SandboxNotFound):
            sandboxes.put_file(info.id, f"{HOME}/x", b"x")
        with pytest.raises(SandboxNotFound):
            sandboxes.get_file(info.id, "/etc/hostname", io.BytesIO())
        assert info.id not in {i.id for i in sandboxes.list()}
        assert sandboxes.get(kept.id) == kept

    # -- what a sandbox holds ------------------------------------------------------------------

    def test_workspace_exists_and_is_writable(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        script = f"mkdir {WORKSPACE}/repo && echo hi > {WORKSPACE}/repo/f && cat {WORKSPACE}/repo/f"
        assert run(sandboxes, info.id, script) == "hi\n"

    def test_home_is_writable_and_private_to_each_sandbox(self, sandboxes: Sandboxes) -> None:
        one, two = make(sandboxes), make(sandboxes)
        assert run(sandboxes, one.id, 'echo "$HOME"').strip() == HOME
        run(sandboxes, one.id, 'mkdir -p "$HOME/.agent" && echo secret > "$HOME/.agent/conv"')
        assert run(sandboxes, one.id, 'cat "$HOME/.agent/conv"') == "secret\n"
        assert not sandboxes.exec(two.id, ["test", "-e", f"{HOME}/.agent/conv"]).ok

    def test_tmp_is_private_to_each_sandbox(self, sandboxes: Sandboxes) -> None:
        one, two = make(sandboxes), make(sandboxes)
        name = f"/tmp/conformance-{uuid.uuid4().hex}"
        run(sandboxes, one.id, f"echo x > {name}")
        assert sandboxes.exec(one.id, ["test", "-f", name]).ok
        assert not sandboxes.exec(two.id, ["test", "-e", name]).ok

    def test_python3_git_and_tar_run(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        code = "import sys; print(sys.flags.isolated, sys.version_info >= (3, 8))"
        isolated = sandboxes.exec(info.id, ["/usr/bin/python3", "-I", "-c", code])
        assert isolated.stdout == b"1 True\n", isolated
        assert sandboxes.exec(info.id, ["python3", "-c", "print(6 * 7)"]).stdout == b"42\n"
        script = (
            "cd /tmp && git init -q r && cd r && echo a > a && git add a && "
            "git -c user.name=t -c user.email=t@t commit -qm a && "
            "tar -cf ../r.tar . && tar -tf ../r.tar | grep -qx ./a && git log --format=%s"
        )
        assert run(sandboxes, info.id, script) == "a\n"

    # -- status --------------------------------------------------------------------------------

    def test_a_new_sandbox_is_pending_with_a_reason_until_ready_and_a_missing_one_not_found(
        self, sandboxes: Sandboxes
    ) -> None:
        info = sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}))
        seen = until_ready(sandboxes, info.id)
        assert all(s.state is SandboxState.PENDING and s.reason for s in seen[:-1]), seen
        assert seen[-1] == SandboxStatus(SandboxState.READY)
        assert sandboxes.exec(info.id, ["true"]).ok
        sandboxes.destroy(info.id)
        for missing in (info.id, "no-such-sandbox"):
            with pytest.raises(SandboxNotFound):
                sandboxes.status(missing)

    def test_await_status_answers_a_new_sandbox_ready_and_a_missing_one_not_found(
        self, sandboxes: Sandboxes
    ) -> None:
        info = sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}))
        deadline = time.monotonic() + READY_SECONDS
        status = sandboxes.await_status(info.id, READY_SECONDS)
        while status.state is SandboxState.PENDING:  # a backend that cannot wait answers at once
            assert time.monotonic() < deadline, f"{info.id} still pending: {status.reason}"
            time.sleep(0.05)
            status = sandboxes.await_status(info.id, READY_SECONDS)
        assert status == SandboxStatus(SandboxState.READY)
        assert sandboxes.exec(info.id, ["true"]).ok
        sandboxes.destroy(info.id)
        for missing in (info.id, "no-such-sandbox"):
            with pytest.raises(SandboxNotFound):
                sandboxes.await_status(missing, 1)

    # -- found again ---------------------------------------------------------------------------

    def test_a_backend_opened_afresh_on_the_same_url_finds_uses_and_destroys_a_sandbox(
        self, sandboxes: Sandboxes, sandboxes_settings: Settings
    ) -> None:
        info = make(sandboxes)
        run(sandboxes, info.id, "echo kept > /tmp/mark")
        again = open_sandboxes(sandboxes_settings.sandboxes, sandboxes_settings)
        assert again is not sandboxes
        assert again.get(info.id) == info
        assert again.list({"conformance": info.labels["conformance"]}) == [info]
        assert again.status(info.id).state is SandboxState.READY
        assert run(again, info.id, "cat /tmp/mark") == "kept\n"
        again.destroy(info.id)
        with pytest.raises(SandboxNotFound):
            sandboxes.get(info.id)

    def test_a_sandbox_made_by_another_process_outlives_it_with_its_processes(
        self, sandboxes: Sandboxes, sandboxes_settings: Settings
    ) -> None:
        label = uuid.uuid4().hex
        child = subprocess.run([sys.executable, "-c", _CHILD, label],
                               input=sandboxes_settings.model_dump_json().encode(),
                               capture_output=True, timeout=READY_SECONDS + 60)  # fmt: skip
        assert child.returncode == 0, child.stderr.decode()
        made = child.stdout.decode().split()[-1]
        [info] = sandboxes.list({"conformance": label})
        assert info.id == made
        check = 'p=$(cat /tmp/bg.pid) && kill -0 "$p" && tr "\\0" " " < /proc/$p/cmdline'
        assert run(sandboxes, made, check) == "sleep 300 "
        sandboxes.destroy(made)
        assert sandboxes.list({"conformance": label}) == []

    # -- the uid split -------------------------------------------------------------------------

    def test_the_agent_can_neither_signal_trace_nor_read_hangars_processes_and_files(
        self, sandboxes: Sandboxes
    ) -> None:
        info = make(sandboxes)
        hangar = SandboxUser.HANGAR
        sandboxes.put_file(info.id, f"{HANGAR_DIR}/conformance-secret", b"s3cret", mode=0o600,
                           user=hangar)  # fmt: skip
        sandboxes.put_file(info.id, f"{HANGAR_TMP}/conformance-secret", b"s3cret", user=hangar)
        holder = (f"exec 7<{HANGAR_DIR}/conformance-secret; echo $$ > /tmp/hangar.pid; "
                  "exec sleep 303 </dev/null >/dev/null 2>&1")  # fmt: skip
        started = sandboxes.exec(info.id, ["sh", "-c", f"sh -c '{holder}' &"], user=hangar,
                                 env={"SECRET_X": "s3cret"})  # fmt: skip
        assert started.ok, started
        deadline = time.monotonic() + 20
        while not (pid := run(sandboxes, info.id, "cat /tmp/hangar.pid 2>/dev/null || true")
                   .strip()):  # fmt: skip
            assert time.monotonic() < deadline, "hangar's process never started"
            time.sleep(0.02)
        attacks = {
            "kill": f"kill -9 {pid}",
            "fd": f"ls -l /proc/{pid}/fd/",
            "environ": f"cat /proc/{pid}/environ",
            "mem": f"head -c 1 /proc/{pid}/mem",
            "file": f"cat {HANGAR_DIR}/conformance-secret",
            "scratch": f"cat {HANGAR_TMP}/conformance-secret",
            "listing": f"ls {HANGAR_DIR}",
            "write": f"echo forged > {HANGAR_BIN}/conformance-forged",
        }
        for name, script in attacks.items():
            result = sandboxes.exec(info.id, ["sh", "-c", script])
            assert not result.ok and b"s3cret" not in result.stdout, (name, result)
        trace = (
            "import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
            "print(libc.ptrace(16, int(sys.argv[1]), 0, 0), ctypes.get_errno())"
        )
        result = sandboxes.exec(info.id, ["python3", "-c", trace, pid])
        assert result.stdout.split() == [b"-1", b"1"]  # PTRACE_ATTACH: EPERM
        assert sandboxes.exec(info.id, ["kill", "-0", pid], user=hangar).ok, "it died"
        assert run(sandboxes, info.id, f"cat {HANGAR_TMP}/conformance-secret", hangar) == "s3cret"

    def test_hangar_bin_is_first_on_the_agents_path_even_when_the_caller_sets_path(
        self, sandboxes: Sandboxes
    ) -> None:
        info = make(sandboxes, SandboxSpec(env={"PATH": "/tmp/spec:/usr/bin:/bin"}))
        tool = "conformance-tool"
        sandboxes.put_file(info.id, f"{HANGAR_BIN}/{tool}", b"#!/bin/sh\necho from-hangar\n",
                           mode=0o755, user=SandboxUser.HANGAR)  # fmt: skip
        for folder in ("/tmp/spec", "/tmp/call"):  # the agent's own tool of the same name
            sandboxes.put_file(info.id, f"{folder}/{tool}", b"#!/bin/sh\necho from-agent\n",
                               mode=0o755)  # fmt: skip
        path = sandboxes.exec(info.id, ["sh", "-c", 'printf %s "$PATH"']).stdout.decode()
        assert path.split(":") == [HANGAR_BIN, "/tmp/spec", "/usr/bin", "/bin"]
        called = sandboxes.exec(info.id, ["sh", "-c", 'printf %s "$PATH"; echo; conformance-tool'],
                                env={"PATH": f"/tmp/call:/usr/bin:/bin:{HANGAR_BIN}"})  # fmt: skip
        assert called.stdout.decode().split("\n")[:2] == [
            f"{HANGAR_BIN}:/tmp/call:/usr/bin:/bin", "from-hangar"]

    # -- big streams ---------------------------------------------------------------------------

    def test_exec_passes_tens_of_megabytes_out_and_in_without_deadlock(
        self, sandboxes: Sandboxes
    ) -> None:
        info = make(sandboxes)
        out = Digest()
        both = "head -c 8000000 /dev/zero >&2 & head -c 40000000 /dev/zero; wait"
        result = sandboxes.exec(info.id, ["sh", "-c", both], stdout=out)  # type: ignore[arg-type]
        assert result.ok and out.count == 40_000_000 and result.stderr == b"\0" * 8_000_000
        assert out.hash.hexdigest() == hashlib.sha256(b"\0" * 40_000_000).hexdigest()
        collected = sandboxes.exec(info.id, ["head", "-c", "24000000", "/dev/urandom"])
        assert collected.ok and len(collected.stdout) == 24_000_000
        block = os.urandom(1 << 20)
        echoed = Digest()
        chunks = (block for _ in range(24))  # 24 MiB in, streamed, while it comes back out
        result = sandboxes.exec(info.id, ["cat"], stdin=chunks,
                                stdout=echoed)  # type: ignore[arg-type]
        assert result.ok and echoed.count == 24 << 20
        assert echoed.hash.hexdigest() == hashlib.sha256(block * 24).hexdigest()

    # -- optional capabilities -----------------------------------------------------------------

    def test_ro_paths_are_read_only_at_the_same_path_and_clonable_or_refused_at_create(
        self, sandboxes: Sandboxes, tmp_path: Path
    ) -> None:
        repo = tmp_path / "repos" / "demo"
        repo.mkdir(parents=True)
        (repo / "README").write_text("demo\n")
        git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
        for args in (["init", "-q"], ["add", "README"], ["commit", "-qm", "first"]):
            subprocess.run([*git, *args], check=True, capture_output=True)
        spec = SandboxSpec(ro_paths=[str(repo)])
        if not sandboxes.capabilities.ro_paths:
            self._refused(sandboxes, spec, "ro_paths")
            return
        info = make(sandboxes, spec)
        assert run(sandboxes, info.id, f"cat {repo}/README") == "demo\n"
        for user in SandboxUser:
            assert not sandboxes.exec(info.id, ["touch", f"{repo}/new"], user=user).ok
        clone = f"git clone -q {repo} {WORKSPACE}/demo && cat {WORKSPACE}/demo/README"
        assert run(sandboxes, info.id, clone) == "demo\n"
        assert not (repo / "new").exists()

    def test_host_ports_reach_the_hosts_loopback_port_and_no_other_or_are_refused_at_create(
        self, sandboxes: Sandboxes
    ) -> None:
        allowed, other = Listener(b"model stub"), Listener(b"hangar serve")
        try:
            spec = SandboxSpec(host_ports=[allowed.port])
            if not sandboxes.capabilities.host_ports:
                self._refused(sandboxes, spec, "host_ports")
                return
            info = make(sandboxes, spec)
            for host in ("127.0.0.1", "localhost"):
                assert connect(sandboxes, info.id, host, allowed.port) == "got model stub", host
            assert connect(sandboxes, info.id, "127.0.0.1", other.port).startswith("refused")
            without = make(sandboxes)
            assert connect(sandboxes, without.id, "127.0.0.1", allowed.port).startswith("refused")
        finally:
            allowed.close()
            other.close()

    def test_a_sandbox_made_from_an_image_keeps_the_contract_or_the_image_is_refused_at_create(
        self, sandboxes: Sandboxes, request: pytest.FixtureRequest
    ) -> None:
        if not sandboxes.capabilities.images:
            self._refused(sandboxes, SandboxSpec(image="hangar-conformance/agent:1"), "images")
            return
        image = str(request.getfixturevalue("sandboxes_image"))
        info = make(sandboxes, SandboxSpec(image=image))
        tools = "python3 --version && git --version && tar --version | head -1"
        assert sandboxes.exec(info.id, ["sh", "-c", tools]).ok

    def test_keep_pool_reports_the_replicas_it_was_told_or_is_refused_without_pools(
        self, sandboxes: Sandboxes, request: pytest.FixtureRequest
    ) -> None:
        pool = f"conformance-{uuid.uuid4().hex[:8]}"
        if not sandboxes.capabilities.pools:
            with pytest.raises(SandboxCapabilityMissing) as refused:
                sandboxes.keep_pool(pool, image=None, replicas=1)
            assert refused.value.data["capability"] == "pools"
            return
        image = str(request.getfixturevalue("sandboxes_image"))
        try:
            made = sandboxes.keep_pool(pool, image=image, replicas=1)
            assert (made.pool, made.replicas) == (pool, 1) and 0 <= made.ready <= 1
            again = sandboxes.keep_pool(pool, image=image, replicas=1)
            assert (again.pool, again.replicas) == (pool, 1)
        finally:
            down = sandboxes.keep_pool(pool, image=image, replicas=0)
        assert (down.replicas, down.ready) == (0, 0)

    @staticmethod
    def _refused(sandboxes: Sandboxes, spec: SandboxSpec, capability: str) -> None:
        label = uuid.uuid4().hex
        asked = replace(spec, labels={"conformance": label})
        with pytest.raises(SandboxCapabilityMissing) as refused:
            sandboxes.create(asked)
        assert refused.value.code == "sandbox_capability_missing"
        assert refused.value.data["capability"] == capability
        assert sandboxes.list({"conformance": label}) == []  # nothing was made
