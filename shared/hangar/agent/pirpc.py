"""Drive one turn of pi through its RPC mode. Standard library only; run as the agent, as a
turn's command: ``python3 -I -S -c SRC PI_ARGV...`` (``pi --mode rpc ...``), the message on
standard input.

pi's print mode trims what it reads on standard input; the ``prompt`` command of its RPC mode
carries a message exactly. This reads the message to its end, starts PI_ARGV with pipes for its
input and output, and writes it two commands::

    {"id": "hangar-state", "type": "get_state"}      answered with the conversation's id at once
    {"id": "hangar-prompt", "type": "prompt", "message": MESSAGE}

Everything pi writes on its standard output is copied to this process's as it comes, unchanged:
the run log is pi's events and its answers to these commands. Its standard error is the run's.

The turn has ended at an ``agent_end`` event that no ``auto_retry_start`` follows: pi writes a
retry's event right after the ``agent_end``, before it reads its input again, so after each
``agent_end`` a ``get_state`` (``hangar-settled``) is written, and the turn has ended when the
answer to the last of them comes with no retry since. Then pi's input is closed, which ends its
session, and this process exits with pi's status; with 1, saying why on standard error, when
pi refused the prompt or ended before its turn did; with 127 when pi cannot be started.
"""

import json
import os
import subprocess
import sys

STATE = b'{"id":"hangar-state","type":"get_state"}\n'
SETTLED = b'{"id":"hangar-settled","type":"get_state"}\n'
# pi writes each event and answer as one line of JSON, its "id" (when asked with one) and "type"
# first: a line's opening says what it is, so a long line (an agent_end carries the whole turn)
# is never held here.
END = b'{"type":"agent_end"'
RETRY = b'{"type":"auto_retry_start"'
SETTLED_ANSWER = b'{"id":"hangar-settled","type":"response"'
REFUSED = b'{"id":"hangar-prompt","type":"response","command":"prompt","success":false'
OPENING = 80


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def follow(pi):
    """Copy pi's output to ours until its turn has ended; returns None then, else why not."""
    asked = 0  # hangar-settled commands not answered yet
    ending = False  # an agent_end was seen and no retry since
    opening = b""  # the opening of the line being read
    out = pi.stdout.fileno()
    while True:
        chunk = os.read(out, 1 << 16)
        if not chunk:
            return "pi ended before its turn did"
        write_all(1, chunk)
        *ended, rest = chunk.split(b"\n")
        for piece in ended:
            line, opening = (opening + piece)[:OPENING], b""
            if line.startswith(END):
                ending, asked = True, asked + 1
                try:
                    write_all(pi.stdin.fileno(), SETTLED)
                except OSError:  # pi is gone: its output ends next
                    pass
            elif line.startswith(RETRY):
                ending = False
            elif line.startswith(SETTLED_ANSWER):
                asked -= 1
                if ending and asked == 0:
                    return None
            elif line.startswith(REFUSED):
                return "pi refused the prompt (its answer is in the run log)"
        opening = (opening + rest)[:OPENING]


def drain(pi):
    """What pi wrote before it exited, copied without waiting for an end of its output (a
    process it left behind may hold it open)."""
    out = pi.stdout.fileno()
    os.set_blocking(out, False)
    while True:
        try:
            chunk = os.read(out, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            return
        write_all(1, chunk)


def main():
    message = sys.stdin.buffer.read().decode("utf-8", "replace")
    prompt = {"id": "hangar-prompt", "type": "prompt", "message": message}
    try:
        pi = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except OSError as exc:
        sys.stderr.write("hangar: cannot start %s: %s\n" % (sys.argv[1], exc))
        sys.exit(127)
    # pi writes nothing but the first answer before it has read the whole prompt line, so this
    # write cannot wait on a full output pipe.
    try:
        write_all(pi.stdin.fileno(), STATE + json.dumps(prompt).encode() + b"\n")
    except OSError:
        pass  # pi is gone: its output ends next
    why = follow(pi)
    pi.stdin.close()
    code = pi.wait()
    drain(pi)
    code = 128 - code if code < 0 else code
    if why is not None and code == 0:
        sys.stderr.write("hangar: %s\n" % why)
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
