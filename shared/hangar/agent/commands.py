"""The signed command channel between the control plane and a live turn's driver. Standard
library only (imported by the in-sandbox driver under ``python3 -I -S`` and by the control plane).

A run's control folder CTL is hangar's (the uid split keeps the agent out of it). It holds::

    tmp/        hangar writes each command here first (``tmp/<id>.json``, mode 0600) ...
    in/         ... and links it in as ``in/<seq>.json``, then unlinks the tmp copy: a command
                appears in ``in/`` whole or not at all, and never replaces one already there
    acks        the driver's answers, one JSON line each, appended (O_APPEND) in one write each

:func:`create` makes ``tmp/`` and ``in/`` (mode 0700). A command is one JSON object::

    {"seq": N, "kind": "steer" | "interrupt" | "decide", "id": ID, "body": {...}, "mac": HEX}

``seq`` counts from 1 with no gaps, per run; ``id`` is random (:func:`write_command` makes it);
``mac`` is HMAC-SHA256 under the run's key (32 random bytes, :func:`new_key`) of the canonical
JSON (sorted keys, no spaces, ASCII) of ``[COMMAND_TAG, run_id, FIELDS]``, FIELDS being the
object without ``mac``. An answer is one line::

    {"seq": N, "id": ID, "status": "delivered" | "refused" | "turn_ended", "detail": TEXT,
     "mac": HEX}

signed the same way under :data:`ACK_TAG`, so no command's mac passes as an answer's (nor one
run's as another's). A refusal of a file that did not verify has ``seq`` and ``id`` null (what
it claims is not to be believed) and names the file in ``detail``.

The driver's :class:`Inbox` takes commands in ``seq`` order: each file is read (at most
:data:`MAX_COMMAND` bytes; a larger one, or anything but a regular file, is refused unread) and
removed; one unsigned, wrongly signed, malformed or replayed (its ``seq`` taken or held already,
or its ``id`` seen) is refused with a signed answer and changes nothing. A command past a gap
in ``seq`` is held until the gap is filled, so commands landing out of order are still taken in
order; hangar gives out ``seq`` without gaps, and a gap left by a command that failed to land
is given up after :data:`GAP_SECONDS`.

Ending a turn: :meth:`Inbox.close` renames ``in/`` to ``in.closed`` first, so a later
:func:`write_command` fails at once with :class:`NotLanded`; then it drains what had landed
and removes the folder (draining again until the removal succeeds: once it is removed no link
into it can succeed), and returns those commands with any held ones, in ``seq`` order, for the
driver to carry out or answer ``turn_ended``. So a command that landed is taken exactly once,
by :meth:`Inbox.take` or by :meth:`Inbox.close`, and one that did not land is known at once.

Answers may repeat an id (a replayed copy of a delivered command is refused under the same
``seq`` and ``id``): the first answer to an id is the one that counts.
"""

import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
import sys
import time
from collections import namedtuple

COMMAND_TAG = "hangar/command"
ACK_TAG = "hangar/ack"
EVENT_TAG = "hangar/event"
"""The domain tag of the driver's own lines in the run log (:func:`signed_event`)."""
KINDS = ("steer", "interrupt", "decide")
STATUSES = ("delivered", "refused", "turn_ended")
KEY_BYTES = 32
MAX_COMMAND = 100 << 20
"""The largest command file read; a larger one is refused without being read (a steer of
the largest message hangar takes, 16 MiB, escaped as JSON, fits)."""
MAX_ACK_READ = 4 << 20
"""The most of ``acks`` one :func:`read_acks` reads; the rest waits for the next call."""
GAP_SECONDS = 5.0
"""How long a command past a gap in ``seq`` is held for the commands of the gap: a writer that
gave out a ``seq`` and failed to land it leaves a gap that would otherwise hold every later
command for good. A command of the gap that lands later is refused as replayed."""
PR_SET_DUMPABLE = 4
FIELDS = ("seq", "kind", "id", "body")
ACK_FIELDS = ("seq", "id", "status", "detail")

Command = namedtuple("Command", "seq kind id body")
Command.__doc__ = """A command that verified: its ``seq``, ``kind``, ``id`` and ``body`` (a dict)."""

Acks = namedtuple("Acks", "answers offset ignored")
Acks.__doc__ = """What :func:`read_acks` found: ``answers`` (dicts of seq, id, status, detail,
each signed by the run's key), the ``offset`` to read from next, and how many lines it
``ignored`` (unsigned, wrongly signed or malformed)."""


class ChannelError(Exception):
    """The command channel failed."""

    code = "command_channel"


class NotLanded(ChannelError):
    """A command could not be put into ``in/``: the turn is over (or the run's folder is gone).
    Nothing of it is left behind."""

    code = "turn_ended"


class BadKey(ChannelError):
    """A key file is missing, unreadable or not :data:`KEY_BYTES` bytes."""

    code = "bad_key"


def new_key() -> bytes:
    """A fresh run key: :data:`KEY_BYTES` random bytes."""
    return secrets.token_bytes(KEY_BYTES)


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign(key, tag, run_id, fields):
    """The hex HMAC-SHA256 of ``[tag, run_id, fields]`` in canonical JSON."""
    return hmac.new(key, canonical([tag, run_id, fields]), hashlib.sha256).hexdigest()


def verify(key, tag, run_id, fields, mac):
    return isinstance(mac, str) and hmac.compare_digest(sign(key, tag, run_id, fields), mac)


def create(ctl):
    """Make CTL's ``tmp/`` and ``in/`` (mode 0700); idempotent."""
    for name in ("tmp", "in"):
        os.makedirs(os.path.join(ctl, name), mode=0o700, exist_ok=True)


def command_bytes(key: bytes, run_id: str, seq: int, kind: str, body: dict) -> "tuple[str, bytes]":
    """Command ``seq`` signed: ``(id, bytes)``, the bytes what lands in ``in/``. ValueError
    for a bad ``seq``, ``kind`` or ``body``, or a command over :data:`MAX_COMMAND` bytes."""
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise ValueError("seq must be a positive integer")
    if kind not in KINDS or not isinstance(body, dict):
        raise ValueError("kind must be one of %s and body a dict" % (KINDS,))
    fields = {"seq": seq, "kind": kind, "id": secrets.token_hex(16), "body": body}
    data = canonical(dict(fields, mac=sign(key, COMMAND_TAG, run_id, fields)))
    if len(data) > MAX_COMMAND:
        raise ValueError("command is over %d bytes" % MAX_COMMAND)
    return fields["id"], data


def signed_event(key, run_id, fields):
    """``fields`` (a dict with ``type`` first, ``hangar.*``) as one run-log line, signed under
    :data:`EVENT_TAG` in ``mac``: the run log carries the agent's CLI's output too, so the
    control plane believes a ``hangar.*`` line only when it verifies (:func:`verify_event`)."""
    return canonical_line(dict(fields, mac=sign(key, EVENT_TAG, run_id, fields)))


def canonical_line(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def verify_event(key: bytes, run_id: str, value: dict) -> "dict | None":
    """The fields of a run-log line the driver signed (without ``mac``), or None."""
    if not isinstance(value, dict) or not isinstance(value.get("mac"), str):
        return None
    fields = {k: v for k, v in value.items() if k != "mac"}
    return fields if verify(key, EVENT_TAG, run_id, fields, value["mac"]) else None


def write_command(ctl, key, run_id, seq, kind, body):
    """Sign and land command ``seq`` in CTL's ``in/``; its path there. Raises
    :class:`NotLanded` when ``in/`` (or CTL) is gone, ``FileExistsError`` when ``seq`` is
    there already (not taken yet); ``ValueError`` as :func:`command_bytes` does. On any
    failure the tmp copy is removed. (The control plane lands the same bytes by exec:
    :mod:`hangar.processes.control`.)"""
    command_id, data = command_bytes(key, run_id, seq, kind, body)
    tmp = os.path.join(ctl, "tmp", command_id + ".json")
    landed = os.path.join(ctl, "in", "%d.json" % seq)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileNotFoundError:
        raise NotLanded("the run's control folder is gone") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # A link, not a rename: it fails on a missing in/ as a rename would, and never
        # replaces a command that is there and not taken yet.
        os.link(tmp, landed)
    except FileNotFoundError:
        raise NotLanded("command %d came after the turn ended" % seq) from None
    finally:
        os.unlink(tmp)
    return landed


def read_acks(ctl, key, run_id, offset):
    """The answers in CTL's ``acks`` from byte ``offset`` on, as :data:`Acks`. Only whole
    lines are read (a line being written is left for the next call); lines not signed by
    ``key`` for ``run_id``, or malformed, are counted in ``ignored`` and skipped. A missing
    ``acks`` is no answers yet."""
    try:
        fd = os.open(os.path.join(ctl, "acks"), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return Acks([], offset, 0)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return Acks([], offset, 0)
        f.seek(offset)
        data = f.read(MAX_ACK_READ)
    return parse_acks(key, run_id, data, offset)


def parse_acks(key: bytes, run_id: str, data: bytes, offset: int) -> "Acks":
    """:func:`read_acks` of ``data``, the bytes of ``acks`` from ``offset`` on (at most
    :data:`MAX_ACK_READ` of them)."""
    end = data.rfind(b"\n") + 1
    if end == 0 and len(data) == MAX_ACK_READ:
        end = len(data)  # one line longer than a read: skipped as not an answer
    answers, ignored = [], 0
    for line in data[:end].splitlines():
        answer = parse_ack(key, run_id, line)
        if answer is None:
            ignored += 1
        else:
            answers.append(answer)
    return Acks(answers, offset + end, ignored)


def parse_ack(key, run_id, line):
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict) or set(value) != set(ACK_FIELDS) | {"mac"}:
        return None
    fields = {name: value[name] for name in ACK_FIELDS}
    if fields["status"] not in STATUSES or not verify(key, ACK_TAG, run_id, fields, value["mac"]):
        return None
    return fields


def parse_command(key, run_id, data):
    """The :data:`Command` in ``data``, or why it is refused: ``(command, None)`` or
    ``(None, reason)``."""
    try:
        value = json.loads(data)
    except ValueError:
        return None, "malformed"
    if not isinstance(value, dict) or set(value) != set(FIELDS) | {"mac"}:
        return None, "malformed"
    fields = {name: value[name] for name in FIELDS}
    seq, mac = fields["seq"], value["mac"]
    if (isinstance(seq, bool) or not isinstance(seq, int) or seq < 1
            or fields["kind"] not in KINDS or not isinstance(fields["id"], str)
            or not fields["id"] or not isinstance(fields["body"], dict)):  # fmt: skip
        return None, "malformed"
    if not isinstance(mac, str) or not mac:
        return None, "unsigned"
    if not verify(key, COMMAND_TAG, run_id, fields, mac):
        return None, "wrongly signed"
    return Command(seq, fields["kind"], fields["id"], fields["body"]), None


class Inbox:
    """The driver's side of CTL: takes commands from ``in/`` and appends answers to ``acks``.
    One per run, in one process (it remembers what it took)."""

    def __init__(self, ctl, key, run_id):
        self.ctl, self.key, self.run_id = ctl, key, run_id
        self.taken = 0  # the last seq taken
        self.held = {}  # seq -> Command past a gap
        self.since = {}  # seq -> when it was first held
        self.seen = set()  # ids taken or held
        self.closed = False

    def take(self):
        """The next commands in ``seq`` order (a list, maybe empty); each file in ``in/`` is
        removed, refusals answered. Empty once closed."""
        if self.closed:
            return []
        self.collect(os.path.join(self.ctl, "in"))
        now = time.monotonic()
        for seq in self.held:
            self.since.setdefault(seq, now)
        if self.held and self.taken + 1 not in self.held:
            first = min(self.held)
            if now - self.since[first] > GAP_SECONDS:  # the commands of the gap never came
                self.taken = first - 1
        ready = []
        while self.taken + 1 in self.held:
            self.taken += 1
            ready.append(self.held.pop(self.taken))
            self.since.pop(self.taken, None)
        return ready

    def close(self):
        """End the channel (see the module's docstring): rename ``in/`` away, drain it, remove
        it; return every command landed and not taken, held ones included, in ``seq`` order.
        Idempotent: later calls return nothing."""
        if self.closed:
            return []
        self.closed = True
        inbox, closed = os.path.join(self.ctl, "in"), os.path.join(self.ctl, "in.closed")
        try:
            os.rename(inbox, closed)
        except FileNotFoundError:
            pass  # closed before, by a driver that died after the rename: drain what is left
        while True:
            self.collect(closed)
            try:
                os.rmdir(closed)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                # a link that looked up in/ before the rename landed after the drain
        left = [self.held[seq] for seq in sorted(self.held)]
        self.held.clear()
        return left

    def answer(self, command, status, detail=""):
        """Append a signed answer to ``command`` (a :data:`Command`, or None for a file that
        did not verify) with ``status`` (one of :data:`STATUSES`) and ``detail``."""
        if status not in STATUSES:
            raise ValueError("status must be one of %s" % (STATUSES,))
        fields = {"seq": command.seq if command else None, "id": command.id if command else None,
                  "status": status, "detail": str(detail)}  # fmt: skip
        line = canonical(dict(fields, mac=sign(self.key, ACK_TAG, self.run_id, fields))) + b"\n"
        fd = os.open(os.path.join(self.ctl, "acks"),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)  # fmt: skip
        try:
            os.write(fd, line)  # one write: concurrent appends never interleave
        finally:
            os.close(fd)

    def collect(self, folder):
        """Read and remove every file in ``folder``: valid ones join ``held``, the rest are
        refused."""
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return
        for name in names:
            command, reason = self.read(os.path.join(folder, name))
            if command is None and reason is None:
                continue
            if reason is not None:
                self.answer(None, "refused", "%s: %s" % (reason, name))
            elif command.seq <= self.taken or command.seq in self.held or command.id in self.seen:
                self.answer(command, "refused", "replayed")
            else:
                self.held[command.seq] = command
                self.seen.add(command.id)

    def read(self, path):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None, None  # removed by someone else since the listing: nothing to answer
        except OSError:  # a link (ELOOP) or anything else that does not open
            remove(path)
            return None, "not a file"
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None, "not a file"
            if info.st_size > MAX_COMMAND:
                return None, "oversized"
            data = os.read(fd, MAX_COMMAND + 1)
        finally:
            os.close(fd)
            remove(path)
        if len(data) > MAX_COMMAND:  # grew after the fstat
            return None, "oversized"
        return parse_command(self.key, self.run_id, data)


def remove(path):
    try:
        os.unlink(path)
    except IsADirectoryError:
        try:
            os.rmdir(path)
        except OSError:
            pass  # a folder with something in it: refused again at each take, never read
    except FileNotFoundError:
        pass


def load_key(path):
    """Make this process non-dumpable (no core dump, no ptrace or /proc/PID/mem by its own
    uid), then read the run key at ``path`` and delete the file. Raises :class:`BadKey` when it
    is missing or not :data:`KEY_BYTES` bytes (the file is deleted either way, if there),
    ``OSError`` when the process cannot be made non-dumpable."""
    undumpable()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise BadKey("cannot open the key file: %s" % e.strerror) from None
    try:
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
        os.unlink(path)
    if len(key) != KEY_BYTES:
        raise BadKey("the key file does not hold %d bytes" % KEY_BYTES)
    return key


def undumpable():
    if not sys.platform.startswith("linux"):
        return  # prctl is Linux's; elsewhere (a developer's machine) there is no sandbox to guard
    import ctypes  # here, not at import: the control plane never needs it

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, "prctl(PR_SET_DUMPABLE): %s" % os.strerror(code))
