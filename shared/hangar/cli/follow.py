"""Following work from the CLI: a start's phases, a turn's progress, and what Ctrl-C means.

Progress goes to stderr, one line per notable event of the run log (tool calls, the agent's
text, the model API's retries with their reason); the summary goes to stdout, once: the
agent's last text is held back until something follows it, and dropped when it is the
summary. Ctrl-C stops the following, never the work: :class:`Detached` says what goes on and
how to get back to it.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from hangar.cli.client import ApiError, Client, session_path
from hangar.cli.render import describe_event, describe_phase, inert, print_json, say

WAIT_SLICE = 60.0
"""Seconds one wait call may take before the CLI asks again."""
PHASE_POLL = 0.3
LOG_DRAIN = 5.0
"""Seconds to let the log stream print its last lines once the turn is over."""
TIMED_OUT = 124
"""The exit status of ``session wait --timeout`` when the turn is still running (as timeout(1))."""


class Detached(Exception):
    """Ctrl-C while following: the work goes on; ``message`` says how to follow it again."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def detached(name: str, what: str) -> Detached:
    return Detached(f"stopped following {name}; {what} goes on (hangar session wait {name} "
                    f"follows it again, hangar session interrupt {name} stops a turn)")  # fmt: skip


def follow_start(api: Client, name: str) -> dict[str, Any]:
    """Show a starting session's phases on stderr, one line each, until it is no longer
    starting; returns it. ApiError with the start's error when the start failed."""
    shown: tuple[str, str] | None = None
    try:
        while True:
            session: dict[str, Any] = api.call("GET", session_path(name))
            phase = session.get("phase")
            if session["state"] != "starting":
                failure = session.get("start_error")
                if session["state"] == "failed" and failure:
                    raise ApiError(str(failure["code"]), f"the start of {name} failed while "
                                   f"{failure['what']} ({failure['step']}): {failure['message']}")
                return session
            if phase and (phase["step"], phase["detail"]) != shown:
                shown = (phase["step"], phase["detail"])
                say(f"  {describe_phase(phase)}", err=True)
            time.sleep(PHASE_POLL)
    except KeyboardInterrupt:
        raise detached(name, "its start") from None


def ensure_running(api: Client, name: str) -> None:
    """Open the session first when it has no sandbox, showing the phases while it starts."""
    session = api.call("GET", session_path(name))
    if session["state"] in ("idle", "active") and session.get("sandbox_id"):
        return
    opened = api.call("POST", session_path(name, "open"))
    if opened["state"] == "starting":
        follow_start(api, name)


class Progress:
    """Prints a run log's notable events on stderr; holds the agent's latest text back so the
    summary, printed on stdout afterwards, is not shown twice."""

    def __init__(self) -> None:
        self.held: str | None = None
        self.lock = threading.Lock()

    def line(self, raw: bytes) -> None:
        text = describe_event(raw)
        if text is None:
            return
        with self.lock:
            if self.held is not None:
                self._print(self.held)
            self.held = None
            if text.startswith(("tool ", "ran: ", "model API")):
                self._print(text)
            else:
                self.held = text

    def end(self, summary: str | None) -> None:
        with self.lock:
            if self.held is not None and not _same(self.held, summary):
                self._print(self.held)
            self.held = None

    @staticmethod
    def _print(text: str) -> None:
        say(f"  {text}", err=True)


def _same(shown: str, summary: str | None) -> bool:
    flat = inert(" ".join((summary or "").split()))  # as describe_event shows it
    return shown == flat or (shown.endswith("...") and flat.startswith(shown[:-3]))


def wait_turn(api: Client, name: str, n: int, *, as_json: bool = False,
              timeout: float | None = None) -> int:  # fmt: skip
    """Show turn ``n``'s progress on stderr until it ends, then print its summary (its JSON
    with ``as_json``); 1 (and one line on stderr) if the turn did not exit well, and
    :data:`TIMED_OUT` if ``timeout`` seconds pass first. Ctrl-C raises :class:`Detached`."""
    progress = Progress()
    follower = threading.Thread(target=_follow_log, args=(api, name, n, progress), daemon=True,
                                name="follow-log")  # fmt: skip
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        follower.start()
        while True:
            left = WAIT_SLICE if deadline is None else min(WAIT_SLICE, deadline - time.monotonic())
            turn = api.call("POST", session_path(name, "wait"),
                            {"turn": n, "timeout": max(0.0, left)})  # fmt: skip
            if turn["finished_at"]:
                break
            if deadline is not None and time.monotonic() >= deadline:
                print(f"hangar: turn {n} of {name} is still running after {timeout:g} s "
                      "(still_running)", file=sys.stderr, flush=True)  # fmt: skip
                return TIMED_OUT
        follower.join(LOG_DRAIN)
    except KeyboardInterrupt:
        raise detached(name, f"turn {n}") from None
    progress.end(turn["summary"])
    if as_json:
        print_json(turn)
    elif turn["outcome"] in ("exited", "needs_input"):
        print_outcome(name, turn)
    if turn["outcome"] == "needs_input":
        return 0
    if turn["outcome"] == "exited":
        if turn.get("result_error"):
            raise ApiError("result_error", f"turn {n} of {name} gave no valid result: "
                           f"{turn['result_error']}")  # fmt: skip
        return 0
    code = turn.get("error_code") or turn["outcome"]
    how = str(turn["outcome"]).replace("_", " ")  # "timed out": its summary says which limit
    raise ApiError(code, f"turn {n} of {name} {how}: {turn['summary'] or ''}")


def print_outcome(name: str, turn: dict[str, Any]) -> None:
    """A turn that ended well: its summary, result, artifacts and question (stdout), and what
    was left out of what it handed back (stderr)."""
    say(turn["summary"] or "(no summary)", lines=True)
    if turn.get("result") is not None:
        print_json(turn["result"])
    for artifact in turn.get("artifacts") or []:
        say(f"artifact: {artifact['path']} ({artifact['size']} bytes; hangar session "
            f"artifacts {name} --get {artifact['path']})")  # fmt: skip
    for warning in turn.get("warnings") or []:
        say(f"hangar: warning: {warning}", err=True)
    if turn["outcome"] == "needs_input":
        say(f"needs input: {turn['question']}", lines=True)
        for i, option in enumerate(turn.get("question_options") or [], 1):
            say(f"  {i}. {option}")
        say(f'answer with: hangar session send {name} "ANSWER"')


def _follow_log(api: Client, name: str, n: int, progress: Progress) -> None:
    try:
        follow = {"turn": n, "follow": "true"}
        for line in api.lines("GET", session_path(name, "log"), params=follow):
            progress.line(line)
    except ApiError:
        pass  # the stream broke (a restarted server?): the wait goes on without progress
