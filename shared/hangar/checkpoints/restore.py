"""Restoring checkpoints into a fresh sandbox (spec 000 §5.3).

The parts go in one exec to :mod:`hangar.agent.restore`, which does every git step and every
unpacking inside the sandbox: the control plane never runs git on a bundle (BRIEF invariant 5).
They stream: each part is unsealed chunk by chunk as the exec's standard input takes it, so the
restore starts while later parts are still being read and decrypted, and nothing is held whole
on the control plane. A part is only vouched for once its last chunk authenticated and its size
and hash matched the record, so the restore stages every part first and touches the sandbox's
trees only after the control plane's closing line, :data:`PARTS_VERIFIED`, which follows the
last part only when every part passed: a tampered or truncated part ends the stream before it
(DecryptionFailed here, the restore refused at its ``receive`` step in the sandbox).

:meth:`Restorer.restore` tries the newest checkpoint first and falls back to older ones, newest
first, reporting which one was used and why the newer ones were skipped.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cached_property

from hangar import agent
from hangar.blobs import Blobs
from hangar.config import Settings
from hangar.db import Db
from hangar.errors import (
    BlobNotFound,
    DecryptionFailed,
    ExecTimeout,
    NoUsableCheckpoint,
    RestoreFailed,
    SandboxError,
    SealingUnavailable,
    UnsafeArchive,
)
from hangar.keys import Keys
from hangar.models import Checkpoint
from hangar.sandboxes import HANGAR_TMP, HOME, ExecResult, Sandboxes, SandboxUser, Stdin
from hangar.blobs.signing import SignsUrls, url_signer
from hangar.checkpoints.direct import grant_source, url_seconds
from hangar.checkpoints.contents import Contents
from hangar.checkpoints.parts import CheckpointParts

logger = logging.getLogger(__name__)

PARTS_VERIFIED = b"hangar: every part verified\n"
"""The line after the last part, sent only once every part authenticated and matched its
record; :mod:`hangar.agent.restore` changes nothing before it has read it (the same bytes)."""


@dataclass(frozen=True)
class SkippedCheckpoint:
    checkpoint_id: str
    code: str
    message: str


@dataclass(frozen=True)
class RestoreReport:
    """Which checkpoint was restored, and the newer ones that were tried and failed.
    ``seconds``: where the restore of the checkpoint used went, step by step (``open``,
    ``unseal`` and ``exec`` on the control plane, ``unseal`` overlapping ``exec``: the parts
    stream into it; the in-sandbox steps as the sandbox reported them: for benchmarks and logs,
    untrusted)."""

    checkpoint: Checkpoint
    skipped: list[SkippedCheckpoint] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def fell_back(self) -> bool:
        return bool(self.skipped)


class Restorer:
    def __init__(
        self, db: Db, blobs: Blobs, keys: Keys, sandboxes: Sandboxes, settings: Settings
    ) -> None:
        self.db = db
        self.sandboxes = sandboxes
        self.settings = settings
        self.parts = CheckpointParts(blobs, keys)
        self.blobs = blobs


    @cached_property
    def signer(self) -> SignsUrls | None:
        """Set when checkpoints go straight between the sandbox and the bucket (:mod:`direct`).
        Asked on first use: the sandboxes backend opens on its first use, never at start."""
        if not self.settings.checkpoint_direct or not self.sandboxes.capabilities.object_store:
            return None
        return url_signer(self.blobs)

    def restore(
        self, session_id: str, sandbox_id: str, repo_dir: str, *, home: str = HOME,
        fresh: bool = False,
    ) -> RestoreReport | None:
        """Restore the newest checkpoint that restores; None when the session has none.
        ``fresh``: nothing has changed the repo's tree since its clone (no setup ran), so the
        first checkpoint tried skips the reset and clean; a later one, after a failed attempt
        may have changed the tree, never does.

        Raises NoUsableCheckpoint (listing every failure) when none of them restores.
        """
        checkpoints = self.db.list_checkpoints(session_id)
        skipped: list[SkippedCheckpoint] = []
        for checkpoint in reversed(checkpoints):
            try:
                warnings, seconds = self._restore(checkpoint, sandbox_id, repo_dir, home=home,
                                                  fresh=fresh and not skipped)  # fmt: skip
            except (RestoreFailed, DecryptionFailed, BlobNotFound, UnsafeArchive) as exc:
                logger.warning("checkpoint %s did not restore: %s", checkpoint.id, exc.message)
                skipped.append(SkippedCheckpoint(checkpoint.id, exc.code, exc.message))
                continue
            return RestoreReport(checkpoint=checkpoint, skipped=skipped, warnings=warnings,
                                 seconds=seconds)  # fmt: skip
        if not checkpoints:
            return None
        raise NoUsableCheckpoint(
            f"no checkpoint of {session_id} restores: "
            + "; ".join(f"{s.checkpoint_id}: {s.message}" for s in skipped),
            session_id=session_id,
            failures=[s.__dict__ for s in skipped],
        )

    def restore_checkpoint(
        self, checkpoint: Checkpoint, sandbox_id: str, repo_dir: str, *, home: str = HOME,
        fresh: bool = False,
    ) -> list[str]:
        """Restore one checkpoint; returns its warnings (what could not be put back as it was:
        a branch left detached, paths git refuses). Every process of the sandbox's agent is
        ended first (whatever the environment's setup left running), so restore only into a
        fresh sandbox: the restore has it to itself. Raises BlobNotFound (before the sandbox is
        used), DecryptionFailed (before the repo or HOME is touched: the parts stream in, and
        the restore waits for :data:`PARTS_VERIFIED`), UnsafeArchive (an archive member would
        land outside its folder: refused before anything is unpacked, or mid-unpack if a
        process in the sandbox races the restore; never written outside the repo or HOME),
        RestoreFailed (past the restore cap too), or SandboxError (an agent process outlived
        ten seconds). ``fresh``: nothing has changed the repo's tree since its clone, so the
        restore skips its reset and clean (a tree that was changed keeps what the clean would
        have removed)."""
        return self._restore(checkpoint, sandbox_id, repo_dir, home=home, fresh=fresh)[0]

    def _restore(
        self, checkpoint: Checkpoint, sandbox_id: str, repo_dir: str, *, home: str, fresh: bool
    ) -> tuple[list[str], dict[str, float]]:
        """:meth:`restore_checkpoint`, with the seconds each step took."""
        started = time.perf_counter()
        if checkpoint.head is None:
            raise RestoreFailed(f"checkpoint {checkpoint.id} has no head", checkpoint=checkpoint.id)
        plan: dict[str, object] = {
            "repo": repo_dir,
            "home": home,
            "branch": checkpoint.branch,
            "head": checkpoint.head,
            "conversation_dirs": checkpoint.conversation_dirs,
            "exchange_dir": checkpoint.exchange_dir,
            "tmp": HANGAR_TMP,
            "max_bytes": self.settings.max_restore_bytes,
            "fresh": fresh,
        }
        if checkpoint.format == 2 and self.signer is not None:
            try:
                return self._restore_direct(checkpoint, sandbox_id, plan, started)
            except SealingUnavailable as exc:
                logger.warning("restoring %s: %s; its bytes go through the control plane",
                               checkpoint.id, exc.message)  # fmt: skip
        with ExitStack() as stack:
            # Every part opened before the exec: a missing one fails before the sandbox is used.
            opened = Contents(self.parts, checkpoint).restore_parts(stack)
            plan["parts"] = [part.entry() for part in opened]

            unsealing = [0.0]

            def stdin() -> Iterator[bytes]:
                yield json.dumps(plan).encode() + b"\n"
                for part in opened:
                    while True:
                        began = time.perf_counter()
                        chunk = next(part.chunks, None)  # raises DecryptionFailed: the stream ends
                        unsealing[0] += time.perf_counter() - began
                        if chunk is None:
                            break
                        yield chunk
                yield PARTS_VERIFIED

            unsealed = time.perf_counter()
            result = self._run(checkpoint, sandbox_id, stdin())
        seconds = {"open": unsealed - started, "unseal": unsealing[0],
                   "exec": time.perf_counter() - unsealed}  # fmt: skip
        warnings = _warnings_of(checkpoint, result.exit_code, result.stdout, result.stderr)
        return warnings, {**_seconds_of(result.stdout), **seconds}


    def _restore_direct(
        self, checkpoint: Checkpoint, sandbox_id: str, plan: dict[str, object], started: float
    ) -> tuple[list[str], dict[str, float]]:
        """A format-2 restore that the sandbox downloads and verifies itself, through signed
        URLs (:mod:`hangar.checkpoints.direct`); SealingUnavailable when it cannot."""
        assert self.signer is not None
        valid = url_seconds(self.settings.checkpoint_timeout_seconds)
        grant = grant_source(self.signer, self.parts, checkpoint, valid)
        plan = {**plan, "direct": grant.model_dump()}
        granted = time.perf_counter()
        result = self._run(checkpoint, sandbox_id, json.dumps(plan).encode() + b"\n")
        if result.exit_code == agent.SEALING_UNAVAILABLE:
            raise SealingUnavailable(f"the sandbox cannot open checkpoints: "
                                     f"{result.stderr.decode(errors='replace').strip()[-500:]}")  # fmt: skip
        seconds = {"open": granted - started, "exec": time.perf_counter() - granted}
        warnings = _warnings_of(checkpoint, result.exit_code, result.stdout, result.stderr)
        return warnings, {**_seconds_of(result.stdout), **seconds}

    def _run(self, checkpoint: Checkpoint, sandbox_id: str, stdin: Stdin) -> ExecResult:
        try:
            return agent.run_script(
                self.sandboxes,
                sandbox_id,
                "restore",
                stdin=stdin,
                timeout=self.settings.checkpoint_timeout_seconds,
                user=SandboxUser.HANGAR,
            )
        except ExecTimeout:
            raise RestoreFailed(
                f"restoring {checkpoint.id} timed out", checkpoint=checkpoint.id
            ) from None


_MAX_WARNINGS = 20
_STEPS = frozenset({"agent", "receive", "check", "reset", "fetch", "checkout", "apply", "untar",
                    "hand_over"})  # fmt: skip


def _seconds_of(stdout: bytes) -> dict[str, float]:
    """The in-sandbox steps' seconds from a restore's answer: only the steps it runs, only
    numbers (the answer is untrusted; a bad one gives none)."""
    lines = stdout.strip().splitlines()
    try:
        seconds = json.loads(lines[-1]).get("seconds") if lines else None
    except (ValueError, AttributeError):
        return {}
    if not isinstance(seconds, dict):
        return {}
    return {k: float(v) for k, v in seconds.items()
            if k in _STEPS and isinstance(v, (int, float)) and not isinstance(v, bool)}  # fmt: skip


def _warnings_of(checkpoint: Checkpoint, exit_code: int, stdout: bytes, stderr: bytes) -> list[str]:
    """The restore's warnings when it succeeded (bounded: the sandbox's answer is untrusted);
    otherwise raises UnsafeArchive or RestoreFailed with its message, or SandboxError when the
    agent's processes could not be ended (then no checkpoint is to blame, and none is tried)."""
    lines = stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        answer = {}
    if not isinstance(answer, dict):
        answer = {}
    if exit_code == 0 and answer.get("ok") is True:
        warnings = answer.get("warnings")
        if not isinstance(warnings, list):
            return []
        return [str(w)[:1000] for w in warnings[:_MAX_WARNINGS]]
    message = str(answer.get("error") or stderr.decode(errors="replace").strip()[-2000:])
    step = str(answer.get("step", "unknown"))
    text = f"restoring {checkpoint.id} failed at {step}: {message}"
    if answer.get("code") == UnsafeArchive.code:
        raise UnsafeArchive(text, checkpoint=checkpoint.id, step=step)
    if step == "agent":  # the sandbox's fault, not the checkpoint's: no older one would do
        raise SandboxError(f"the sandbox is not fit for a restore: {message}",
                           checkpoint=checkpoint.id, step=step)  # fmt: skip
    raise RestoreFailed(text, checkpoint=checkpoint.id, step=step)
