"""A terminal's program: a process of :mod:`hangar.processes` on a pseudo terminal in the
session's sandbox, started, fed and followed for one websocket (:mod:`hangar.api.terminal`).

The pseudo terminal is made by hangar's run supervisor: TERM and the size go in the process's
spec, a resize is a command to the supervisor, and keystrokes, resizes and the end of input
travel in order through the one exec that follows the program (its output comes back the same
way). Nothing of the terminal goes on a command line inside the sandbox, and its output is
hangar's alone there; the process's folder is removed once the program has ended.
"""

from __future__ import annotations

import logging
import queue
import re
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from hangar import processes
from hangar.errors import HangarError, InvalidInput
from hangar.processes import Processes, Terminal

logger = logging.getLogger(__name__)

MAX_SIZE = processes.MAX_SIZE
"""The most rows, or columns, a terminal gets; larger sizes are taken as this."""
clamp = processes.clamp
_TERM = re.compile(r"[A-Za-z0-9._+-]{1,64}")
_NUMBER = re.compile(r"[0-9]+")


def size_of(rows: str | None, cols: str | None) -> tuple[int, int] | None:
    """The ``rows`` and ``cols`` query parameters as a size (None when either is missing or
    0: the size is left alone); InvalidInput (naming the field) for one that is not a plain
    number. Sizes above :data:`MAX_SIZE` are taken as it."""
    numbers = []
    for name, value in (("rows", rows), ("cols", cols)):
        if value and not _NUMBER.fullmatch(value):
            raise InvalidInput(f"{name} must be a number (of rows or columns), not "
                               f"{value[:20]!r}", field=name)  # fmt: skip
        numbers.append(int(value) if value and len(value) <= 6 else MAX_SIZE if value else 0)
    if 0 in numbers:
        return None
    return clamp(numbers[0]), clamp(numbers[1])


def terminal_of(term: str | None, size: tuple[int, int] | None) -> Terminal:
    """The pseudo terminal asked for: TERM (default xterm-256color) and the size (None: left
    alone); InvalidInput for a TERM that is not a plain terminal type."""
    term = term or "xterm-256color"
    if not _TERM.fullmatch(term):
        raise InvalidInput(f"term {term!r} is not a terminal type", field="term")
    rows, cols = size if size is not None else (None, None)
    return Terminal(rows=rows, cols=cols, term=term)


class Program:
    """One terminal's program. :meth:`run` starts and follows it (blocking, in a thread of its
    own); :meth:`type`, :meth:`resize`, :meth:`end_input` and :meth:`hang_up` may be called
    from any thread meanwhile, and reach it in the order called.

    After :meth:`end_input` the end-of-file key is typed at once and again every
    ``eof_every`` seconds until the program ends, and later keys are dropped. After
    :meth:`hang_up` (the client went) nothing more is sent; the in-sandbox follower types the
    end-of-file key, closes the input and, if the program has not ended ``hang_up_after``
    seconds later, kills it with everything it started (so it does too if this control-plane
    process dies)."""

    def __init__(self, sandbox: Processes, screen: Callable[[bytes], Any], *,
                 eof_key: bytes, eof_every: float, hang_up_after: float) -> None:  # fmt: skip
        self.sandbox, self.screen = sandbox, screen
        self.eof_key, self.eof_every, self.hang_up_after = eof_key, eof_every, hang_up_after
        self.id = f"terminal-{secrets.token_hex(8)}"
        self._commands: queue.Queue[bytes | None] = queue.Queue()
        self._input_open, self._sending = True, True
        self._lock = threading.Lock()
        self.finished = threading.Event()

    def run(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
            terminal: Terminal) -> int | None:  # fmt: skip
        """Start the program, follow it until it ends; its exit status (None if unknown).
        Raises what :meth:`Processes.start <hangar.processes.Processes.start>` raises."""
        try:
            self.sandbox.start(self.id, argv, cwd=cwd, env=env, terminal=terminal)
            end = self.sandbox.attach(self.id, self.screen, commands=self._stream(),
                                      hang_up_after=self.hang_up_after)  # fmt: skip
        finally:
            self.finished.set()
        try:
            self.sandbox.forget(self.id)
        except HangarError as exc:  # its folder stays until the sandbox goes
            logger.warning("could not remove terminal %s: %s", self.id, exc)
        return end.exit_code

    def type(self, keys: bytes) -> None:
        """Keystrokes, passed through unchanged (dropped once the input has ended)."""
        if self._input_open:
            self._send(processes.keys(keys))

    def resize(self, rows: int, cols: int) -> None:
        """The terminal's new size (clamped); the program gets SIGWINCH."""
        self._send(processes.resize(rows, cols))

    def end_input(self) -> None:
        """End the input: see the class's doc. Idempotent."""
        with self._lock:
            if not self._input_open:
                return
            self._input_open = False
        threading.Thread(target=self._type_eof, name="hangar-terminal-eof", daemon=True).start()

    def hang_up(self) -> None:
        """The client has gone: see the class's doc. Idempotent."""
        with self._lock:
            if not self._sending:
                return
            self._commands.put(processes.keys(self.eof_key))
            self._commands.put(None)
            self._sending = False

    def _send(self, command: bytes) -> None:
        with self._lock:
            if self._sending:
                self._commands.put(command)

    def _type_eof(self) -> None:
        while not self.finished.is_set():
            self._send(processes.keys(self.eof_key))
            self.finished.wait(self.eof_every)

    def _stream(self) -> Iterator[bytes]:
        while (command := self._commands.get()) is not None:
            yield command
