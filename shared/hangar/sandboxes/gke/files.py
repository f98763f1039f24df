"""Files into a ``gke://`` sandbox's pod (:mod:`hangar.sandboxes.gke`): ``put_file`` as one
streamed exec, with the chunked path as its fallback.

- One exec streams the whole file and renames it into place only once all of it came: of a
  known size (bytes, a file that seeks) through ``head -c N`` and a size check
  (:data:`PUT_SIZED`), else framed (:data:`PUT_FRAMED`): a stream cut short never leaves a
  short file at the target.
- When that exec breaks off (SandboxUnavailable: a connection dropped mid-way) and the data can
  be read again, it is written again in chunks of :data:`PUT_CHUNK_BYTES`, each its own exec
  writing at its offset into a temp file of hangar's beside the target (:data:`PUT_PIECE`; a
  chunk that breaks off is tried again, up to :data:`PUT_TRIES` times), then one exec checks
  the size, gives it the mode and renames it into place (:data:`PUT_DONE`), removing what the
  broken exec left. A stream that cannot be read again fails (its leftovers removed, best
  effort), the target as it was.

Every command runs as the put's user; nothing here imports the client.
"""

from __future__ import annotations

import io
import logging
import secrets
from collections.abc import Iterator, Sequence
from typing import BinaryIO, Protocol, cast

from hangar.errors import SandboxError, SandboxUnavailable
from hangar.sandboxes import ExecResult, SandboxUser, Stdin, stderr_tail
from hangar.sandboxes.gke.podexec import chunks

__all__ = ["PUT_CHUNK_BYTES", "PUT_TRIES", "put_file"]

logger = logging.getLogger(__name__)

PUT_TRIES = 3
"""Execs of one chunk of a chunked put before it gives up."""
_PYTHON = ["python3", "-I", "-S", "-c"]


class Exec(Protocol):
    """The backend's ``exec`` (:meth:`hangar.sandboxes.gke.GkeSandboxes.exec`)."""

    def __call__(self, sandbox_id: str, argv: Sequence[str], *, stdin: Stdin = None,
                 timeout: float | None = None, user: SandboxUser = SandboxUser.AGENT
                 ) -> ExecResult: ...  # fmt: skip


def put_file(exec_: Exec, sandbox_id: str, path: str, data: bytes | BinaryIO, *, mode: int,
             user: SandboxUser) -> None:  # fmt: skip
    """Write ``data`` (a file from its current position) to ``path`` as ``user``, parents
    made, replaced atomically (the module's docstring). SandboxError when the sandbox refuses
    it; SandboxUnavailable when the connection breaks and the data cannot be read again, or a
    chunk keeps breaking off."""
    octal = format(mode & 0o7777, "o")
    size = size_left(data)
    start = 0 if size is None or isinstance(data, bytes | bytearray | memoryview) \
        else data.tell()  # fmt: skip
    stdin: Stdin = data
    if size is None:
        argv = [*_PYTHON, PUT_FRAMED, path, octal]
        stdin = framed(cast(BinaryIO, data))
    else:
        argv = ["/bin/sh", "-c", PUT_SIZED, "sh", path, octal, str(size)]
    try:
        result = exec_(sandbox_id, argv, stdin=stdin, user=user)
    except SandboxUnavailable as exc:
        if size is None:
            _best_effort(exec_, sandbox_id, [*_PYTHON, CLEAN_PUTS, path], user)
            raise
        logger.warning("writing %s in sandbox %s in one exec broke off (%s); writing it in "
                       "chunks", path, sandbox_id, exc.message)  # fmt: skip
        _put_chunks(exec_, sandbox_id, path, data, start, size, octal, user)
        return
    _check(result, sandbox_id, path)


def _put_chunks(exec_: Exec, sandbox_id: str, path: str, data: bytes | BinaryIO, start: int,
                size: int, octal: str, user: SandboxUser) -> None:  # fmt: skip
    """Write ``size`` bytes of ``data`` (from ``start``) to ``path`` in chunks (the module's
    docstring). A failure removes the temp file (best effort), ``path`` as it was."""
    temp = f"{path}.hangar-put-{secrets.token_hex(4)}"
    try:
        for offset in range(0, max(size, 1), PUT_CHUNK_BYTES):
            part = piece(data, start, offset, PUT_CHUNK_BYTES)
            argv = [*_PYTHON, PUT_PIECE, temp, str(offset), str(len(part))]
            _check(_tried(exec_, sandbox_id, argv, part, user), sandbox_id, path)
        argv = [*_PYTHON, PUT_DONE, temp, path, str(size), octal]
        _check(_tried(exec_, sandbox_id, argv, None, user), sandbox_id, path)
    except SandboxError:
        _best_effort(exec_, sandbox_id, ["rm", "-f", "--", temp], user)
        raise


def _tried(exec_: Exec, sandbox_id: str, argv: Sequence[str], stdin: bytes | None,
           user: SandboxUser) -> ExecResult:  # fmt: skip
    """One step of a chunked put (each can be run again), tried up to :data:`PUT_TRIES` times
    while its exec breaks off."""
    for _ in range(PUT_TRIES - 1):
        try:
            return exec_(sandbox_id, argv, stdin=stdin, user=user)
        except SandboxUnavailable as exc:
            logger.info("a chunk of a put in sandbox %s broke off (%s); again", sandbox_id,
                        exc.message)  # fmt: skip
    return exec_(sandbox_id, argv, stdin=stdin, user=user)


def _check(result: ExecResult, sandbox_id: str, path: str) -> None:
    if not result.ok:
        message = f"cannot write {path} in sandbox {sandbox_id}: {stderr_tail(result.stderr)}"
        raise SandboxError(message, sandbox_id=sandbox_id, path=path)


def _best_effort(exec_: Exec, sandbox_id: str, argv: Sequence[str], user: SandboxUser) -> None:
    """Clean up after a put that failed: a failure here is logged, never raised."""
    try:
        exec_(sandbox_id, argv, user=user, timeout=60)
    except SandboxError as exc:
        logger.warning("cannot clean up after a put in sandbox %s: %s", sandbox_id, exc.message)


# -- what runs in the pod ------------------------------------------------------------------

PUT_SIZED = (
    'set -e; t="$1.hangar-put.$$"; trap \'rm -f -- "$t"\' EXIT; '
    'mkdir -p -- "$(dirname -- "$1")"; head -c "$3" > "$t"; n=$(wc -c < "$t"); '
    '[ "$n" -eq "$3" ] || { echo "short write: $n of $3 bytes" >&2; exit 1; }; '
    'chmod -- "$2" "$t"; mv -fT -- "$t" "$1"; trap - EXIT'
)
"""``put_file`` of data whose size is known, in one exec: ``sh -c PUT_SIZED sh PATH MODE SIZE``
with the bytes on stdin, written beside the target and renamed into place only when all
``SIZE`` bytes came (a stream cut short leaves the target as it was)."""

CLEAN_PUTS = r"""
import glob, os, sys
for left in glob.glob(glob.escape(sys.argv[1]) + ".hangar-put.*"):
    try:
        os.unlink(left)
    except OSError:
        pass
"""
"""``python3 -I -S -c CLEAN_PUTS PATH``: remove the temp files of one-exec puts of ``PATH``
(``PATH.hangar-put.PID``) that a cut connection killed before they could remove their own."""

PUT_FRAMED = r"""
import os, sys
path, mode = sys.argv[1], int(sys.argv[2], 8)
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
temp = "%s.hangar-put.%d" % (path, os.getpid())
fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
def need(n):
    got = bytearray()
    while len(got) < n:
        part = os.read(0, min(n - len(got), 1 << 20))
        if not part:
            raise EOFError
        got += part
    return memoryview(got)
try:
    while True:
        n = int(bytes(need(8)))
        if n == 0:
            break
        data = need(n)
        while data:
            data = data[os.write(fd, data):]
    os.close(fd)
    os.chmod(temp, mode)
    os.replace(temp, path)
except BaseException as e:
    try:
        os.unlink(temp)
    except OSError:
        pass
    sys.stderr.write("cannot write %s: %s\n" % (path, "the stream ended before the file did"
                                                 if isinstance(e, EOFError) else e))
    sys.exit(1)
"""
"""``put_file`` of a stream of unknown size, in one exec: ``python3 -I -S -c PUT_FRAMED PATH
MODE`` with the bytes framed on stdin (:func:`framed`), written beside the target and renamed
into place only at the end frame (a stream cut short leaves the target as it was)."""


def framed(data: BinaryIO) -> Iterator[bytes]:
    """``data`` as :data:`PUT_FRAMED` reads it: each chunk after its length (8 decimal
    digits), then a zero length."""
    for chunk in chunks(data):
        yield f"{len(chunk):08d}".encode() + chunk
    yield b"00000000"


PUT_CHUNK_BYTES = 8 << 20
"""Bytes per exec of the chunked ``put_file`` (:data:`PUT_PIECE`)."""

PUT_PIECE = r"""
import os, sys
path, offset, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
os.lseek(fd, offset, os.SEEK_SET)
got = 0
while True:
    data = memoryview(os.read(0, 1 << 20))
    if not data:
        break
    got += len(data)
    while data:
        data = data[os.write(fd, data):]
os.close(fd)
if got != size:
    sys.stderr.write("short chunk: %d of %d bytes at %d\n" % (got, size, offset))
    sys.exit(1)
"""
"""One chunk of a chunked ``put_file``: ``python3 -I -S -c PUT_PIECE TEMP OFFSET SIZE`` writes
stdin at ``OFFSET`` of ``TEMP`` (made 0600, parents too); exit 1 unless ``SIZE`` bytes came.
Writing one chunk again writes the same bytes at the same place."""

PUT_DONE = r"""
import os, sys
temp, path, size, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4], 8)
have = os.path.getsize(temp)
if have != size:
    os.unlink(temp)
    sys.stderr.write("the chunks make %d bytes, not %d\n" % (have, size))
    sys.exit(1)
os.chmod(temp, mode)
os.replace(temp, path)
""" + CLEAN_PUTS.replace("sys.argv[1]", "path")
"""The end of a chunked ``put_file``: ``python3 -I -S -c PUT_DONE TEMP PATH SIZE MODE`` checks
that ``TEMP`` holds ``SIZE`` bytes, then gives it ``MODE`` (octal) and renames it to ``PATH``,
and removes what one-exec puts of ``PATH`` cut short left (:data:`CLEAN_PUTS`)."""


def size_left(data: bytes | BinaryIO) -> int | None:
    """How many bytes ``put_file`` would send of ``data`` (from a file's current position), or
    None when that cannot be known without reading it (a stream that cannot seek)."""
    if isinstance(data, bytes | bytearray | memoryview):
        return len(data)
    try:
        if not data.seekable():
            return None
        here = data.tell()
        end = data.seek(0, io.SEEK_END)
        data.seek(here)
    except (OSError, ValueError, AttributeError):
        return None
    return end - here


def piece(data: bytes | BinaryIO, start: int, offset: int, size: int) -> bytes:
    """``size`` bytes of re-readable ``data`` at ``offset`` past ``start`` (a file's position
    when the put began)."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data[offset : offset + size])
    data.seek(start + offset)
    parts: list[bytes] = []
    left = size
    while left > 0 and (part := data.read(left)):
        parts.append(part)
        left -= len(part)
    return b"".join(parts)
