"""Direct checkpoints on ``gke://`` sandboxes (the Kubernetes stand-in), GCS behind the verifying
front, URLs signed through the IAM stand-in: the sandbox seals and uploads, the control plane
grants and checks (:mod:`hangar.checkpoints.direct`)."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from hangar.checkpoints.direct import Grant
from hangar.errors import CheckpointError, HangarError
from hangar.sandboxes import ExecResult, SandboxUser

from tests.direct_rig import REPO, World, direct_world

pytestmark = [pytest.mark.sandbox]

WORK = """set -e
echo 'def g():\n    return 42' > module_1.py && git add -A
git -c user.name=a -c user.email=a@example.com commit -qm 'agent commit'
echo 'uncommitted' >> module_2.py
head -c 300000 /dev/urandom > blob.bin && echo note > notes.txt
mkdir -p ~/.claude/projects/app && echo '{"turn": 1}' > ~/.claude/projects/app/conv.jsonl
"""
STATE = """cd /workspace/app && git log --format=%s && git status --porcelain=v1 | sort
sha256sum blob.bin notes.txt module_1.py module_2.py && cat ~/.claude/projects/app/conv.jsonl"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with direct_world(tmp_path_factory.mktemp("direct")) as running:
        yield running


def test_a_direct_checkpoint_restores_in_a_fresh_pod_and_no_byte_of_it_passes_the_control_plane(
    world: World,
) -> None:
    first, base = world.sandbox()
    world.sh(first, WORK)
    before = world.blobs.bytes
    checkpoint = world.take(first, base)
    assert world.blobs.bytes == before  # every byte went straight to the bucket
    assert checkpoint.format == 2 and checkpoint.written > 300000
    assert checkpoint.parts[0].key in checkpoint.packs
    assert set(checkpoint.packs) <= set(world.objects())

    second, _ = world.sandbox()
    before = world.blobs.bytes
    report = world.restorer.restore(world.session.id, second, REPO)
    assert report is not None and report.checkpoint.id == checkpoint.id and not report.skipped
    assert world.blobs.bytes == before
    assert world.sh(second, STATE, cwd="/") == world.sh(first, STATE, cwd="/")

    # The next turn's checkpoint reuses what the bucket holds: only the edit travels.
    world.sh(first, "echo 'one more line' >> notes.txt")
    again = world.take(first, base)
    assert again.source == checkpoint.id and 0 < again.written < 20000


def _tampering(world: World, tamper: Any) -> Iterator[None]:
    """Runs ``tamper(keys written)`` on the bucket right after the next checkpoint's exec."""
    exec_ = world.sandboxes.exec

    def exec_then_tamper(sandbox_id: str, argv: list[str], **options: Any) -> Any:
        before = set(world.objects())
        result = exec_(sandbox_id, argv, **options)
        if "checkpoint" in argv:
            tamper(sorted(set(world.objects()) - before))
        return result

    world.sandboxes.exec = exec_then_tamper
    try:
        yield
    finally:
        del world.sandboxes.exec


@pytest.mark.parametrize("how", ["skipped", "altered"])
def test_an_upload_the_sandbox_skips_or_alters_leaves_no_checkpoint_recorded(
    world: World, how: str
) -> None:
    sandbox, base = world.sandbox()
    world.sh(sandbox, WORK)
    kept = world.db.list_checkpoints(world.session.id)
    before = set(world.objects())

    def tamper(written: list[str]) -> None:
        assert written, "the sandbox wrote nothing"
        if how == "skipped":
            world.blobs.blobs.delete(written[0])
        else:
            world.blobs.blobs.put(written[0], b"not what the sandbox sealed")

    with pytest.raises(CheckpointError, match="sandbox says it wrote|not what the sandbox"):
        for _ in _tampering(world, tamper):
            world.take(sandbox, base)
    assert world.db.list_checkpoints(world.session.id) == kept
    assert set(world.objects()) == before  # every granted key deleted



SNOOP = r"""
import ctypes, hashlib, json, os, stat, sys, time
# The agent's side of a checkpoint: all it can read, round after round, until STOP exists.
STOP, ME, MINE = sys.argv[1], os.getuid(), str(os.getpid())
TOPS = ('/hangar', '/tmp', '/var/tmp', '/dev/shm', '/run', '/workspace', '/root')
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
digests, pieces, stamps, traced, breaches = set(), [], {}, set(), []
tries = {'foreign': 0, 'denied': 0, 'checkpoint_rounds': 0}

def keep(data):
    if data and hashlib.sha256(data).digest() not in digests:
        digests.add(hashlib.sha256(data).digest())
        pieces.append(data)

def read(path, limit=1 << 20):
    try:  # never blocks: a pipe or FIFO with nothing in it reads as nothing
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return b''
    finally:
        os.close(fd)

def breach(what):
    if what not in breaches:
        breaches.append(what)

def has_memory(base):
    stat_ = read(base + '/stat') or b''
    fields = stat_[stat_.rfind(b')') + 2:].split()
    return len(fields) > 20 and fields[20] != b'0'  # vsize: 0 for a zombie

def process(pid):
    base = '/proc/' + pid
    try:
        foreign = os.stat(base).st_uid != ME
    except OSError:
        return False
    cmdline = read(base + '/cmdline') or b''  # anyone's: world-readable
    keep(cmdline)
    for name in ('environ', 'mem', 'maps', 'fd', 'cwd'):
        path = base + '/' + name
        try:
            got = os.listdir(path) if name in ('fd', 'cwd') else read(path, 1 << 16)
        except OSError:
            got = None
        if got is None and foreign:
            tries['denied'] += 1
        elif foreign and (got or name == 'mem' and has_memory(base)):
            breach('%s of %r' % (name, cmdline[:80]))  # (a zombie's opens, but holds nothing)
        if name == 'environ' or name == 'maps':
            keep(got)
        elif name == 'fd' and got and pid != MINE:
            for fd in got:
                keep(read(path + '/' + fd, 1 << 16))
    if foreign:
        tries['foreign'] += 1
        if pid not in traced:  # ptrace, once a process: the uid split must refuse it
            traced.add(pid)
            if libc.ptrace(16, int(pid), None, None) == 0:
                libc.ptrace(17, int(pid), None, None)
                breach('ptrace of %r' % cmdline[:80])
    return foreign and b'\0checkpoint\0' in cmdline

def files(top):
    for folder, _, names in os.walk(top):
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if stat.S_ISREG(st.st_mode) and stamps.get(path) != stamp:
                stamps[path] = stamp
                keep(read(path))

rounds, first, last = 0, time.time(), 0.0
while not os.path.exists(STOP):
    pids = [p for p in os.listdir('/proc') if p.isdigit()]
    if any([process(pid) for pid in pids]):
        tries['checkpoint_rounds'] += 1
    for top in TOPS:
        files(top)
    for folder in ('/hangar', '/hangar/tmp'):  # hangar's own folders, the staging one too
        try:
            os.listdir(folder)
            breach('listed ' + folder)
        except OSError:
            pass
    rounds, last = rounds + 1, time.time()
    if rounds == 1:
        sys.stdout.write('started\n')
        sys.stdout.flush()
report = dict(tries, rounds=rounds, first=first, last=last, breaches=breaches)
sys.stdout.buffer.write(json.dumps(report).encode() + b'\n' + b'\0'.join(pieces))
"""
"""Run as the agent (``python3 -I -c SNOOP STOP``) while a checkpoint runs: each round reads
every process's cmdline, environ, maps and open files (non-blocking), tries its mem, fd and
cwd and ptrace, reads every file under the agent-reachable folders (again when it changed)
and tries to list hangar's folders and its staging folder. It prints ``started`` after its
first round; once STOP exists, one JSON line (rounds, first and last times, how often a
process of another uid was tried and refused, in how many rounds the checkpoint script was
there, every breach) and then every distinct thing it read."""


class _Started:
    """The snoop's stdout: kept whole, ``started`` set once its first line came."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.started = threading.Event()

    def write(self, data: bytes) -> int:
        self.data += data
        if self.data.startswith(b"started\n"):
            self.started.set()
        return len(data)

    def flush(self) -> None:
        pass


def test_the_agent_cannot_read_the_checkpoints_keys_at_any_moment_of_a_checkpoint(
    world: World,
) -> None:
    sandbox, base = world.sandbox()
    world.sh(sandbox, WORK)
    world.take(sandbox, base)  # the next take's grant holds this one's key and GETs as well
    world.sh(sandbox, "head -c 30000000 /dev/urandom > big.bin")  # a take long enough to watch
    stop = "/tmp/snoop.stop"
    snooped = _Started()
    ended: list[Any] = []

    def snoop() -> None:
        try:
            ended.append(world.sandboxes.exec(sandbox, ["python3", "-I", "-c", SNOOP, stop],
                                              stdout=snooped, timeout=120))  # fmt: skip
        except HangarError as exc:
            ended.append(exc)

    snooper = threading.Thread(target=snoop, daemon=True)
    snooper.start()
    assert snooped.started.wait(60), ended
    grants: list[tuple[Any, Any]] = []
    exec_ = world.sandboxes.exec

    def exec_keeping_the_grant(sandbox_id: str, argv: list[str], **options: Any) -> Any:
        if "checkpoint" in argv:
            grants.append((options.get("stdin"), options.get("user")))
        return exec_(sandbox_id, argv, **options)

    world.sandboxes.exec = exec_keeping_the_grant
    try:
        began = time.time()
        world.take(sandbox, base)
        done = time.time()
    finally:
        del world.sandboxes.exec
        world.sandboxes.exec(sandbox, ["touch", stop])
        snooper.join(60)
    assert not snooper.is_alive() and ended and isinstance(ended[0], ExecResult), ended
    assert ended[0].ok, ended[0].stderr.decode()
    report, _, seen = bytes(snooped.data).removeprefix(b"started\n").partition(b"\n")
    found = json.loads(report)
    assert found["breaches"] == []
    assert found["first"] < began and found["last"] > done  # it ran from before the take to after it
    assert found["checkpoint_rounds"] > 0  # it saw the checkpoint script, and was refused
    assert found["denied"] > found["foreign"] > 0
    assert b"return 42" in seen and b"HOME=/root" in seen  # it read what the agent may read

    [(stdin, user)] = grants
    assert user is SandboxUser.HANGAR and isinstance(stdin, bytes)
    grant = Grant.model_validate_json(stdin)
    assert grant.source is not None
    keys = [grant.data_key, grant.source.data_key]
    urls = [put.url for put in grant.puts] + [get.url for get in grant.source.gets.values()]
    signatures = [parse_qs(urlsplit(url).query)["X-Goog-Signature"][0] for url in urls]
    secrets = [s.encode() for s in keys + signatures] + [base64.b64decode(k) for k in keys]
    for secret in secrets:
        assert secret not in seen
