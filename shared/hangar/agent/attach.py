"""Attach to one supervised run from inside its sandbox, in one exec: its output from a byte
cursor as it grows, and the exec's standard input forwarded to the run's supervisor. Standard
library only; run as hangar's user (see :mod:`hangar.agent.run` for the run folder) as::

    attach RUN_DIR stream FROM TIMEOUT LIMIT INPUT [status [WATCHED]]
                                                    (INPUT: 0, 1 or hang-up=SECONDS)
    attach RUN_DIR send
    attach RUN_DIR forget

``stream`` writes output frames to standard output, each TYPE (1 byte) + LENGTH (4 bytes,
big-endian) + payload::

    o   log bytes, in order, from FROM on (none when FROM is -1)
    x   last: JSON {"exit": CODE or null, "cursor": N}: the run's status (every log byte
        was sent before a CODE) and the cursor after the bytes sent

With ``status`` (a seventh argument) it also says, for the run watch::

    q   JSON {"idle": SECONDS, "watched": STAMP}: how many whole seconds neither the log nor
        the standard error has changed, by the sandbox's clock, and the size and time of the
        WATCHED file (an eighth argument; null when none is given or it is missing): first,
        every HEARTBEAT seconds while no output is sent, and as soon as that stamp changes
    e   just before an ``x`` with a CODE: the last STDERR_TAIL bytes of the standard error

It returns once the run has ended, TIMEOUT seconds have passed (-1: never) or LIMIT bytes were
sent (0: no limit). With INPUT other than 0 it also forwards commands from its standard input
to the run until that ends: frames TYPE (1 byte) + LENGTH (2 bytes) + payload as the supervisor
reads them (``d`` input, ``c`` close the input, ``r`` "ROWS COLS", ``s`` "N", ``k`` stop),
each at most :data:`MAX_FRAME` bytes (one atomic write to the FIFO); commands for a run that
takes none any more are dropped. With INPUT hang-up=SECONDS, once its standard input ends
(the control plane hung up, or died) it closes the run's input, and stops the run if it has not
ended that many seconds later; it waits for that even when its own output has nowhere to go.

``send`` forwards its standard input the same way and exits 0, or 4 when the run takes no
commands (it has ended, or was started by a supervisor without them). ``forget`` removes the
folder of a run that has ended (exit 1 while it runs). Each exits 3 when there is no such run.
The log is looked at every few tens of milliseconds here, inside the sandbox, so the control
plane makes one call where it would poll. What ``o`` frames carry is the program's output:
untrusted.
"""

import json
import os
import struct
import sys
import threading
import time

MAX_FRAME = 512  # well under PIPE_BUF: one write, never interleaved with another writer's
MAX_PAYLOAD = MAX_FRAME - 3
READ = 1 << 20
HEARTBEAT = 5.0
STDERR_TAIL = 8192
QUICK, SLOW = 0.01, 0.05  # seconds between looks: within a second of output, and after


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    """Commands for the supervisor: ``kind`` with ``payload``, split into frames that fit."""
    if kind != b"d":
        return kind + struct.pack(">H", len(payload)) + payload
    return b"".join(b"d" + struct.pack(">H", len(payload[i : i + MAX_PAYLOAD]))
                    + payload[i : i + MAX_PAYLOAD]
                    for i in range(0, len(payload), MAX_PAYLOAD))  # fmt: skip


def read_exactly(stream, n):
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def commands(stream):
    """Frames read from ``stream`` until it ends (or a malformed frame)."""
    while (header := read_exactly(stream, 3)) is not None:
        size = struct.unpack(">H", header[1:])[0]
        payload = read_exactly(stream, size)
        if payload is None or header[:1] not in b"dcrsk" or size > MAX_PAYLOAD:
            return
        yield header + payload


def open_fifo(run):
    """The run's command FIFO opened for writing, or None when nothing reads it."""
    try:
        fd = os.open(os.path.join(run, "input"), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENOENT: the run ended or is older; ENXIO: no supervisor reads it
        return None
    os.set_blocking(fd, True)
    return fd


def forward(run, stream):
    """Write every frame of ``stream`` to the run's FIFO; False if the run takes none."""
    fd = open_fifo(run)
    if fd is None:
        return False
    try:
        for one in commands(stream):
            os.write(fd, one)
    except BrokenPipeError:
        return False
    finally:
        os.close(fd)
    return True


def exit_code(run):
    try:
        with open(os.path.join(run, "exit")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def out(kind, payload):
    sys.stdout.buffer.write(kind + struct.pack(">I", len(payload)) + payload)
    sys.stdout.buffer.flush()


def idle_seconds(run):
    """Whole seconds since the log or the standard error last changed (0: neither exists)."""
    times = []
    for name in ("log", "stderr"):
        try:
            times.append(os.stat(os.path.join(run, name)).st_mtime)
        except OSError:
            pass
    return int(time.time() - max(times)) if times else 0


def stderr_tail(run):
    try:
        with open(os.path.join(run, "stderr"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - STDERR_TAIL))
            return f.read()
    except OSError:
        return b""


def stamp(path):
    """The size and modification time of ``path`` (not followed if it is a link), or None."""
    if path is None:
        return None
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return "%d:%d" % (info.st_size, info.st_mtime_ns)


def stream(run, cursor, timeout, limit, status=False, watched=None):
    """Send the log from ``cursor`` until the run ends, ``timeout`` passes or ``limit``; with
    ``status``, its quiet time now and then, the ``watched`` file's stamp as it changes, and
    the end of its standard error."""
    deadline = None if timeout < 0 else time.monotonic() + timeout
    log = None if cursor < 0 else open(os.path.join(run, "log"), "rb")
    sent, last, said, seen = 0, time.monotonic(), None, stamp(watched)
    if log is not None:
        log.seek(cursor)
    while True:
        code = exit_code(run)  # first: every byte read after it is there is the whole log
        data = b""
        if log is not None:
            want = READ if not limit else min(READ, limit - sent)
            data = log.read(want) if want > 0 else b""
            if data:
                out(b"o", data)
                last = said = time.monotonic()
                sent += len(data)
                cursor += len(data)
                if not limit or sent < limit:
                    continue  # more may be waiting
        if limit and sent >= limit:
            if code is not None and log is not None and log.tell() < os.fstat(log.fileno()).st_size:
                code = None  # said only with the whole log: the caller reads on for the rest
            break
        if code is not None:
            break
        now_seen = stamp(watched) if status else None
        if status and (said is None or time.monotonic() - said >= HEARTBEAT
                       or now_seen != seen):
            out(b"q", json.dumps({"idle": idle_seconds(run), "watched": now_seen}).encode())
            said, seen = time.monotonic(), now_seen
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            break
        nap = QUICK if time.monotonic() - last < 1 else SLOW
        time.sleep(nap if left is None else min(nap, left))
    if status and code is not None:
        out(b"e", stderr_tail(run))
    out(b"x", json.dumps({"exit": code, "cursor": max(cursor, 0)}).encode())


def main():
    run, mode = sys.argv[1], sys.argv[2]
    if not os.path.isdir(run):
        sys.stderr.write("no run %s\n" % os.path.basename(run))
        sys.exit(3)
    if mode == "send":
        sys.exit(0 if forward(run, sys.stdin.buffer) else 4)
    if mode == "forget":
        if exit_code(run) is None:
            sys.exit("run %s has not ended" % os.path.basename(run))
        import shutil

        shutil.rmtree(run)
        return
    cursor, timeout, limit, take_input = sys.argv[3:7]
    status = sys.argv[7:8] == ["status"]
    watched = sys.argv[8] if status and len(sys.argv) > 8 else None
    hang_up = None
    grace = float(take_input[8:]) if take_input.startswith("hang-up=") else None
    if take_input != "0":
        hang_up = threading.Thread(target=forward_then_hang_up,
                                   args=(run, sys.stdin.buffer, grace), daemon=True)  # fmt: skip
        hang_up.start()
    try:
        stream(run, int(cursor), float(timeout), int(limit), status, watched)
    except BrokenPipeError:  # whoever followed went away: hang up if asked, as its input ends
        if hang_up is not None and grace is not None:
            hang_up.join()
    os._exit(0)  # the input's thread may be waiting for a frame that will never come


def forward_then_hang_up(run, stream, grace):
    """Forward ``stream``; once it ends, with a ``grace`` (seconds), close the run's input and
    stop the run if it has not ended by then."""
    forward(run, stream)
    if grace is None:
        return
    fd = open_fifo(run)
    if fd is None:
        return
    try:
        os.write(fd, frame(b"c"))
        deadline = time.monotonic() + grace
        while exit_code(run) is None and time.monotonic() < deadline:
            time.sleep(SLOW)
        if exit_code(run) is None:
            os.write(fd, frame(b"k"))
    except BrokenPipeError:
        pass  # it ended meanwhile
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
