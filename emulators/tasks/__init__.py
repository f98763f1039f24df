"""The Cloud Tasks emulator (PyPI ``gcloud-tasks-emulator``), run from its own virtual environment.

It pins protobuf<5, which clashes with hangar's, so ``make tasks-emulator`` installs it into
``.venv-tasks``; :class:`TasksEmulator` runs that venv's interpreter on ``launch.py`` (next to
this file), which starts the emulator bound to 127.0.0.1 (the stock command binds every
interface) on a free port, and takes queue commands on stdin::

    with TasksEmulator(["projects/p/locations/l/queues/q"]) as tasks:
        tasks.host                    # "127.0.0.1:PORT", the gRPC endpoint
        tasks.environment()           # {"HANGAR_TASKS_ENDPOINT": "127.0.0.1:PORT"}
        tasks.create_queue("projects/p/locations/l/queues/other")
        tasks.delete_queue("projects/p/locations/l/queues/other")

What the emulator does (0.6.2, read from its source and tried here):

- It speaks gRPC only (no REST); ``CloudTasksClient`` reaches it over an insecure channel.
- Each queue is worked by one thread that, every 0.1 s, goes through the queue's tasks in order
  and POSTs each one whose ``schedule_time`` has passed, synchronously (``urlopen`` without a
  timeout), one at a time: a slow receiver holds up the whole queue.
- A delivery answered 4xx or 5xx, or one that cannot connect, goes to the back of the queue and
  is tried again on the next pass (about 0.1 s later): forever, with no backoff (the stock
  ``--max-retries`` is not used here). A 2xx ends the task.
- Queue settings (rate limits, retry config) are accepted and ignored; OIDC tokens are kept on
  the task and not sent. Get and delete of a task answer UNIMPLEMENTED.
- It accepts a task name it has seen before; with ``dedupe`` (the default) ``launch.py`` makes
  CreateTask answer ALREADY_EXISTS for it instead, as the real service does (there, for about
  an hour after the task ran or was deleted).
- A deleted queue's name cannot be used again (its worker thread is gone); the real service
  refuses it for 7 days as well.

Standard library only. The executable comes from ``executable=``, else ``HANGAR_TASKS_EMULATOR``,
else ``<repo>/.venv-tasks/bin/gcloud-tasks-emulator``; the interpreter is the one beside it.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Self

from emulators.processes import Emulator, EmulatorMissing

ENV_EXECUTABLE = "HANGAR_TASKS_EMULATOR"
_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_EXECUTABLE = _ROOT / ".venv-tasks" / "bin" / "gcloud-tasks-emulator"
_LAUNCH = Path(__file__).resolve().parent / "launch.py"
_STOP_WAIT = 5.0

__all__ = ["DEFAULT_EXECUTABLE", "ENV_EXECUTABLE", "TasksEmulator", "TasksEmulatorError",
           "TasksEmulatorMissing"]  # fmt: skip


class TasksEmulatorError(EmulatorMissing):
    """The emulator did not start, or answered a command with an error."""


class TasksEmulatorMissing(TasksEmulatorError):
    """gcloud-tasks-emulator is not installed where it was looked for."""


def find_executable(executable: str | os.PathLike[str] | None = None) -> Path:
    """The emulator's executable: ``executable``, else ``$HANGAR_TASKS_EMULATOR``, else the
    default; TasksEmulatorMissing (saying how to install it) when it is not there."""
    chosen = executable or os.environ.get(ENV_EXECUTABLE) or DEFAULT_EXECUTABLE
    path = Path(chosen)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise TasksEmulatorMissing(
            f"gcloud-tasks-emulator is not installed at {path} (set {ENV_EXECUTABLE} to its "
            "executable, or run `make tasks-emulator` to install it into .venv-tasks)"
        )
    return path


def _interpreter(executable: Path) -> Path:
    """The Python that runs ``executable``: the one beside it in its venv (a symlinked
    executable, as pipx makes, is followed to its venv), else the one its ``#!`` line names."""
    for folder in (executable.parent, executable.resolve().parent):
        candidate = folder / "python"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    with executable.open("rb") as handle:
        first = handle.readline().decode(errors="replace").strip()
    named = Path(first[2:].split()[0]) if first.startswith("#!") and first[2:].strip() else None
    if named is not None and named.name.startswith("python") and named.is_file():
        return named
    raise TasksEmulatorMissing(
        f"cannot find the Python that runs {executable} (run `make tasks-emulator`)"
    )


def _exited(process: subprocess.Popen[str], timeout: float) -> bool:
    """Whether ``process`` exited within ``timeout`` seconds, without reaping it."""
    pause = threading.Event()
    for _ in range(max(1, int(timeout / 0.02))):
        try:
            if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                return True
        except ChildProcessError:
            return True  # reaped already
        pause.wait(0.02)
    return False


class TasksEmulator(Emulator):
    """Runs the emulator while the context lasts (or between :meth:`start` and :meth:`stop`).
    ``queues`` (full names ``projects/P/locations/L/queues/Q``) exist once it is ready."""

    def __init__(
        self,
        queues: Iterable[str] = (),
        *,
        executable: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        dedupe: bool = True,
        startup_timeout: float = 30.0,
    ) -> None:
        self._queues = list(queues)
        self._executable = executable
        self._bind = host
        self._port = port
        self._dedupe = dedupe
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: IO[bytes] | None = None
        self._command_lock = threading.Lock()
        self.host = ""
        """``HOST:PORT`` of the gRPC endpoint, once started."""

    # ------------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Start it and wait until it serves; TasksEmulatorMissing when it is not installed,
        TasksEmulatorError when it does not come up (with its stderr)."""
        if self._process is not None:
            raise TasksEmulatorError("the emulator is already running")
        executable = find_executable(self._executable)
        python = _interpreter(executable)
        self._stderr = tempfile.TemporaryFile()
        arguments = [str(python), "-I", str(_LAUNCH), self._bind, str(self._port)]
        arguments += (["--dedupe"] if self._dedupe else []) + self._queues
        self._process = subprocess.Popen(
            arguments,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,  # its own process group, ended as a whole in stop()
        )
        threading.Thread(
            target=self._read, args=(self._process.stdout,), name="tasks-emulator-out",
            daemon=True,
        ).start()  # fmt: skip
        first = self._next_line(self._startup_timeout)
        if first is None or not first.startswith("ready "):
            reason = first[len("error "):] if first and first.startswith("error ") else first
            tail = self._stderr_tail()
            self.stop()
            raise TasksEmulatorError(
                f"the Cloud Tasks emulator did not start: {reason or 'no answer'}{tail}"
            )
        self.host = first[len("ready "):]
        return self

    def stop(self) -> None:
        """Stop it (closing its stdin first, then signalling its process group). Idempotent."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()
        except OSError:
            pass  # it is gone already
        if not _exited(process, _STOP_WAIT):
            self._signal(process, signal.SIGTERM)
            if not _exited(process, _STOP_WAIT):
                self._signal(process, signal.SIGKILL)
        # Its group id stays reserved until the leader is reaped, so this reaches only what it
        # left behind (it starts nothing itself), never a stranger.
        self._signal(process, signal.SIGKILL)
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


    # ------------------------------------------------------------------------ use

    def environment(self) -> dict[str, str]:
        """The variables that point hangar at this emulator."""
        return {"HANGAR_TASKS_ENDPOINT": self.host}

    def create_queue(self, name: str) -> None:
        """Create the queue ``projects/P/locations/L/queues/Q`` (nothing happens if it exists)."""
        self._command(f"create-queue {name}")

    def delete_queue(self, name: str) -> None:
        """Delete the queue and its tasks (pending deliveries stop); the name is not reusable."""
        self._command(f"delete-queue {name}")

    # ------------------------------------------------------------------------ plumbing

    def _command(self, line: str) -> None:
        if "\n" in line:
            raise ValueError("a queue name cannot contain a newline")
        with self._command_lock:
            process = self._process
            if process is None or process.stdin is None:
                raise TasksEmulatorError("the emulator is not running")
            try:
                process.stdin.write(line + "\n")
                process.stdin.flush()
            except OSError as exc:
                raise TasksEmulatorError(f"the emulator is gone: {exc}") from None
            reply = self._next_line(_STOP_WAIT)
        if reply != "ok":
            raise TasksEmulatorError(f"{line}: {reply or 'no answer'}{self._stderr_tail()}")

    def _read(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                self._lines.put(line.rstrip("\n"))
        except (OSError, ValueError):
            pass  # closed by stop()
        self._lines.put(None)

    def _next_line(self, timeout: float) -> str | None:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace").strip()[-2000:]
        return f"\n{tail}" if tail else ""

    @staticmethod
    def _signal(process: subprocess.Popen[str], sig: signal.Signals) -> None:
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group is empty
