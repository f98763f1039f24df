"""Pruning, archive and delete never sweep a pack a kept checkpoint needs, and leave none that
no checkpoint needs: a property test over random sequences of format-2 checkpoints, takes
killed part way, forks (a new session whose first checkpoint reuses a checkpoint of another),
archives, deletes and sweeps, through the Checkpointer itself on SQLite and local blobs.

No sandbox runs: the sandboxes port is a stand-in (:class:`ChunkingSandboxes`) that answers the
checkpoint script as :mod:`hangar.agent.chunking` does, sending only the chunks the control
plane does not say it holds. Everything after the sandbox's answer (checking it, packing,
sealing the manifest, recording, pruning, the SourcePruned retry and the sweeps) is hangar's.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, BinaryIO

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.keys.local import LocalKeys
from hangar.models import Checkpoint, CheckpointReason, Session
from hangar.sandboxes import ExecResult, SandboxCapabilities, Sandboxes
from hangar.checkpoints.checkpointer import Checkpointer, CheckpointTarget
from hangar.checkpoints.chunks import packs_prefix
from hangar.checkpoints.sweep import PackSweeper

SEEDS = range(20)
STEPS = 40
KEEP = 2
CHANGES = {"blobs": ("put", "delete"), "db": ("record_checkpoint",)}
"""The calls of a take that change something: a killed take dies before one of them."""


class Killed(BaseException):
    """The process died here (a BaseException: nothing in hangar may catch it)."""


class Mortal:
    """A port whose changing calls count down ``life`` (shared by the ports of one process):
    the call that finds it spent raises Killed, and so does every one after it."""

    def __init__(self, inner: object, port: str, life: list[int]) -> None:
        self._inner, self._port, self._life = inner, port, life

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name not in CHANGES[self._port]:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self._life[0] -= 1
            if self._life[0] < 0:
                raise Killed(f"{self._port}.{name}")
            return value(*args, **kwargs)

        return call


class ChunkingSandboxes:
    """The sandboxes port as a format-2 checkpoint uses it: sandbox ``id`` holds ``held[id]``,
    the chunks of its repo bundle, and its checkpoint script answers with a manifest line
    naming them all and sending, after it, those whose cid is not among the 32-byte digests
    given on standard input."""

    capabilities = SandboxCapabilities()

    def __init__(self) -> None:
        self.held: dict[str, list[bytes]] = {}

    def exec(self, sandbox_id: str, argv: Sequence[str], *, stdin: bytes | None = None,
             stdout: BinaryIO | None = None, **options: Any) -> ExecResult:  # fmt: skip
        assert stdout is not None and isinstance(stdin, bytes)
        known = {stdin[i : i + 32].hex() for i in range(0, len(stdin), 32)}
        chunks = self.held[sandbox_id]
        cids = [hashlib.sha256(c).hexdigest() for c in chunks]
        new = {cid: c for cid, c in zip(cids, chunks) if cid not in known}
        line = {
            "fingerprint": hashlib.sha256(b"".join(chunks)).hexdigest(), "head": "0" * 40,
            "branch": "main", "unchanged": False, "format": 2,
            "parts": [{"name": "repo.bundle", "kind": "blob", "size": sum(map(len, chunks)),
                       "chunks": cids}],
            "new": [[cid, len(c)] for cid, c in new.items()],
        }  # fmt: skip
        stdout.write(json.dumps(line).encode() + b"\n")
        for chunk in new.values():
            stdout.write(chunk)
        return ExecResult(0)


@dataclass
class World:
    """The sessions of one random sequence and what each checkpoint must read back as."""

    db: SqliteDb
    blobs: LocalBlobs
    checkpointer: Checkpointer
    sandboxes: ChunkingSandboxes
    rng: random.Random
    live: list[str] = field(default_factory=list)
    ever: list[str] = field(default_factory=list)
    settled: bool = True
    """No take was killed since the last sweep past the grace: every pack is listed."""
    holds: dict[str, tuple[str, list[bytes]]] = field(default_factory=dict)
    """By checkpoint id: its session and its repo bundle's chunks."""

    def new_session(self, chunks: list[bytes]) -> str:
        session = self.db.create_session(Session(name=f"s{len(self.ever)}", environment="app",
                                                 harness="claude"))  # fmt: skip
        self.sandboxes.held[session.id] = chunks
        self.live.append(session.id)
        self.ever.append(session.id)
        return session.id

    def take(self, session_id: str, fork_of: tuple[str, str] | None = None) -> None:
        self.edit(session_id)
        target = CheckpointTarget(session_id=session_id, sandbox_id=session_id,
                                  repo_dir="/workspace/app", fork_of=fork_of)  # fmt: skip
        checkpoint = self.checkpointer.take(target, CheckpointReason.TURN)
        assert checkpoint is not None and checkpoint.format == 2
        self.holds[checkpoint.id] = (session_id, list(self.sandboxes.held[session_id]))

    def killed_take(self, session_id: str, life: int) -> None:
        """A take by a process that dies before its ``life``-th change: after some packs, the
        manifest, the record's commit, or the pruned checkpoints' deletes."""
        self.edit(session_id)
        lives = [life]
        dying = Checkpointer(Mortal(self.db, "db", lives), Mortal(self.blobs, "blobs", lives),  # type: ignore[arg-type]
                             self.checkpointer.parts.keys, _as_port(self.sandboxes),
                             self.checkpointer.settings)  # fmt: skip
        target = CheckpointTarget(session_id=session_id, sandbox_id=session_id,
                                  repo_dir="/workspace/app")  # fmt: skip
        try:
            dying.take(target, CheckpointReason.TURN)  # it may be done before its life is
        except Killed:
            self.settled = False
        for checkpoint in self.db.list_checkpoints(session_id):  # it died after its commit
            self.holds.setdefault(checkpoint.id, (session_id, list(self.sandboxes.held[session_id])))

    def edit(self, session_id: str) -> None:
        """A turn's change: chunks appended, replaced, dropped or repeated."""
        chunks = self.sandboxes.held[session_id]
        for _ in range(self.rng.randint(0, 3)):
            roll = self.rng.random()
            if roll < 0.4 or not chunks:
                chunks.append(self.rng.randbytes(self.rng.randint(1, 200)))
            elif roll < 0.6:
                chunks[self.rng.randrange(len(chunks))] = self.rng.randbytes(32)
            elif roll < 0.8:
                del chunks[self.rng.randrange(len(chunks))]
            else:
                chunks.append(self.rng.choice(chunks))

    def recorded(self) -> list[Checkpoint]:
        return [c for s in self.ever for c in self.db.list_checkpoints(s)]

    def packs(self) -> set[str]:
        return {key for s in self.ever for key in self.blobs.list(packs_prefix(s))}


def step(world: World) -> str:
    """One random step; returns what it did."""
    rng = world.rng
    roll = rng.random()
    if not world.live or roll < 0.1:
        world.take(world.new_session([rng.randbytes(100) for _ in range(rng.randint(1, 4))]))
        return "new"
    if roll < 0.45:
        world.take(rng.choice(world.live))
        return "checkpoint"
    if roll < 0.55:
        world.killed_take(rng.choice(world.live), rng.randint(0, 6))
        return "killed"
    if roll < 0.75:
        # From a kept checkpoint mostly; sometimes from one since pruned or dropped (the
        # fork's first checkpoint then stores everything).
        kept = {c.id for c in world.recorded()}
        pool = sorted(kept if kept and rng.random() < 0.85 else world.holds.keys() - kept)
        if not pool:
            return "nothing"
        parent = rng.choice(pool)
        owner, chunks = world.holds[parent]
        fork = world.new_session(list(chunks))
        world.take(fork, fork_of=(owner, parent))
        return "fork"
    if roll < 0.85:
        victim = rng.choice(world.live)
        world.checkpointer.drop_all(victim)
        if rng.random() < 0.5:  # deleted; else archived (the session stays, without checkpoints)
            world.db.delete_session(victim)
            world.live.remove(victim)
        return "drop"
    sweeper = PackSweeper(world.db, world.blobs, timedelta(0))
    for owner in world.ever:
        sweeper.sweep(owner)
    world.settled = True
    return "sweep"


def check(world: World) -> None:
    """Every pack a record lists is there and every record reads back as it was taken; no
    pack is there that no record lists, once a sweep past the grace followed the last take
    that was killed."""
    recorded = world.recorded()
    listed = {pack for c in recorded for pack in c.packs}
    there = world.packs()
    assert listed <= there, f"packs a kept checkpoint needs are gone: {listed - there}"
    if world.settled:
        assert there <= listed, f"packs nothing lists are left: {there - listed}"
    for checkpoint in recorded:
        contents = world.checkpointer.contents(checkpoint)
        assert b"".join(contents.read("repo.bundle")) == b"".join(world.holds[checkpoint.id][1])


@pytest.mark.parametrize("seed", SEEDS)
def test_no_pack_a_kept_checkpoint_lists_is_ever_swept_and_none_other_stays(
    seed: int, settings: Settings, db: SqliteDb, blobs: LocalBlobs, keys: LocalKeys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(os, "fsync", _no_fsync)  # what is written, not how durably
    chosen = settings.replace(session_keep_checkpoints=KEEP)
    sandboxes = ChunkingSandboxes()
    checkpointer = Checkpointer(db, blobs, keys, _as_port(sandboxes), chosen)
    world = World(db, blobs, checkpointer, sandboxes, random.Random(seed))
    for _ in range(STEPS):
        step(world)
        check(world)


def _no_fsync(fd: int) -> None:
    pass


def _as_port(sandboxes: ChunkingSandboxes) -> Sandboxes:
    return sandboxes  # type: ignore[return-value]  # the one call a checkpoint makes
