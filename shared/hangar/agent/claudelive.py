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
CONTROL = b'{"type":"control_request"'


class ClaudeLive:
    """One live Claude Code process: see the module's docstring for the contract."""

    def __init__(self, options):
        self.idle = False
        self.failure = None
        self.interrupted = False
        self.totals = {}
        self.asked = 0
        self.asks = []  # approvals asked for and not yet published by the driver
        self.pending = {}  # approval id -> the tool's input, until decided

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
        if line.startswith(CONTROL):
            return self.control(line)
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

    def control(self, line):
        """A control request of Claude Code's: ``can_use_tool`` (under
        ``--permission-prompt-tool stdio``) becomes an approval for the driver to publish and
        hangar to decide; any other is refused at once, so Claude Code never waits on it."""
        try:
            message = json.loads(line)
            request_id, request = message["request_id"], message["request"]
            subtype = request.get("subtype")
        except (ValueError, KeyError, TypeError, AttributeError):
            return [line + b"\n"], []
        if subtype == "can_use_tool" and isinstance(request_id, str):
            tool_input = request.get("input") if isinstance(request.get("input"), dict) else {}
            self.pending[request_id] = tool_input
            self.asks.append({"id": request_id, "tool": str(request.get("tool_name") or ""),
                              "input": tool_input})  # fmt: skip
            return [], []
        refusal = {"subtype": "error", "request_id": request_id,
                   "error": "hangar does not answer %s" % subtype}  # fmt: skip
        return [], [json.dumps({"type": "control_response", "response": refusal}).encode() + b"\n"]

    def decide(self, approval_id, allow, message=""):
        """The answer to approval ``approval_id`` (None: no such approval waits)."""
        if approval_id not in self.pending:
            return None
        tool_input = self.pending.pop(approval_id)
        if allow:
            answer = {"behavior": "allow", "updatedInput": tool_input}
        else:
            answer = {"behavior": "deny", "message": message or "denied by a person"}
        response = {"subtype": "success", "request_id": approval_id, "response": answer}
        return [json.dumps({"type": "control_response", "response": response}).encode() + b"\n"]

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
