"""The conformance suite every :class:`hangar.sandboxes.Sandboxes` backend runs.

Subclass :class:`SandboxesConformance` in a test module and give it a function-scoped fixture
named ``sandboxes`` that yields a fresh backend instance and destroys every sandbox it made at
teardown. The suite only uses the port, so it runs unchanged against any backend; each test
labels its sandboxes with a unique ``conformance`` value, so a shared backend is fine.
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
import time
import uuid

import pytest

from hangar.errors import CheckpointError, DestroyVetoed, ExecTimeout, SandboxError
from hangar.errors import SandboxNotFound
from hangar.sandboxes import HOME, WORKSPACE, SandboxInfo, Sandboxes, SandboxSpec


GONE = (
    "for p in $(cat /tmp/parent) $(cat /tmp/child); do i=0; "
    "while kill -0 $p 2>/dev/null; do i=$((i+1)); [ $i -lt 200 ] || exit 1; "
    "sleep 0.05; done; done"
)
"""A script that succeeds once the processes named in /tmp/parent and /tmp/child are gone (a
bounded wait inside the sandbox)."""


def make(sandboxes: Sandboxes, **labels: str) -> SandboxInfo:
    """Create a sandbox labelled with ``labels`` plus a unique ``conformance`` label."""
    return sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex, **labels}))


def run(sandboxes: Sandboxes, sandbox_id: str, script: str) -> str:
    """Run a shell script that must succeed; return its stdout as text."""
    result = sandboxes.exec(sandbox_id, ["sh", "-c", script])
    assert result.exit_code == 0, result
    return result.stdout.decode()


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
        spec = SandboxSpec(
            labels={"conformance": uuid.uuid4().hex}, env={"ONE": "spec", "TWO": "spec"}
        )
        info = sandboxes.create(spec)
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

    def test_destroy_runs_hooks_in_order_while_the_sandbox_still_runs(
        self, sandboxes: Sandboxes
    ) -> None:
        info = make(sandboxes)
        sandboxes.put_file(info.id, f"{HOME}/last-words", b"goodbye")
        seen: list[str] = []

        def first(hooked: SandboxInfo) -> None:
            seen.append(f"first {hooked.id}")

        def second(hooked: SandboxInfo) -> None:
            out = io.BytesIO()
            sandboxes.get_file(hooked.id, f"{HOME}/last-words", out)
            seen.append(f"second {out.getvalue().decode()}")

        sandboxes.add_pre_destroy_hook(first)
        sandboxes.add_pre_destroy_hook(second)
        sandboxes.destroy(info.id)
        assert seen == [f"first {info.id}", "second goodbye"]

    def test_destroy_with_hooks_false_skips_them(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        seen: list[str] = []
        sandboxes.add_pre_destroy_hook(lambda hooked: seen.append(hooked.id))
        sandboxes.destroy(info.id, hooks=False)
        assert seen == []
        with pytest.raises(SandboxNotFound):
            sandboxes.get(info.id)

    def test_a_failing_hook_vetoes_the_destroy_unless_forced(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        seen: list[str] = []
        failing = [True]

        def checkpoint(hooked: SandboxInfo) -> None:
            if failing[0]:
                raise CheckpointError("the checkpoint failed")

        sandboxes.add_pre_destroy_hook(checkpoint)
        sandboxes.add_pre_destroy_hook(lambda hooked: seen.append(hooked.id))
        with pytest.raises(DestroyVetoed, match="the checkpoint failed"):
            sandboxes.destroy(info.id)
        assert sandboxes.get(info.id) == info and run(sandboxes, info.id, "echo alive") == "alive\n"
        assert seen == []
        sandboxes.destroy(info.id, force=True)
        assert seen == [info.id]
        with pytest.raises(SandboxNotFound):
            sandboxes.get(info.id)
        other = make(sandboxes)
        failing[0] = False
        sandboxes.destroy(other.id)  # once the cause is gone, an ordinary destroy goes ahead
        with pytest.raises(SandboxNotFound):
            sandboxes.get(other.id)

    def test_destroy_is_idempotent(self, sandboxes: Sandboxes) -> None:
        info = make(sandboxes)
        sandboxes.destroy(info.id)
        sandboxes.destroy(info.id)
        sandboxes.destroy(info.id, hooks=False)

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
