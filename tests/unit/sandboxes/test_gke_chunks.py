"""``put_file`` on ``gke://`` sandboxes when the connection drops: data that can be read again
is written again in chunks (each its own exec at its offset, then one exec that checks the
size and renames it into place), a chunk that drops is tried again, and a stream that cannot
be read again fails with the target left as it was. The drops are made on the client's side
of the stand-in's exec websocket, as a connection cut mid-way."""

from __future__ import annotations

import hashlib
import io
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hangar.errors import SandboxUnavailable
from hangar.sandboxes import SandboxSpec, SandboxUser
from hangar.sandboxes.gke import GkeSandboxes
from hangar.sandboxes.gke.files import PUT_CHUNK_BYTES
from hangar.testing.sandboxes import until_ready

from tests.unit.sandboxes.test_gke import sandboxes, sandboxes_settings, stand_in

__all__ = ["sandboxes", "sandboxes_settings", "stand_in"]  # fixtures, used by name

pytestmark = pytest.mark.sandbox

BIG = 1 << 20  # an exec sending more stdin than this is a big one


class Drops:
    """Every exec of ``backend`` counted (``opened``); those sending more than BIG bytes of
    stdin are numbered in order (0 first), and those numbered in ``doomed`` have their
    connection cut once ``after`` bytes of stdin went out."""

    def __init__(self, backend: GkeSandboxes, monkeypatch: pytest.MonkeyPatch,
                 doomed: set[int], after: int = 3 * BIG) -> None:  # fmt: skip
        self.doomed = doomed
        self.after = after
        self.opened = 0
        self.big = 0
        self.dropped = 0
        inner = backend._open_exec

        def open_exec(sandbox_id: str, pod: str) -> Any:
            ws = inner(sandbox_id, pod)
            self.opened += 1
            return _Cut(self, ws)

        monkeypatch.setattr(backend, "_open_exec", open_exec)


class _Cut:
    """An exec stream that :class:`Drops` may cut mid-way (as a connection that drops)."""

    def __init__(self, drops: Drops, ws: Any) -> None:
        self.drops = drops
        self.ws = ws
        self.sent = 0
        self.number: int | None = None

    def write_channel(self, channel: int, data: bytes) -> None:
        from websocket import WebSocketConnectionClosedException

        if channel == 0:
            self.sent += len(data)
            if self.number is None and self.sent > BIG:
                self.number, self.drops.big = self.drops.big, self.drops.big + 1
            if self.number in self.drops.doomed and self.sent > self.drops.after:
                self.drops.doomed.discard(self.number)
                self.drops.dropped += 1
                self.ws.sock.sock.shutdown(socket.SHUT_RDWR)  # both ways, as a cut cable
                raise WebSocketConnectionClosedException("the connection dropped")
        self.ws.write_channel(channel, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ws, name)


@pytest.fixture
def ready(sandboxes: GkeSandboxes) -> Iterator[str]:
    info = sandboxes.create(SandboxSpec(labels={"conformance": uuid.uuid4().hex}))
    until_ready(sandboxes, info.id)
    sandboxes.exec(info.id, ["true"])  # the pod found: only the puts below are counted
    yield info.id
    sandboxes.destroy(info.id)


def _digest(sandboxes: GkeSandboxes, sandbox_id: str, path: str) -> str:
    out = sandboxes.exec(sandbox_id, ["python3", "-c", "import hashlib, sys; print(hashlib."
                                      "sha256(open(sys.argv[1], 'rb').read()).hexdigest())",
                                      path]).stdout  # fmt: skip
    return out.decode().strip()


def test_a_fifty_megabyte_file_whose_connection_drops_is_written_again_in_chunks(
    sandboxes: GkeSandboxes, ready: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    source = tmp_path / "big.bin"
    block = os.urandom(BIG)
    with open(source, "wb") as out:
        for _ in range(50):
            out.write(block)
    want = hashlib.sha256(source.read_bytes()).hexdigest()
    chunks = -(-50 * BIG // PUT_CHUNK_BYTES)
    # The one streamed exec drops, then the third chunk's exec drops once.
    drops = Drops(sandboxes, monkeypatch, doomed={0, 3})
    with open(source, "rb") as data:
        sandboxes.put_file(ready, "/root/in/big.bin", data, mode=0o600)
    assert drops.dropped == 2
    assert drops.opened == 1 + chunks + 1 + 1  # the one exec, the chunks, a retry, the rename
    assert _digest(sandboxes, ready, "/root/in/big.bin") == want
    listing = sandboxes.exec(ready, ["stat", "-c", "%a %U %s %n", "/root/in/big.bin"]).stdout
    assert listing.decode().split() == ["600", "agent", str(50 * BIG), "/root/in/big.bin"]
    left = sandboxes.exec(ready, ["ls", "-A", "/root/in"]).stdout.decode().split()
    assert left == ["big.bin"]  # no temp file of the broken exec or of the chunks


def test_bytes_whose_connection_drops_replace_a_file_of_hangars_in_chunks(
    sandboxes: GkeSandboxes, ready: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandboxes.put_file(ready, "/hangar/tmp/state", b"old", user=SandboxUser.HANGAR)
    data = os.urandom(10 * BIG)
    Drops(sandboxes, monkeypatch, doomed={0})
    sandboxes.put_file(ready, "/hangar/tmp/state", data, mode=0o640, user=SandboxUser.HANGAR)
    got = io.BytesIO()
    assert sandboxes.get_file(ready, "/hangar/tmp/state", got, user=SandboxUser.HANGAR) == len(data)
    assert got.getvalue() == data


class _Stream(io.RawIOBase):
    """A stream that cannot seek (a pipe, a socket): read once or not at all."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self.data.readinto(buffer)


def test_a_stream_that_cannot_be_read_again_fails_and_leaves_the_file_as_it_was(
    sandboxes: GkeSandboxes, ready: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandboxes.put_file(ready, "/root/kept.txt", b"before\n")
    drops = Drops(sandboxes, monkeypatch, doomed={0})
    with pytest.raises(SandboxUnavailable):
        sandboxes.put_file(ready, "/root/kept.txt", io.BufferedReader(_Stream(os.urandom(8 * BIG))))
    assert drops.dropped == 1 and drops.opened == 2  # the put, then its clean-up
    monkeypatch.undo()
    assert sandboxes.exec(ready, ["cat", "/root/kept.txt"]).stdout == b"before\n"
    left = sandboxes.exec(ready, ["ls", "-A", "/root"]).stdout.decode().split()
    assert [name for name in left if "hangar-put" in name] == []
