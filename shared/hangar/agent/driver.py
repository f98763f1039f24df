"""The steering driver: one live turn of an agent CLI, steerable and interruptible while it runs.
Standard library only; run as hangar's in-sandbox user (uid 0 of the sandbox) by the turn's run
supervisor (:mod:`hangar.agent.run`, spec ``"as": "hangar"`` and ``"control": true``), as
``driver RUN_DIR``, in the repo, with the agent's environment.

It first makes itself non-dumpable (:func:`hangar.agent.commands.undumpable`: nothing of its
uid can trace it or read its memory), then reads its request on standard input, a file the
supervisor removed before it started::

    {"harness": "claude" | "codex" | "pi", "argv": [...], "message": TEXT,
     "run_id": ID, "key": BASE64, "options": {...}}

``key`` is the run's command key (:mod:`hangar.agent.commands`), which exists nowhere else in
the sandbox. It starts ``argv`` as the agent (the identity in ``/hangar/sandbox.json``, as the
supervisor would), with pipes for its input and output, and speaks the CLI's own protocol
through one adapter, :mod:`.claudelive`, :mod:`.codexlive` or :mod:`.pilive` (pure objects:
``begin``, ``output``, ``steer``, ``interrupt``, ``follow_up``, and ``idle``, ``failure``,
``interrupted``). What the adapter makes of the CLI's output is this process's standard output:
the run log.

Commands come from ``RUN_DIR/ctl`` (:class:`hangar.agent.commands.Inbox`), looked at every
:data:`LOOK` seconds: a ``steer`` (``{"message": TEXT}``) is passed on as the adapter says
(kept and passed on after the next line of output when the CLI cannot take it yet), an
``interrupt`` likewise; each is answered ``delivered`` once written to the CLI.

When the CLI's turn is over (the adapter is ``idle``), the inbox is closed (its folder renamed
away first, so a later command fails to land and hangar knows at once) and what had landed is
carried out: a steer becomes a further message of the same turn (``follow_up``), and the turn
goes on. With nothing left the CLI's input is closed and it exits. If the CLI exits by itself,
every command not passed on is answered ``turn_ended``: hangar starts the next turn with it. So
a steer is delivered exactly once, or answered ``turn_ended``.

An interrupt the CLI does not heed within :data:`GRACE` seconds (its turn not over) ends the CLI
and what it started, as a stop would. The exit status is the CLI's; 130 after an interrupt that
no later message followed, or that ended the CLI; 1 (saying
why on standard error) when the adapter reports a failure the CLI did not exit for, or the
request is bad; 127 when the CLI cannot be started.
"""

import base64
import json
import os
import select
import signal
import subprocess
import sys
import time

from hangar.agent import commands, run
from hangar.agent.steps import Steps
from hangar.agent.turntrees import TurnTrees, open_trees

LOOK = 0.05
"""Seconds between looks at the inbox while the CLI is quiet (a listing of an empty folder)."""
GRACE = 10.0
"""Seconds an interrupted CLI has to end its turn before the driver ends the CLI itself (Claude
Code, interrupted in a tool call with a steer waiting, moves the tool to the background and
waits on it)."""
INTERRUPTED = 130
ADAPTERS = {"claude": "claudelive.ClaudeLive", "codex": "codexlive.CodexLive",
            "pi": "pilive.PiLive"}  # fmt: skip


def adapter_for(harness, options):
    """The adapter for ``harness`` (ValueError for one without)."""
    if harness not in ADAPTERS:
        raise ValueError("no live driver for harness %r" % harness)
    module, name = ADAPTERS[harness].split(".")
    loaded = __import__("hangar.agent." + module, fromlist=[name])
    return getattr(loaded, name)(options)


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data) :]


class Driver:
    """The loop: the CLI's output to the log through the adapter, commands to the CLI."""

    def __init__(self, adapter, inbox, cli, key=None, run_id="", trees=None):
        self.adapter, self.inbox, self.cli = adapter, inbox, cli
        self.key, self.run_id = key, run_id
        self.trees = trees or TurnTrees(None)  # the steps' trees (none without a Trees)
        self.steps = Steps()
        self.waiting = []  # commands taken and not passed on yet, in order
        self.to_cli = cli.stdin.fileno()
        self.gone = False  # the CLI's input is closed (it exited, or we ended it)
        self.late = False  # the inbox is closed
        self.interrupted_at = None  # when the last interrupt was passed on
        self.ended = False  # the driver ended the CLI after an interrupt it did not heed

    def send(self, lines):
        if self.gone:
            return False
        try:
            write_all(self.to_cli, b"".join(lines))
            return True
        except OSError:  # the CLI is gone: its output ends next
            self.gone = True
            return False

    def pass_on(self):
        """Pass on what waits, in order, as far as the adapter can take it now."""
        while self.waiting:
            command = self.waiting[0]
            if command.kind == "decide":
                self.waiting.pop(0)
                self.decide(command)
                continue
            if command.kind == "steer":
                text = command.body.get("message")
                if not isinstance(text, str):
                    self.waiting.pop(0)
                    self.inbox.answer(command, "refused", "a steer needs a message")
                    continue
                lines = self.adapter.follow_up(text) if self.adapter.idle else self.adapter.steer(text)
            elif self.adapter.idle:  # an interrupt with nothing running: nothing to stop
                self.waiting.pop(0)
                self.inbox.answer(command, "delivered", "the turn had ended")
                continue
            else:
                lines = self.adapter.interrupt()
            if lines is None:
                return  # not now: after the next line of output
            if not self.send(lines):
                return
            self.waiting.pop(0)
            if command.kind == "interrupt":
                self.interrupted_at = time.monotonic()
            self.inbox.answer(command, "delivered")

    def decide(self, command):
        """Carry out a decision on an approval the CLI waits for; refused when none such waits
        (unknown, or decided already)."""
        body = command.body
        decide = getattr(self.adapter, "decide", None)
        approval, allow = body.get("approval"), body.get("allow")
        lines = None
        if decide is not None and isinstance(approval, str) and isinstance(allow, bool):
            lines = decide(approval, allow, str(body.get("message") or ""))
        if lines is None:
            self.inbox.answer(command, "refused", "no such approval waits")
        elif self.send(lines):
            self.inbox.answer(command, "delivered")
        else:
            self.inbox.answer(command, "turn_ended", "the agent's process had ended")

    def tree(self, tool):
        """Record the working tree's git tree after a step, as a signed line in the log."""
        name, paths = tool
        line = self.trees.record(name, paths)
        if line is not None:
            write_all(1, commands.signed_event(self.key or b"", self.run_id, line))

    def log(self, lines):
        """Write the adapter's lines to the run log, each step they end followed by its tree."""
        write_all(1, b"".join(lines))
        for line in lines:
            for step in self.steps.see(line.rstrip(b"\n")):
                self.tree(step)

    def publish(self):
        """The approvals the adapter was asked for, as signed lines in the run log."""
        asks = getattr(self.adapter, "asks", None)
        while asks:
            ask = asks.pop(0)
            fields = {"type": "hangar.approval", "id": ask["id"], "tool": ask["tool"],
                      "input": ask["input"], "at": time.time()}  # fmt: skip
            write_all(1, commands.signed_event(self.key or b"", self.run_id, fields))

    def look(self):
        """Take what has landed; at the turn's end, close the inbox and carry out the rest;
        end a CLI that did not heed an interrupt within :data:`GRACE` seconds."""
        if self.adapter.idle:
            self.interrupted_at = None
        elif self.interrupted_at is not None and time.monotonic() - self.interrupted_at > GRACE:
            self.interrupted_at = None
            self.ended = True
            end_tree(self.cli.pid)
        self.waiting += self.inbox.take()
        if self.adapter.idle and not self.waiting and not self.late:
            self.late = True
            self.waiting += self.inbox.close()
        self.pass_on()
        if self.adapter.idle and self.late and not self.waiting and not self.gone:
            self.gone = True
            self.cli.stdin.close()  # the turn is over: the CLI ends

    def run(self, message):
        self.send(self.adapter.begin(message))
        out = self.cli.stdout.fileno()
        pending = b""
        while True:
            ready, _, _ = select.select([out], [], [], LOOK)
            if ready:
                chunk = os.read(out, 1 << 16)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    log, send = self.adapter.output(line)
                    self.log(log)
                    self.publish()
                    if send:
                        self.send(send)
                    self.pass_on()
            self.look()
        if pending:
            log, _ = self.adapter.output(pending)
            self.log(log)
        self.late = True
        for command in self.waiting + self.inbox.close():
            self.inbox.answer(command, "turn_ended", "the agent's process had ended")
        self.waiting = []


def end_tree(pid):
    """SIGTERM ``pid`` and every process descended from it (the agent's: this process's user
    may signal them), then SIGKILL what is left a moment later."""
    targets = [pid, *run.descendants(pid)]  # once: an orphan is no longer found under pid
    for number in (signal.SIGTERM, signal.SIGKILL):
        for target in targets:
            try:
                os.kill(target, number)
            except OSError:
                pass
        if number == signal.SIGTERM:
            time.sleep(1.0)


def start_cli(argv, cwd):
    """``argv`` started as the agent (this process's user without an identity file), with
    pipes for its input and output; its standard error is ours."""
    identity = run.read_json(run.IDENTITY)
    become = (lambda: run.become_agent(identity)) if identity is not None else None
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=cwd,
                            preexec_fn=become)  # fmt: skip


def main():
    commands.undumpable()
    folder = sys.argv[1]
    try:
        request = json.loads(sys.stdin.buffer.read())
        key = base64.b64decode(request["key"])
        adapter = adapter_for(request["harness"], request.get("options") or {})
        argv, message, run_id = request["argv"], request["message"], request["run_id"]
        if len(key) != commands.KEY_BYTES or not isinstance(message, str):
            raise ValueError("a bad key or message")
    except (ValueError, KeyError, TypeError) as exc:
        sys.exit("hangar: a bad driver request: %s" % exc)
    inbox = commands.Inbox(os.path.join(folder, "ctl"), key, run_id)
    trees = TurnTrees(open_trees(request.get("trees"), os.path.join(folder, "trees")))
    try:
        cli = start_cli(argv, os.getcwd())
    except OSError as exc:
        inbox.close()
        sys.stderr.write("hangar: cannot start %s: %s\n" % (argv[0], exc))
        sys.exit(127)
    driver = Driver(adapter, inbox, cli, key, run_id, trees)
    driver.tree(("start", None))
    driver.run(message)
    if not driver.gone:
        cli.stdin.close()
    code = cli.wait()
    driver.tree(("end", None))
    try:
        driver.trees.write_patches(os.path.join(folder, "steps.jsonl"))
    except OSError as exc:
        sys.stderr.write("hangar: the steps' patches were not written: %s\n" % exc)
    code = 128 - code if code < 0 else code
    if (adapter.interrupted and adapter.idle) or driver.ended:
        code = INTERRUPTED
    elif code == 0 and adapter.failure:
        sys.stderr.write("hangar: %s\n" % adapter.failure)
        code = 1
    elif code == 0 and not adapter.idle:
        sys.stderr.write("hangar: %s ended before its turn did\n" % argv[0])
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
