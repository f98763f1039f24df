"""The conformance suite of the process layer (:mod:`hangar.processes`) over a sandboxes backend.

Subclass :class:`ProcessesConformance` in a test module and give it the two fixtures of
:class:`~hangar.testing.sandboxes.SandboxesConformance`: ``sandboxes``, a fresh backend that
destroys what it made at teardown, and ``sandboxes_settings``, settings whose ``sandboxes`` URL
opens that same backend (a new Python process opens it with them, standing for a restarted
control plane). The suite uses the port and
the layer only, so it runs unchanged against any backend.
"""

from __future__ import annotations

import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from hangar.config import Settings
from hangar.errors import InvalidInput, SandboxError
from hangar.processes import Processes, Terminal, close_input, keys, kill, resize, send_signal
from hangar.sandboxes import Sandboxes, SandboxUser
from hangar.testing.sandboxes import make

WAIT = 60.0
"""Seconds any one wait here may take at most (a bound, never a measure)."""

_CHILD = """
import json, sys, threading
from hangar.config import Settings
from hangar.processes import Processes
from hangar.sandboxes import open_sandboxes

settings = Settings.build(**json.loads(sys.stdin.readline()))
sandboxes = open_sandboxes(settings.sandboxes, settings)
processes = Processes(sandboxes, sys.argv[1])
what, process_id = sys.argv[2], sys.argv[3]
if what == "start":
    processes.start(process_id, sys.argv[4:], cwd="/tmp", env={"WORD": "from-the-first"})
else:
    def show(data):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    if what == "hang":  # commands that never end: it follows until it is killed
        never = iter(threading.Event().wait, True)
        processes.attach(process_id, show, commands=never, hang_up_after=float(sys.argv[4]))
    else:
        end = processes.attach(process_id, show, cursor=int(sys.argv[4]), timeout=60)
        print("\\nexit=%s cursor=%d" % (end.exit_code, end.cursor))
"""


class _Child:
    """The layer used from a new Python process (a restarted control plane)."""

    def __init__(self, settings: Settings, sandbox_id: str, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, sandbox_id, *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)  # fmt: skip
        assert self.proc.stdin is not None
        self.proc.stdin.write(settings.model_dump_json().encode() + b"\n")
        self.proc.stdin.close()
        self.seen = b""

    def until(self, pattern: bytes) -> re.Match[bytes]:
        """Its output once ``pattern`` shows in it (a bounded wait)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + WAIT
        while not (found := re.search(pattern, self.seen)):
            left = deadline - time.monotonic()
            assert left > 0 and self.proc.poll() is None, (self.seen, self.errors())
            if select.select([self.proc.stdout], [], [], min(left, 1.0))[0]:
                self.seen += os.read(self.proc.stdout.fileno(), 65536)
        return found

    def errors(self) -> bytes:
        if self.proc.poll() is None or self.proc.stderr is None:
            return b""
        return self.proc.stderr.read()

    def end(self) -> bytes:
        """Everything it printed, once it has ended successfully."""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        out = self.proc.stdout.read()  # to its end: the child's attach has a timeout of its own
        assert self.proc.wait(timeout=WAIT) == 0, self.proc.stderr.read()
        return self.seen + out


class _Screen:
    """Output of an attach as it comes, for a test to wait on."""

    def __init__(self) -> None:
        self.seen = b""
        self.changed = threading.Condition()

    def write(self, data: bytes) -> None:
        with self.changed:
            self.seen += data
            self.changed.notify_all()

    def until(self, pattern: bytes) -> re.Match[bytes]:
        with self.changed:
            found = self.changed.wait_for(lambda: re.search(pattern, self.seen), WAIT)
        assert found, self.seen
        return found


def _stream(commands: queue.Queue[bytes | None]) -> Iterator[bytes]:
    while (command := commands.get()) is not None:
        yield command


def until_output(processes: Processes, process_id: str, pattern: bytes) -> bytes:
    """The process's output from the start once ``pattern`` shows in it (a bounded wait)."""
    deadline = time.monotonic() + WAIT
    while not re.search(pattern, seen := processes.read(process_id).data):
        assert time.monotonic() < deadline, seen
        processes.wait(process_id, 0.2)  # a bounded wait inside the sandbox, not a sleep
    return seen


class ProcessesConformance:
    """The process layer's contract (see :mod:`hangar.processes`) on any backend."""

    def test_a_new_python_process_attaches_by_id_and_follows_the_output_to_the_end(
        self, sandboxes: Sandboxes, sandboxes_settings: Settings
    ) -> None:
        sandbox = make(sandboxes).id
        processes = Processes(sandboxes, sandbox)
        script = "echo one; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo two; exit 5"
        processes.start("p1", ["sh", "-c", script], cwd="/tmp", env={})
        follower = _Child(sandboxes_settings, sandbox, "attach", "p1", "0")
        follower.until(rb"one\n")
        assert processes.exit_status("p1") is None
        sandboxes.exec(sandbox, ["touch", "/tmp/go"])
        assert follower.end() == b"one\ntwo\n\nexit=5 cursor=8\n"

    def test_output_is_read_by_cursor_across_a_restart_of_the_control_plane(
        self, sandboxes: Sandboxes, sandboxes_settings: Settings
    ) -> None:
        sandbox = make(sandboxes).id
        script = 'printf "%s;" "$WORD"; while [ ! -e /tmp/go ]; do sleep 0.05; done; printf tail'
        _Child(sandboxes_settings, sandbox, "start", "p2", "sh", "-c", script).end()  # gone
        processes = Processes(sandboxes, sandbox)
        first = until_output(processes, "p2", rb";")
        assert first == b"from-the-first;"
        assert processes.read("p2", cursor=5, limit=4).data == b"the-"
        sandboxes.exec(sandbox, ["touch", "/tmp/go"])
        later = _Child(sandboxes_settings, sandbox, "attach", "p2", str(len(first))).end()
        assert later == b"tail\nexit=0 cursor=19\n"

    def test_standard_input_stays_open_for_writes_until_it_is_closed(
        self, sandboxes: Sandboxes
    ) -> None:
        processes = Processes(sandboxes, make(sandboxes).id)
        script = "read a; echo got-$a; read b; echo got-$b; cat; echo end"
        processes.start("p3", ["sh", "-c", script], cwd="/tmp", env={}, stdin=b"first\n",
                        keep_stdin=True)  # fmt: skip
        until_output(processes, "p3", rb"got-first\n")
        processes.send("p3", keys(b"second\n"))
        until_output(processes, "p3", rb"got-second\n")
        assert processes.exit_status("p3") is None  # cat still waits for the rest
        processes.send("p3", keys(b"x" * 5000), keys(b"!"), close_input())
        assert processes.wait("p3", WAIT) == 0
        assert processes.read("p3").data == b"got-first\ngot-second\n" + b"x" * 5000 + b"!end\n"
        with pytest.raises(SandboxError, match="takes no commands"):
            processes.send("p3", keys(b"late"))

    def test_a_terminal_has_its_size_and_a_resize_reaches_the_program_in_order_with_keys(
        self, sandboxes: Sandboxes
    ) -> None:
        processes = Processes(sandboxes, make(sandboxes).id)
        script = ('[ -t 0 ] && echo "tty $TERM $(stty size)"; '
                  'while read line; do echo "read $line $(stty size)"; done')  # fmt: skip
        processes.start("p4", ["bash", "-c", script], cwd="/tmp", env={},
                        terminal=Terminal(30, 90, "vt100"))  # fmt: skip
        commands: queue.Queue[bytes | None] = queue.Queue()
        screen = _Screen()
        follower = threading.Thread(target=processes.attach, args=("p4", screen.write),
                                    kwargs={"commands": _stream(commands)})  # fmt: skip
        follower.start()
        screen.until(rb"tty vt100 30 90\r\n")
        for command in (resize(41, 123), keys(b"after\n")):
            commands.put(command)
        screen.until(rb"read after 41 123\r\n")
        commands.put(resize(5000, 7))
        commands.put(keys(b"big\n"))
        screen.until(rb"read big 1000 7\r\n")
        commands.put(keys(b"\x04"))  # the terminal's end-of-file key: read fails, bash ends
        follower.join(WAIT)
        assert not follower.is_alive()
        assert processes.wait("p4", WAIT) == 0
        commands.put(None)

    def test_a_follower_that_hangs_up_stops_the_process_when_its_control_plane_dies(
        self, sandboxes: Sandboxes, sandboxes_settings: Settings
    ) -> None:
        sandbox = make(sandboxes).id
        processes = Processes(sandboxes, sandbox)
        processes.start("p9", ["sh", "-c", "echo ready; exec sleep 300"], cwd="/tmp", env={},
                        terminal=Terminal(24, 80))  # fmt: skip
        follower = _Child(sandboxes_settings, sandbox, "hang", "p9", "0.5")
        follower.until(rb"ready")
        follower.proc.kill()  # a control plane that dies, not one that says goodbye
        follower.proc.wait(WAIT)
        assert processes.wait("p9", WAIT) == 130

    def test_a_signal_reaches_the_programs_process_group(self, sandboxes: Sandboxes) -> None:
        processes = Processes(sandboxes, make(sandboxes).id)
        script = 'trap "echo got-usr1; exit 9" USR1; echo ready; while :; do sleep 0.05; done'
        processes.start("p5", ["sh", "-c", script], cwd="/tmp", env={})
        until_output(processes, "p5", rb"ready\n")
        processes.send("p5", send_signal(signal.SIGUSR1))
        assert processes.wait("p5", WAIT) == 9
        assert processes.read("p5").data == b"ready\ngot-usr1\n"

    def test_a_wait_returns_unfinished_once_its_timeout_passes_and_kill_stops_the_process(
        self, sandboxes: Sandboxes
    ) -> None:
        processes = Processes(sandboxes, make(sandboxes).id)
        processes.start("p6", ["sleep", "300"], cwd="/tmp", env={})
        assert processes.wait("p6", 0.3) is None
        end = processes.attach("p6", lambda data: None, timeout=0.3)
        assert (end.exit_code, end.cursor) == (None, 0)
        processes.send("p6", kill())
        assert processes.wait("p6", WAIT) == 130

    @pytest.mark.parametrize("terminal", [None, Terminal(24, 80)], ids=["pipe", "terminal"])
    def test_a_process_that_forks_a_child_and_exits_has_ended(
        self, sandboxes: Sandboxes, terminal: Terminal | None
    ) -> None:
        sandbox = make(sandboxes).id
        processes = Processes(sandboxes, sandbox)
        script = "trap '' HUP; sleep 300 & echo $! > /tmp/child; echo parent-done; exit 4"
        processes.start("p7", ["sh", "-c", script], cwd="/tmp", env={}, terminal=terminal)
        assert processes.wait("p7", WAIT) == 4
        assert b"parent-done" in processes.read("p7").data
        left = sandboxes.exec(sandbox, ["sh", "-c", "kill -0 $(cat /tmp/child)"])
        assert left.ok  # the child it left (deaf to the terminal's hang-up) goes on

    def test_the_agent_can_neither_send_commands_nor_forge_a_status(
        self, sandboxes: Sandboxes
    ) -> None:
        sandbox = make(sandboxes).id
        processes = Processes(sandboxes, sandbox)
        processes.start("p8", ["sleep", "300"], cwd="/tmp", env={}, keep_stdin=True)
        for forge in ('printf "k\\0\\0" > "$1/input"', 'echo 0 > "$1/exit"',
                      'read supervisor child < "$1/pid"; kill -TERM "$supervisor"'):  # fmt: skip
            tried = sandboxes.exec(sandbox, ["sh", "-c", forge, "sh", "/hangar/runs/p8"])
            assert not tried.ok, forge
        assert processes.wait("p8", 0.2) is None
        as_hangar = sandboxes.exec(sandbox, ["test", "-p", "/hangar/runs/p8/input"],
                                   user=SandboxUser.HANGAR)  # fmt: skip
        assert as_hangar.ok
        processes.send("p8", kill())
        assert processes.wait("p8", WAIT) == 130

    def test_a_read_with_a_limit_says_the_status_only_with_the_last_byte_and_forget_removes_it(
        self, sandboxes: Sandboxes
    ) -> None:
        processes = Processes(sandboxes, make(sandboxes).id)
        processes.start("p10", ["sh", "-c", "printf 0123456789; exit 3"], cwd="/tmp", env={})
        assert processes.wait("p10", WAIT) == 3
        head = processes.read("p10", limit=4)
        assert (head.data, head.cursor, head.exit_code) == (b"0123", 4, None)
        tail = processes.read("p10", cursor=head.cursor)
        assert (tail.data, tail.cursor, tail.exit_code) == (b"456789", 10, 3)
        processes.start("p11", ["sleep", "300"], cwd="/tmp", env={})
        with pytest.raises(SandboxError, match="has not ended"):
            processes.forget("p11")
        processes.forget("p10")
        with pytest.raises(SandboxError, match="no process p10"):
            processes.read("p10")

    def test_an_unknown_process_is_an_error_and_a_bad_id_is_refused(
        self, sandboxes: Sandboxes
    ) -> None:
        processes = Processes(sandboxes, make(sandboxes).id)
        with pytest.raises(SandboxError, match="no process nope"):
            processes.read("nope")
        with pytest.raises(InvalidInput):
            processes.start("../x", ["true"], cwd="/tmp", env={})
        processes.start("once", ["true"], cwd="/tmp", env={})
        with pytest.raises(SandboxError, match="exists already"):
            processes.start("once", ["true"], cwd="/tmp", env={})
