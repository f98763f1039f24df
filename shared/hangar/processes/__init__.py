"""Processes in a sandbox, above the sandbox port and written once for every backend: start one
detached, attach to it by id from any later process, read its output by byte cursor, write its
standard input, resize its terminal, signal it, wait for it with a timeout, read its status,
and remove it once it has ended.

A process is a run of hangar's in-sandbox supervisor (:mod:`hangar.agent.run`) in
``/hangar/runs/<id>/``: it outlives the control-plane process that started it, and it runs as
the agent while everything here runs as hangar (the agent can neither forge its status nor send
it commands). Nothing here polls the port: each call is one exec of an in-sandbox script
(:mod:`hangar.agent.run` to start, :mod:`hangar.agent.attach` for the rest), and waiting or
following is one exec that returns when the process ends or the timeout passes; the looking
happens inside the sandbox. The environment and the initial input travel on the exec's standard
input, never on a command line.

A turn's run (:mod:`hangar.processes.runs`) is one of these processes: same folder, same ids.
Commands for the process (:func:`keys`, :func:`close_input`, :func:`resize`, :func:`send_signal`,
:func:`kill`) are bytes to pass to :meth:`Processes.send` or, in order with keystrokes, in the
``commands`` stream of :meth:`Processes.attach`. Every method raises
:class:`~hangar.errors.SandboxError` (``process_id`` in its data) when the sandbox cannot run it or
there is no such process, and what the port's ``exec`` raises.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

from hangar import agent
from hangar.agent.attach import frame
from hangar.errors import InvalidInput, SandboxError
from hangar.sandboxes import HANGAR_DIR, ExecResult, Sandboxes, SandboxUser

RUNS_DIR = f"{HANGAR_DIR}/runs"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TERM = re.compile(r"^[A-Za-z0-9._+-]{1,64}$")
MAX_SIZE = 1000
"""The most rows, or columns, a terminal gets; larger sizes are taken as this."""
NO_RUN, NO_COMMANDS = 3, 4  # the attach script's statuses
_GUARD = 60.0  # seconds an exec may take beyond the wait it was asked for
HANGAR = SandboxUser.HANGAR


def run_dir(process_id: str) -> str:
    """The process's folder in the sandbox; InvalidInput for an id that is not a plain name."""
    if not _ID.match(process_id):
        raise InvalidInput(f"invalid run id {process_id!r}", run_id=process_id)
    return f"{RUNS_DIR}/{process_id}"


@dataclass(frozen=True)
class Terminal:
    """A pseudo terminal for a process: TERM and its first size (None: left to the kernel)."""

    rows: int | None = None
    cols: int | None = None
    term: str = "xterm-256color"


@dataclass(frozen=True)
class Quiet:
    """What a follow asked for it (``on_quiet``) says now and then: how many whole seconds the
    process has been quiet (no output on either stream, by the sandbox's clock), and the stamp
    (size and time) of the file it was asked to watch (None: none, or missing)."""

    idle: float
    watched: str | None = None


@dataclass(frozen=True)
class Output:
    """Output bytes from the cursor asked for, the cursor after them, and the exit status once
    the process has ended (then every byte before it was given)."""

    data: bytes
    cursor: int
    exit_code: int | None
    stderr: bytes | None = None
    """The end of its standard error, once it has ended, when asked for (``on_quiet``)."""

    @property
    def finished(self) -> bool:
        return self.exit_code is not None


def keys(data: bytes) -> bytes:
    """Command: ``data`` on the process's standard input (or typed on its terminal)."""
    return frame(b"d", data)


def close_input() -> bytes:
    """Command: the input ends (a pipe's reader sees its end; a terminal takes no more)."""
    return frame(b"c")


def resize(rows: int, cols: int) -> bytes:
    """Command: the terminal's new size, each within 1 to :data:`MAX_SIZE` (SIGWINCH follows)."""
    return frame(b"r", b"%d %d" % (clamp(rows), clamp(cols)))


def send_signal(signum: int) -> bytes:
    """Command: signal ``signum`` to the process's group."""
    return frame(b"s", b"%d" % signum)


def kill() -> bytes:
    """Command: stop the process and everything it started (exit status 130)."""
    return frame(b"k")


def clamp(n: int) -> int:
    """A size within 1 to :data:`MAX_SIZE`."""
    return max(1, min(n, MAX_SIZE))


class _Frames:
    """The attach script's standard output as a file: ``o`` payloads to ``out`` as they come,
    ``q`` quiet times to ``on_quiet``, the end of standard error (``e``) and the final ``x``
    kept."""

    def __init__(self, out: Callable[[bytes], Any],
                 on_quiet: Callable[[Quiet], Any] | None = None) -> None:  # fmt: skip
        self.out, self.buffer, self.end = out, bytearray(), cast(dict[str, Any] | None, None)
        self.on_quiet = on_quiet
        self.stderr: bytes | None = None
        self.given = 0

    def write(self, data: bytes) -> int:
        self.buffer += data
        while len(self.buffer) >= 5:
            kind, size = self.buffer[:1], struct.unpack(">I", self.buffer[1:5])[0]
            if len(self.buffer) < 5 + size:
                break
            payload = bytes(self.buffer[5 : 5 + size])
            del self.buffer[: 5 + size]
            if kind == b"o":
                self.given += len(payload)
                self.out(payload)
            elif kind == b"q" and self.on_quiet is not None:
                said = json.loads(payload)
                idle, watched = said.get("idle"), said.get("watched")
                if isinstance(idle, int):
                    self.on_quiet(Quiet(float(idle),
                                        watched if isinstance(watched, str) else None))
            elif kind == b"e":
                self.stderr = payload
            elif kind == b"x":
                self.end = json.loads(payload)
        return len(data)

    def flush(self) -> None:
        pass


class Processes:
    """The processes of one sandbox. Holds no state but the sandbox: any later process, or
    another instance, reaches the same processes by id. Thread-safe."""

    def __init__(self, sandboxes: Sandboxes, sandbox_id: str) -> None:
        self.sandboxes, self.sandbox_id = sandboxes, sandbox_id

    def start(
        self, process_id: str, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
        stdin: bytes | None = None, keep_stdin: bool = False, terminal: Terminal | None = None,
        control: bool = False, trees: Mapping[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Start ``argv`` detached in ``cwd``, as the agent, with ``env`` in its environment
        (never on a command line) and ``stdin`` as its first input. Without ``keep_stdin`` or
        a ``terminal`` its input ends after ``stdin`` (/dev/null without); with either it stays
        open for :func:`keys` until :func:`close_input`. With ``terminal`` it runs on a pseudo
        terminal, its output (standard error included) the output read here. Returns once it
        runs; one exec. With ``control`` it runs as hangar's user instead (with the agent's
        environment) and gets a control folder, ``ctl/`` (a live turn's driver,
        :mod:`hangar.agent.driver`, which starts the agent's CLI as the agent). With
        ``trees`` (``{"repo": DIR, "slow_ms": MS}``, a one-shot turn) the run's supervisor
        records the repo's working tree's git tree as it starts and ends, and the steps'
        patches (:mod:`hangar.agent.turntrees`). InvalidInput for a bad id, variable name or
        TERM; SandboxError if it cannot start or the id was
        used already."""
        folder = run_dir(process_id)
        bad = [k for k in env if not _ENV_NAME.match(k)]
        if bad:
            raise InvalidInput(f"invalid environment variable names: {bad}", names=bad)
        spec: dict[str, Any] = {"argv": list(argv), "cwd": cwd}
        if keep_stdin:
            spec["stdin"] = "pipe"
        if control:
            spec.update({"as": "hangar", "control": True})
        if trees is not None:
            spec["trees"] = dict(trees)
        if terminal is not None:
            if not _TERM.match(terminal.term):
                raise InvalidInput(f"term {terminal.term!r} is not a terminal type", field="term")
            size = {} if not (terminal.rows and terminal.cols) else {
                "rows": clamp(terminal.rows), "cols": clamp(terminal.cols)}  # fmt: skip
            spec["tty"] = {"term": terminal.term, **size}
        given = None if stdin is None else base64.b64encode(stdin).decode()
        request = {"spec": spec, "env": dict(env), "stdin": given}
        started = agent.run_script(self.sandboxes, self.sandbox_id, "run", folder, "-",
                                   stdin=json.dumps(request).encode(), user=HANGAR)  # fmt: skip
        if not started.ok:
            raise self._error(process_id, "could not start", started)

    def attach(
        self, process_id: str, out: Callable[[bytes], Any], *, cursor: int = 0,
        commands: Iterable[bytes] | None = None, timeout: float | None = None,
        hang_up_after: float | None = None, cancel: threading.Event | None = None,
        on_quiet: Callable[[Quiet], Any] | None = None, watch: str | None = None,
    ) -> Output:  # fmt: skip
        """Follow the process in one exec: ``out(bytes)`` for its output from ``cursor`` as it
        comes (none with a cursor of -1), while the ``commands`` (bytes of :func:`keys`,
        :func:`resize`, ...) reach it in order. Returns when it has ended, ``timeout`` seconds
        have passed or ``cancel`` is set (the process goes on), with the cursor after the last
        byte given and the exit status if it ended (``data`` empty). With ``hang_up_after``,
        once ``commands`` ends (or this control-plane process dies) the input is closed, and
        the process killed if it has not ended that many seconds later. With ``on_quiet``, it
        gets a :class:`Quiet` first, every few seconds without output and whenever the stamp
        of the file at ``watch`` changes, and the result carries the end of its standard error
        once it has ended."""
        mode = ("0" if commands is None else "1" if hang_up_after is None
                else f"hang-up={hang_up_after:g}")  # fmt: skip
        argv = ["stream", str(cursor), "-1" if timeout is None else f"{timeout:g}", "0", mode]
        if on_quiet is not None:
            argv += ["status", *([watch] if watch else [])]
        guard = None if timeout is None else timeout + _GUARD
        return self._stream(process_id, argv, out, commands, guard, cancel, on_quiet)

    def read(self, process_id: str, cursor: int = 0, limit: int = 1 << 20) -> Output:
        """Up to ``limit`` output bytes from ``cursor`` there now, without waiting; one exec."""
        chunks: list[bytes] = []
        end = self._stream(process_id, ["stream", str(cursor), "0", str(limit), "0"],
                           chunks.append, None, _GUARD, None)  # fmt: skip
        return Output(b"".join(chunks), end.cursor, end.exit_code)

    def wait(self, process_id: str, timeout: float) -> int | None:
        """The exit status once the process has ended, or None if it has not within
        ``timeout`` seconds; one exec, however long."""
        end = self._stream(process_id, ["stream", "-1", f"{timeout:g}", "0", "0"], _drop,
                           None, timeout + _GUARD, None)  # fmt: skip
        return end.exit_code

    def exit_status(self, process_id: str) -> int | None:
        """The exit status, or None while the process runs."""
        return self.wait(process_id, 0)

    def send(self, process_id: str, *commands: bytes) -> None:
        """Send commands (:func:`keys`, :func:`close_input`, :func:`resize`,
        :func:`send_signal`, :func:`kill`) in order; one exec. SandboxError if the process
        takes none (it has ended)."""
        result = agent.run_script(self.sandboxes, self.sandbox_id, "attach", run_dir(process_id),
                                  "send", stdin=b"".join(commands), user=HANGAR,
                                  timeout=_GUARD)  # fmt: skip
        if result.exit_code == NO_COMMANDS:
            raise SandboxError(f"process {process_id} takes no commands (it has ended)",
                               process_id=process_id)  # fmt: skip
        if not result.ok:
            raise self._error(process_id, "could not send to", result)

    def forget(self, process_id: str) -> None:
        """Remove the folder of a process that has ended (its output with it); one exec.
        SandboxError while it runs."""
        result = agent.run_script(self.sandboxes, self.sandbox_id, "attach", run_dir(process_id),
                                  "forget", user=HANGAR, timeout=_GUARD)  # fmt: skip
        if not result.ok:
            raise self._error(process_id, "could not forget", result)

    def _stream(
        self, process_id: str, args: list[str], out: Callable[[bytes], Any],
        commands: Iterable[bytes] | None, timeout: float | None, cancel: threading.Event | None,
        on_quiet: Callable[[Quiet], Any] | None = None,
    ) -> Output:  # fmt: skip
        frames = _Frames(out, on_quiet)
        result = agent.run_script(
            self.sandboxes, self.sandbox_id, "attach", run_dir(process_id), *args,
            stdin=commands, stdout=cast(BinaryIO, frames), user=HANGAR, timeout=timeout,
            cancel=cancel,
        )  # fmt: skip
        if frames.end is None:
            if cancel is not None and cancel.is_set():
                start = int(args[1])
                return Output(b"", start + frames.given if start >= 0 else -1, None)
            raise self._error(process_id, "could not follow", result)
        code = frames.end.get("exit")
        return Output(b"", int(frames.end.get("cursor", 0)),
                      code if isinstance(code, int) else None, frames.stderr)  # fmt: skip

    def _error(self, process_id: str, doing: str, result: ExecResult) -> SandboxError:
        if result.exit_code == NO_RUN:
            return SandboxError(f"no process {process_id} in sandbox {self.sandbox_id}",
                                process_id=process_id)  # fmt: skip
        said = result.stderr.decode(errors="replace").strip()[-300:]
        return SandboxError(f"{doing} process {process_id}: {said or f'exit {result.exit_code}'}",
                            process_id=process_id)  # fmt: skip


def _drop(data: bytes) -> None:
    pass
