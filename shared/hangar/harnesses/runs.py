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
where it stopped. The environment and the input (a turn's message) reach that command only,
never a command line.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hangar import agent
from hangar.errors import InvalidInput, SandboxError
from hangar.sandboxes import HANGAR_DIR, Sandboxes, SandboxUser

RUNS_DIR = f"{HANGAR_DIR}/runs"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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

    @property
    def finished(self) -> bool:
        return self.exit_code is not None


def run_dir(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise InvalidInput(f"invalid run id {run_id!r}", run_id=run_id)
    return f"{RUNS_DIR}/{run_id}"


def start_run(
    sandboxes: Sandboxes,
    sandbox_id: str,
    run_id: str,
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    stdin: bytes | None = None,
) -> None:
    """Start ``argv`` detached in the sandbox, as the agent, with ``env`` (variables and
    secrets) for this run only and ``stdin`` as its standard input (else /dev/null). Returns
    once it runs. SandboxError if it cannot be started (the env and input files are
    removed)."""
    folder = run_dir(run_id)
    bad = [k for k in env if not _ENV_NAME.match(k)]
    if bad:
        raise InvalidInput(f"invalid environment variable names: {bad}", names=bad)
    spec = {"argv": list(argv), "cwd": cwd}
    sandboxes.put_file(sandbox_id, f"{folder}/env.json", json.dumps(dict(env)).encode(),
                       mode=0o600, user=HANGAR)  # fmt: skip
    if stdin is not None:
        sandboxes.put_file(sandbox_id, f"{folder}/stdin", stdin, mode=0o600, user=HANGAR)
    sandboxes.put_file(sandbox_id, f"{folder}/spec.json", json.dumps(spec).encode(), mode=0o600,
                       user=HANGAR)  # fmt: skip
    started = agent.run_script(sandboxes, sandbox_id, "run", folder, user=HANGAR)
    if not started.ok:
        sandboxes.exec(sandbox_id, ["rm", "-f", f"{folder}/env.json", f"{folder}/stdin"],
                       user=HANGAR)  # fmt: skip
        raise SandboxError(
            f"could not start run {run_id}: {started.stderr.decode(errors='replace').strip()}",
            run_id=run_id,
        )


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
