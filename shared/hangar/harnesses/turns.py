"""One agent turn in a sandbox: the harness's command started as a detached run, and its
outcome read back once the run has ended."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from hangar import agent
from hangar.errors import ExecTimeout
from hangar.harnesses import Harness, TurnResult, TurnSpec
from hangar.processes.runs import read_stderr, run_dir, start_run
from hangar.sandboxes import HOME, Sandboxes, SandboxUser

MERGE_TIMEOUT = 60
"""Seconds the merge of a harness's settings may take (it reads at most 1 MiB a file)."""
MAX_WARNING = 500
LOOK_TIMEOUT = 30
"""Seconds the look for a conversation's file may take."""
_CONVERSATION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def start_turn(
    sandboxes: Sandboxes,
    sandbox_id: str,
    harness: Harness,
    spec: TurnSpec,
    run_id: str,
    key: bytes | None = None,
    tree_slow_ms: float = 0,
) -> list[str]:
    """Merge the harness's settings into its configuration files, then start its command
    detached in the repo with the turn's environment (the environment's variables and secrets,
    then the harness's own settings). With ``key`` (the run's command key,
    :mod:`hangar.agent.commands`) the turn is live: hangar's driver (:mod:`hangar.agent.driver`)
    runs the harness's live command and takes steers and interrupts signed with the key from
    the run's control folder; the caller has checked :meth:`Harness.live` has one; with
    ``tree_slow_ms`` the working tree's git tree is recorded at the turn's start and end (a
    one-shot turn's by its run's supervisor) and, in a live turn, by the driver after each edit
    or shell step too (:mod:`hangar.agent.turntrees`; a hash slower than that stops it for the
    turn). Returns at
    once, with the merge's warnings (see :func:`write_home_files`); HarnessError if the harness
    cannot honour ``spec``."""
    live = harness.live(spec) if key is not None else None
    invocation = harness.command(spec) if live is None else None
    warnings = write_home_files(sandboxes, sandbox_id, harness, spec)
    trees = {"repo": spec.cwd, "slow_ms": tree_slow_ms} if tree_slow_ms > 0 else None
    if live is None:
        assert invocation is not None
        env = {**spec.env, **invocation.env}
        start_run(sandboxes, sandbox_id, run_id, invocation.argv, cwd=spec.cwd, env=env,
                  stdin=invocation.stdin, trees=trees)  # fmt: skip
        return warnings
    assert key is not None
    request = {"harness": harness.name, "argv": live.argv, "message": spec.prompt,
               "run_id": run_id, "key": base64.b64encode(key).decode(),
               "options": live.options}  # fmt: skip
    if trees is not None:
        request["trees"] = trees
    start_run(sandboxes, sandbox_id, run_id, agent.command("driver", run_dir(run_id)),
              cwd=spec.cwd, env={**spec.env, **live.env}, stdin=json.dumps(request).encode(),
              control=True)  # fmt: skip
    return warnings


def write_home_files(
    sandboxes: Sandboxes, sandbox_id: str, harness: Harness, spec: TurnSpec
) -> list[str]:
    """Merge the harness's settings for ``spec`` into its configuration files under HOME, in
    the sandbox, as the agent (:mod:`hangar.agent.homeconfig`): every key and table already
    there stays (an environment's setup may configure the harness the way its docs say), only
    hangar's own keys are added or replaced. A file that is a link, is not a regular file, or
    does not parse is left as it is. Returns one warning per file left as it was, or one saying
    the merge did not run; raises only what running a command in the sandbox raises. What the
    merge answers is read as the agent's (untrusted): bounded, and only its strings."""
    files = harness.home_files(spec)
    if not files:
        return []
    request = json.dumps({"files": files}).encode()
    result = agent.run_script(sandboxes, sandbox_id, "homeconfig", HOME, stdin=request,
                              timeout=MERGE_TIMEOUT, user=SandboxUser.AGENT)  # fmt: skip
    answer: Any = None
    if result.ok:
        try:
            answer = json.loads(result.stdout[: 64 << 10])
        except ValueError:
            pass
    found = answer.get("warnings") if isinstance(answer, dict) else None
    if not isinstance(found, list):
        why = " ".join(result.stderr.decode(errors="replace").split())[-300:] or "no answer"
        names = ", ".join(f"~/{path}" for path in files)
        return [f"{harness.name}'s settings could not be merged into {names}: {why}"]
    return [w[:MAX_WARNING] for w in found[: len(files)] if isinstance(w, str)]


def turn_result(
    sandboxes: Sandboxes,
    sandbox_id: str,
    harness: Harness,
    spec: TurnSpec,
    run_id: str,
    log: bytes,
    exit_code: int,
    stderr: bytes | None = None,
) -> TurnResult:
    """The checked outcome of a finished run whose whole log is ``log`` and the end of whose
    standard error is ``stderr`` (None: read it from the sandbox)."""
    if stderr is None:
        stderr = read_stderr(sandboxes, sandbox_id, run_id)
    return harness.outcome(spec, exit_code, log, stderr)


def conversation_saved(
    sandboxes: Sandboxes, sandbox_id: str, harness: Harness, conversation_id: str
) -> bool:
    """Whether the harness has written conversation ``conversation_id`` in the sandbox, so that
    a turn can resume it: a file that is not empty, named for the id, in one of the harness's
    conversation folders (each names its files by the id: Claude Code ``<id>.jsonl``, Codex
    ``rollout-*-<id>.jsonl``, pi ``<ts>_<id>.jsonl``). For a turn stopped before it ended,
    which may have been stopped before the harness wrote anything. Looked for as the agent,
    whose folders they are, following no link; an id that is not a plain name (as a glob it
    could match any file) and a look that takes too long are not saved."""
    if not _CONVERSATION_ID.match(conversation_id):
        return False
    folders = [f"{HOME}/{folder}" for folder in harness.conversation_dirs]
    try:
        found = sandboxes.exec(sandbox_id, ["find", *folders, "-type", "f", "-name",
                                            f"*{conversation_id}*", "-size", "+0", "-print",
                                            "-quit"], timeout=LOOK_TIMEOUT)  # fmt: skip
    except ExecTimeout:
        return False
    return bool(found.stdout.strip())  # (a folder not made yet is an error, not an answer)
