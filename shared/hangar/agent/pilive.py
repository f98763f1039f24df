"""pi's side of a live turn (:mod:`hangar.agent.driver`): ``pi --mode rpc``. Standard library
only; pure (the driver does every read and write).

The turn opens with two commands: ``get_state`` (``hangar-state``: its answer names the
conversation before the turn starts) and ``prompt`` (``hangar-prompt``), which carries the
message exactly. A steer is pi's ``steer`` (delivered after the running tool calls, before the
next model call), an interrupt its ``abort``, and a message after the turn has ended another
``prompt``.

The turn has ended at an ``agent_end`` that no ``auto_retry_start`` follows: pi writes a retry's
event right after the ``agent_end``, before it reads its input again, so after each
``agent_end`` a ``get_state`` (``hangar-settled``) is written, and the turn is over when the
answer to the last of them comes with no retry since. A refused prompt ends it too, with the
refusal as ``failure``. pi's output goes to the run log unchanged.
"""

import json

# pi writes each event and answer as one line of JSON, its "id" (when asked with one) and
# "type" first: a line's opening says what it is.
END = b'{"type":"agent_end"'
RETRY = b'{"type":"auto_retry_start"'
SETTLED_ANSWER = b'{"id":"hangar-settled","type":"response"'
REFUSED = b'"type":"response","command":"prompt","success":false'
STATE = {"id": "hangar-state", "type": "get_state"}
SETTLED = {"id": "hangar-settled", "type": "get_state"}
OPENING = 80


def line_of(value):
    return json.dumps(value).encode() + b"\n"


class PiLive:
    """One live pi process: see the module's docstring."""

    def __init__(self, options):
        self.idle = False
        self.failure = None
        self.interrupted = False
        self.asked = 0  # hangar-settled commands not answered yet
        self.ending = False  # an agent_end was seen and no retry since
        self.prompts = 0

    def prompt(self, text):
        self.prompts += 1
        name = "hangar-prompt" if self.prompts == 1 else "hangar-prompt-%d" % self.prompts
        return line_of({"id": name, "type": "prompt", "message": text})

    def begin(self, message):
        return [line_of(STATE), self.prompt(message)]

    def output(self, line):
        opening, send = line[:OPENING], []
        if opening.startswith(END):
            self.ending, self.asked = True, self.asked + 1
            send.append(line_of(SETTLED))
        elif opening.startswith(RETRY):
            self.ending = False
        elif opening.startswith(SETTLED_ANSWER):
            self.asked -= 1
            if self.ending and self.asked == 0:
                self.idle = True
        elif REFUSED in opening:
            self.idle = True
            self.failure = "pi refused the prompt (its answer is in the run log)"
        return [line + b"\n"], send

    def steer(self, text):
        self.interrupted = False
        return [line_of({"type": "steer", "message": text})]

    def follow_up(self, text):
        self.idle = self.ending = False
        self.interrupted = False
        self.failure = None
        return [self.prompt(text)]

    def interrupt(self):
        self.interrupted = True
        return [line_of({"type": "abort"})]
