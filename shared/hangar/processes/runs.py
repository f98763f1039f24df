"""Detached runs: a turn's harness process (or an environment's setup) runs in the sandbox under
hangar's supervisor (:mod:`hangar.agent.run`), not in a request.

A run lives in ``/hangar/runs/<run id>/`` inside the sandbox: hangar's folder, out of the
agent's HOME, which the agent can read where it must and write nowhere (so it can neither
replace the run's files nor forge its exit status). Never in the repo or a conversation folder,
so never in a checkpoint::

    spec.json   the command and its working folder
    env.json    the run's variables and secrets (mode 0600), removed before the command starts
    stdin       what the command reads on its standard input (mode 0600), removed likewise
    log         the command's standard output (its JSON events): the run log
    stderr      its standard error
    exit        its exit status, written (atomically) only when it has ended
    pid         the supervisor's pid and the command's

:func:`start_run` returns as soon as the command runs, as the agent. :func:`read_run` reads the
log from a byte cursor, so a caller that went away (a restarted control plane) catches up from
where it stopped; :func:`follow_run` follows it in one exec as it grows, until it ends (what
:mod:`hangar.processes.following` shares between every waiter of a process). The environment
and the input (a turn's message) reach that command only, never a command line. A run is a
process of :mod:`hangar.processes`, which starts and follows it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hangar import processes
from hangar.errors import SandboxError
from hangar.processes import Processes, Quiet
from hangar.sandboxes import Sandboxes, SandboxUser

INTERRUPTED_EXIT = 130
HANGAR = SandboxUser.HANGAR


@dataclass(frozen=True)
class RunStatus:
    """Log bytes from the cursor asked for, the cursor after them, and the exit status once the
    run has ended (then the log is complete: the status is written after the log is closed).
    ``idle_seconds``: how long neither its log nor its standard error has changed, by the
    sandbox's clock, in whole seconds (None: not known)."""

    data: bytes
    cursor: int
    exit_code: int | None
    idle_seconds: float | None = None
    stderr: bytes | None = None
    """Once it has ended and was followed (:func:`follow_run`): the end of its standard
    error (None: not read)."""
    watched: str | None = None
    """When followed with ``watch``: the watched file's stamp (None: missing)."""

    @property
    def finished(self) -> bool:
        return self.exit_code is not None


def run_dir(run_id: str) -> str:
    """The run's folder in the sandbox; InvalidInput for an id that is not a plain name."""
    return processes.run_dir(run_id)


def start_run(
    sandboxes: Sandboxes,
    sandbox_id: str,
    run_id: str,
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    stdin: bytes | None = None,
    control: bool = False,
    trees: Mapping[str, Any] | None = None,
) -> None:
    """Start ``argv`` detached in the sandbox, as the agent, with ``env`` (variables and
    secrets) for this run only and ``stdin`` as its standard input (else /dev/null); with
    ``control``, as hangar's user with a control folder (a live turn's driver); with
    ``trees``, its start and end trees recorded (a one-shot turn). Returns
    once it runs; one exec (:meth:`hangar.processes.Processes.start`). SandboxError if it
    cannot be started (its files are removed, so it can be asked for again)."""
    try:
        Processes(sandboxes, sandbox_id).start(run_id, argv, cwd=cwd, env=env, stdin=stdin,
                                               control=control, trees=trees)  # fmt: skip
    except SandboxError:
        sandboxes.exec(sandbox_id, ["rm", "-f", *(f"{run_dir(run_id)}/{name}" for name in
                                                  ("env.json", "stdin", "spec.json"))],
                       user=HANGAR)  # fmt: skip
        raise


def run_started(sandboxes: Sandboxes, sandbox_id: str, run_id: str) -> bool:
    """Whether run ``run_id`` was started in the sandbox (its supervisor wrote its pid): a
    caller that may have died after asking for it knows not to start it twice."""
    probe = sandboxes.exec(sandbox_id, ["test", "-f", f"{run_dir(run_id)}/pid"], user=HANGAR)
    return probe.ok


_READ = """
cd "$1" 2>/dev/null || exit 3
size=$(stat -c %s log 2>/dev/null || echo 0)
code=$(cat exit 2>/dev/null || echo -)
now=$(date +%s)
last=$(stat -c %Y log stderr 2>/dev/null | sort -n | tail -n 1)
printf '%s %s %s\\n' "$size" "$code" "$((now - ${last:-$now}))"
[ -f log ] && tail -c +$(($2 + 1)) log | head -c "$3"
exit 0
"""


def read_run(
    sandboxes: Sandboxes, sandbox_id: str, run_id: str, cursor: int = 0, limit: int = 1 << 20
) -> RunStatus:
    """Up to ``limit`` log bytes from ``cursor``. SandboxError if the run does not exist."""
    folder = run_dir(run_id)
    result = sandboxes.exec(sandbox_id, ["sh", "-c", _READ, "sh", folder, str(cursor), str(limit)],
                            user=HANGAR)  # fmt: skip
    if result.exit_code == 3:
        raise SandboxError(f"no run {run_id} in sandbox {sandbox_id}", run_id=run_id)
    header, _, data = result.stdout.partition(b"\n")
    _size, code, idle, *_ = (*header.decode().split(" "), "", "")
    exit_code = int(code) if code.strip().lstrip("-").isdigit() else None
    idle_seconds = float(idle) if idle.strip().lstrip("-").isdigit() else None
    return RunStatus(data=data, cursor=cursor + len(data), exit_code=exit_code,
                     idle_seconds=idle_seconds)  # fmt: skip


def read_stderr(sandboxes: Sandboxes, sandbox_id: str, run_id: str, limit: int = 8192) -> bytes:
    """The last ``limit`` bytes of the run's standard error."""
    result = sandboxes.exec(
        sandbox_id, ["sh", "-c", 'tail -c "$2" "$1/stderr" 2>/dev/null; exit 0', "sh",
                     run_dir(run_id), str(limit)], user=HANGAR,
    )  # fmt: skip
    return result.stdout


_STOP = f"""
cd "$1" 2>/dev/null || exit 0
[ -f exit ] && exit 0
read supervisor child < pid 2>/dev/null && kill -TERM "$supervisor" 2>/dev/null
i=0
while [ ! -f exit ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -f exit ] || {{ echo {INTERRUPTED_EXIT} > exit.tmp && mv exit.tmp exit; }}
"""


def stop_run(sandboxes: Sandboxes, sandbox_id: str, run_id: str) -> None:
    """End a run (its command and the processes it started); a run that had not ended gets exit
    status 130. Idempotent."""
    sandboxes.exec(sandbox_id, ["sh", "-c", _STOP, "sh", run_dir(run_id)], user=HANGAR)


def wait_run(
    sandboxes: Sandboxes,
    sandbox_id: str,
    run_id: str,
    *,
    timeout: float,
    poll: float = 0.2,
) -> tuple[bytes, int]:
    """Wait for a run to end; returns its whole log and exit status. SandboxError on timeout
    (the run goes on)."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    cursor = 0
    while True:
        status = read_run(sandboxes, sandbox_id, run_id, cursor)
        chunks.append(status.data)
        cursor = status.cursor
        if status.finished and not status.data:
            assert status.exit_code is not None
            return b"".join(chunks), status.exit_code
        if status.finished:
            continue  # drain the rest of the log before returning
        if time.monotonic() > deadline:
            raise SandboxError(f"run {run_id} did not end within {timeout:g} s", run_id=run_id)
        time.sleep(poll)


def follow_run(
    sandboxes: Sandboxes,
    sandbox_id: str,
    run_id: str,
    cursor: int,
    *,
    window: float,
    on_status: Callable[[RunStatus], None],
    cancel: threading.Event | None = None,
    watch: str | None = None,
) -> RunStatus:
    """Follow a run in one exec for up to ``window`` seconds
    (:meth:`hangar.processes.Processes.attach`): ``on_status`` gets its log bytes from
    ``cursor`` as they are written (``data``), its quiet time now and then (no data,
    ``idle_seconds``), and its end (``exit_code``, with the end of its standard error). Returns
    the last of those: finished if it ended within the window. With ``watch`` (a path in the
    sandbox), the quiet-time statuses also carry that file's stamp (``watched``), and one comes
    as soon as it changes. ``cancel`` set ends the follow early. SandboxError if there is no
    such run or the follow broke off; SandboxNotFound if the sandbox is gone."""
    at, watched = cursor, None

    def output(data: bytes) -> None:
        nonlocal at
        at += len(data)
        on_status(RunStatus(data, at, None, 0.0, watched=watched))

    def quiet(said: Quiet) -> None:
        nonlocal watched
        watched = said.watched
        on_status(RunStatus(b"", at, None, said.idle, watched=watched))

    try:
        end = Processes(sandboxes, sandbox_id).attach(run_id, output, cursor=cursor,
                                                      timeout=window, cancel=cancel,
                                                      on_quiet=quiet, watch=watch)  # fmt: skip
    except SandboxError:
        sandboxes.get(sandbox_id)  # SandboxNotFound when the sandbox went (the follow with it)
        raise
    last = RunStatus(b"", end.cursor, end.exit_code, None, stderr=end.stderr, watched=watched)
    if last.finished:
        on_status(last)
    return last
