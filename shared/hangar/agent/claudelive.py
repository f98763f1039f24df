"""Claude Code's side of a live turn (:mod:`hangar.agent.driver`): ``claude -p --input-format
stream-json --output-format stream-json --verbose``, spoken to as the Claude Agent SDK does.
Standard library only; pure (the driver does every read and write).

The message and every later message go to Claude Code's standard input as user lines
(``{"type": "user", "message": {"role": "user", "content": TEXT}}``). A steer carries
``"priority": "now"``, which Claude Code injects into the turn's next model request (a plain
line written mid-turn is dropped); one written after a ``result`` starts a further run of the
same conversation in the same process, which is how a steer that came as the turn ended
continues it. An interrupt is the ``interrupt`` control request; Claude Code ends the run with
a ``result`` and waits for input again.

Its output goes to the run log as it is, except each ``result`` line: its ``usage`` is the
process's totals (each ``result`` of a run counts only that run; hangar reads the last), so a
turn that ran more than once reports all it used.
"""

import json

RESULT = b'{"type":"result"'


class ClaudeLive:
    """One live Claude Code process: see the module's docstring for the contract."""

    def __init__(self, options):
        self.idle = False
        self.failure = None
        self.interrupted = False
        self.totals = {}
        self.asked = 0

    @staticmethod
    def user(text, priority=None):
        line = {"type": "user", "message": {"role": "user", "content": text}}
        if priority:
            line["priority"] = priority
        return json.dumps(line).encode() + b"\n"

    def begin(self, message):
        return [self.user(message)]

    def output(self, line):
        """A line of Claude Code's output: (lines for the run log, lines to write to it)."""
        if not line.startswith(RESULT):
            return [line + b"\n"], []
        try:
            event = json.loads(line)
        except ValueError:
            return [line + b"\n"], []
        self.idle = True
        usage = event.get("usage")
        if isinstance(usage, dict):
            for key, value in usage.items():
                if isinstance(value, int) and not isinstance(value, bool):
                    self.totals[key] = self.totals.get(key, 0) + value
            event["usage"] = dict(usage, **self.totals)
            line = json.dumps(event, separators=(",", ":")).encode()
        return [line + b"\n"], []

    def steer(self, text):
        self.interrupted = False
        return [self.user(text, "now")]

    def follow_up(self, text):
        self.idle = False
        self.interrupted = False
        return [self.user(text)]

    def interrupt(self):
        self.asked += 1
        self.interrupted = True
        request = {"subtype": "interrupt"}
        line = {"type": "control_request", "request_id": "hangar-%d" % self.asked,
                "request": request}  # fmt: skip
        return [json.dumps(line).encode() + b"\n"]
