"""One agent turn in a sandbox: the harness's command started as a detached run, and its
outcome read back once the run has ended."""

from __future__ import annotations

from hangar.harnesses import Harness, TurnResult, TurnSpec
from hangar.harnesses.runs import read_stderr, start_run
from hangar.sandboxes import HOME, Sandboxes


def start_turn(
    sandboxes: Sandboxes, sandbox_id: str, harness: Harness, spec: TurnSpec, run_id: str
) -> None:
    """Write the harness's configuration files, then start its command detached in the repo
    with the turn's environment (the environment's variables and secrets, then the harness's
    own settings). Returns at once; HarnessError if the harness cannot honour ``spec``."""
    invocation = harness.command(spec)
    write_home_files(sandboxes, sandbox_id, harness, spec)
    env = {**spec.env, **invocation.env}
    start_run(sandboxes, sandbox_id, run_id, invocation.argv, cwd=spec.cwd, env=env,
              stdin=invocation.stdin)  # fmt: skip


def write_home_files(
    sandboxes: Sandboxes, sandbox_id: str, harness: Harness, spec: TurnSpec
) -> None:
    """Write the harness's configuration files for ``spec`` under HOME, as the agent (0600)."""
    for path, content in harness.home_files(spec).items():
        sandboxes.put_file(sandbox_id, f"{HOME}/{path}", content.encode(), mode=0o600)


def turn_result(
    sandboxes: Sandboxes,
    sandbox_id: str,
    harness: Harness,
    spec: TurnSpec,
    run_id: str,
    log: bytes,
    exit_code: int,
) -> TurnResult:
    """The checked outcome of a finished run whose whole log is ``log``."""
    stderr = read_stderr(sandboxes, sandbox_id, run_id)
    return harness.outcome(spec, exit_code, log, stderr)
