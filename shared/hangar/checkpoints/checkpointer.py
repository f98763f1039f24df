"""Taking checkpoints (spec 000 §5.2).

The parts are packed inside the sandbox by :mod:`hangar.agent.checkpoint` in one exec, whose
output (a manifest line, then the parts) is spooled to a local temporary file, then the parts are
sealed and stored in blobs, side by side. Only when every part is stored is the checkpoint recorded, in one db
transaction that also prunes to ``session_keep_checkpoints``; the pruned checkpoints' parts are
deleted after that. If anything fails before the record is written, the checkpoint's parts are
deleted (whichever were stored) and nothing is recorded (BRIEF invariant 3). A db error from the recording itself is
checked by reading the record back, since a commit can land and still report an error.

The sandbox's output is untrusted: the manifest is validated, part names come from a fixed set
and sizes must add up to what was received.

Format 2 (``HANGAR_CHECKPOINT_FORMAT``, the default) stores content-addressed chunks instead of
whole parts (:mod:`hangar.checkpoints.chunked`): the sandbox is told which chunks the *source*
holds (the session's newest format-2 checkpoint, or for a fork's first, the one it was forked
from) and sends only the others. Recording refuses a take whose source was pruned meanwhile
(SourcePruned: its chunks may be swept); the take is then made again from no source, sending
everything. Pruned and dropped checkpoints' packs are swept (:mod:`hangar.checkpoints.sweep`).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from datetime import timedelta
from typing import Any, BinaryIO, NoReturn, cast

from pydantic import BaseModel, ConfigDict, ValidationError, ValidatorFunctionWrapHandler
from pydantic import field_validator

from hangar import agent
from hangar.blobs import Blobs
from hangar.config import Settings
from hangar.db import Db
from hangar.errors import (
    BackendError, BlobNotFound, CheckpointError, CheckpointNotFound, DecryptionFailed, ExecTimeout,
    HangarError, SealingUnavailable, SourcePruned,
)
from hangar.blobs.signing import SignsUrls, url_signer
from hangar.checkpoints.chunked import ChunkedStore, Source, accept, open_source
from hangar.checkpoints.direct import Answer, check_answer, grant_source, grant_take
from hangar.checkpoints.direct import SourceGrant, url_seconds
from hangar.checkpoints.contents import Contents
from hangar.checkpoints.parts import CheckpointParts, part_key
from hangar.checkpoints.sweep import PackSweeper
from hangar.keys import Keys
from hangar.keys.envelope import CHUNK
from hangar.models import ChangeSize, Checkpoint, CheckpointPart, CheckpointReason, Compression
from hangar.models import new_checkpoint_id
from hangar.sandboxes import HANGAR_TMP, HOME, Sandboxes, SandboxUser

logger = logging.getLogger(__name__)

DEFAULT_CONVERSATION_DIRS: tuple[str, ...] = (
    ".claude/projects",
    ".codex/sessions",
    ".pi/agent/sessions",
    ".gemini/antigravity-cli/conversations",
)
"""The harnesses' conversation folders under HOME (spec 000 §6): never their credentials."""

PART_NAMES = frozenset(
    {
        "meta.json",
        "repo.bundle",
        "wip.patch",
        "staged.patch",
        "session.patch",
        "untracked.tar.zst",
        "untracked.tar.gz",
        "agent.tar.zst",
        "agent.tar.gz",
        "exchange.tar.zst",
        "exchange.tar.gz",
    }
)
_MAX_MANIFEST = 1 << 20
_MAX_CHUNKED_MANIFEST = 64 << 20
"""A format-2 manifest lists every file with its chunks: a large tree takes more than 1 MiB."""
_PARTS_AT_ONCE = 4
PART_THREADS = "hangar-checkpoint-part"
"""The name prefix of the threads that store a checkpoint's parts."""

Write = Callable[[Checkpoint, bytes, list[str]], Checkpoint]
"""Stores a take's parts for ``checkpoint`` under its data key, adding every blob key it
writes (or may have written) to the list as it goes; returns the checkpoint as recorded."""


class _Bounded:
    """A spool that refuses more than ``limit`` bytes: the sandbox's output is untrusted, and
    must not fill the control plane's disk."""

    def __init__(self, out: BinaryIO, limit: int) -> None:
        self.out = out
        self.limit = limit
        self.written = 0

    def write(self, data: bytes) -> int:
        self.written += len(data)
        if self.written > self.limit:
            raise CheckpointError(
                f"the sandbox's checkpoint output passed {self.limit} bytes", limit=self.limit
            )
        return self.out.write(data)


@dataclass(frozen=True)
class CheckpointTarget:
    """What to checkpoint: a session's repo and conversation folders in a sandbox."""

    session_id: str
    sandbox_id: str
    repo_dir: str
    base: str | None = None
    harness: str | None = None
    harness_session: str | None = None
    conversation_dirs: Sequence[str] = field(default=DEFAULT_CONVERSATION_DIRS)
    exchange_dir: str | None = None
    home: str = HOME
    fork_of: tuple[str, str] | None = None
    """(session, checkpoint) it was forked from: its first checkpoint reuses that one's chunks."""


class _PackedPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    size: int
    compression: Compression = Compression.NONE  # format 2's parts have none (and more fields)


class _Manifest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    fingerprint: str
    head: str
    branch: str | None
    unchanged: bool
    checked: bool = False
    base: str | None = None
    warnings: list[str] = []
    parts: list[_PackedPart] = []
    format: int = 1
    change: ChangeSize | None = None

    @field_validator("change", mode="wrap")
    @classmethod
    def _counted(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> ChangeSize | None:
        """A count that does not parse is no count: it is for showing, never worth failing
        the checkpoint over."""
        try:
            return cast(ChangeSize | None, handler(value))
        except ValidationError:
            return None


def _unchanged(target: CheckpointTarget, manifest: _Manifest, previous: str | None) -> bool:
    """Whether the sandbox answered "unchanged"; CheckpointError when that was not asked for:
    only a skip asked for, against the very fingerprint given, is one."""
    if not manifest.unchanged:
        return False
    if previous is None or manifest.fingerprint != previous:
        raise CheckpointError(
            f"checkpoint of {target.session_id} failed: the sandbox answered 'unchanged' to a "
            "checkpoint that asked for no skip or for another one",
            session_id=target.session_id,
        )
    return True


def _expect_remaining(spool: BinaryIO, size: int) -> None:
    """CheckpointError unless exactly ``size`` bytes of the sandbox's output follow the
    manifest line (before anything is stored)."""
    received = os.fstat(spool.fileno()).st_size - spool.tell()
    if received < size:
        raise CheckpointError("the sandbox's checkpoint output ended early")
    if received > size:
        raise CheckpointError("the sandbox's checkpoint output has trailing bytes")


def _read_range(fd: int, offset: int, size: int) -> Iterator[bytes]:
    """``size`` bytes of the file ``fd`` from ``offset``, a chunk at a time (positioned reads:
    several parts are read from one spool at once)."""
    end = offset + size
    while offset < end:
        chunk = os.pread(fd, min(end - offset, CHUNK), offset)
        if not chunk:
            raise CheckpointError("the sandbox's checkpoint output ended early")
        offset += len(chunk)
        yield chunk


class Checkpointer:
    """Takes checkpoints of sessions' sandboxes and stores them, atomically."""

    def __init__(
        self, db: Db, blobs: Blobs, keys: Keys, sandboxes: Sandboxes, settings: Settings
    ) -> None:
        self.db = db
        self.sandboxes = sandboxes
        self.settings = settings
        self.parts = CheckpointParts(blobs, keys)
        self.chunked = ChunkedStore(self.parts)
        self.blobs = blobs
        grace = timedelta(seconds=2 * settings.checkpoint_timeout_seconds + 600)
        self.sweeper = PackSweeper(db, blobs, grace)


    @cached_property
    def signer(self) -> SignsUrls | None:
        """Set when checkpoints go straight between the sandbox and the bucket (:mod:`direct`).
        Asked on first use: the sandboxes backend opens on its first use, never at start."""
        if not self.settings.checkpoint_direct or not self.sandboxes.capabilities.object_store:
            return None
        return url_signer(self.blobs)

    def contents(self, checkpoint: Checkpoint) -> Contents:
        """What ``checkpoint`` holds, part by part, whatever its format."""
        return Contents(self.parts, checkpoint)

    def take(
        self,
        target: CheckpointTarget,
        reason: CheckpointReason,
        *,
        skip_if_unchanged: bool = False,
    ) -> Checkpoint | None:
        """Checkpoint ``target`` and record it; returns the record.

        With ``skip_if_unchanged`` (interval checkpoints), returns None without storing anything
        when the fingerprint equals the newest checkpoint's. Raises CheckpointError when the
        checkpoint could not be taken; then nothing is recorded and no part is left in blobs.
        """
        history = self.db.list_checkpoints(target.session_id)
        previous = history[-1].fingerprint if skip_if_unchanged and history else None
        chunked = self.settings.checkpoint_format == 2
        config: dict[str, object] = {
            "repo": target.repo_dir,
            "home": target.home,
            "conversation_dirs": list(target.conversation_dirs),
            "exchange_dir": target.exchange_dir,
            "base": target.base,
            "harness": target.harness,
            "harness_session": target.harness_session,
            "max_part": self.settings.max_part_bytes,
            "max_untracked": self.settings.max_untracked_bytes,
            "max_patch": self.settings.max_patch_bytes,
            "max_restore": self.settings.max_restore_bytes,
            "skip_if_fingerprint": previous,
            "tmp": HANGAR_TMP,
        }
        if chunked:
            config["format"] = 2
        if chunked and self.signer is not None:
            try:
                return self._take_direct(target, reason, config, previous, history)
            except SealingUnavailable as exc:
                logger.warning("checkpoint of %s: %s; its bytes go through the control plane",
                               target.session_id, exc.message)  # fmt: skip
        source = self._source(target, history) if chunked else None
        try:
            return self._take(target, reason, config, previous, source)
        except SourcePruned:
            logger.info("checkpoint of %s: its source was pruned meanwhile; taking it whole",
                        target.session_id)  # fmt: skip
            return self._take(target, reason, config, previous, None)

    def _source(self, target: CheckpointTarget, history: list[Checkpoint]) -> Source | None:
        """The checkpoint whose chunks a take reuses (:meth:`_source_record`), its manifest
        opened. None when there is none or it does not open (then everything is sent again)."""
        newest = self._source_record(target, history)
        if newest is None:
            return None
        try:
            return open_source(self.parts, newest)
        except (DecryptionFailed, BlobNotFound) as exc:
            logger.warning("checkpoint of %s: no chunks to reuse (%s)", target.session_id,
                           exc.message)  # fmt: skip
            return None

    def _take(
        self, target: CheckpointTarget, reason: CheckpointReason, config: dict[str, object],
        previous: str | None, source: Source | None,
    ) -> Checkpoint | None:  # fmt: skip
        chunked = config.get("format") == 2
        stdin = (source.known() if source is not None else b"") if chunked else None
        with tempfile.TemporaryFile() as spool:
            self._pack(target, config, spool, stdin)
            spool.seek(0)
            line = spool.readline(_MAX_CHUNKED_MANIFEST if chunked else _MAX_MANIFEST)
            manifest = self._manifest(line, chunked)
            if _unchanged(target, manifest, previous):
                return None
            write: Write
            if chunked:
                parts, new = accept(line, source)
                _expect_remaining(spool, sum(size for _, size in new))

                def write(checkpoint: Checkpoint, key: bytes, stored: list[str]) -> Checkpoint:
                    return self.chunked.store(checkpoint, key, parts, new, spool, source, stored)
            else:
                _expect_remaining(spool, sum(p.size for p in manifest.parts))

                def write(checkpoint: Checkpoint, key: bytes, stored: list[str]) -> Checkpoint:
                    return self._store_parts(checkpoint, key, manifest, spool, stored)
            return self._store(target, reason, manifest, write)

    def _take_direct(
        self, target: CheckpointTarget, reason: CheckpointReason, config: dict[str, object],
        previous: str | None, history: list[Checkpoint],
    ) -> Checkpoint | None:  # fmt: skip
        """A format-2 take whose bytes go straight from the sandbox to the bucket
        (:mod:`hangar.checkpoints.direct`): granted, taken, checked, recorded. A source pruned
        meanwhile makes it again from none; SealingUnavailable when the sandbox cannot seal."""
        source = self._source_record(target, history)
        while True:
            try:
                return self._direct(target, reason, config, previous, source)
            except SourcePruned:
                if source is None:
                    raise
                logger.info("checkpoint of %s: its source was pruned meanwhile; taking it "
                            "whole", target.session_id)  # fmt: skip
                source = None

    def _direct(
        self, target: CheckpointTarget, reason: CheckpointReason, config: dict[str, object],
        previous: str | None, source: Checkpoint | None,
    ) -> Checkpoint | None:  # fmt: skip
        assert self.signer is not None
        signer = self.signer
        checkpoint_id = new_checkpoint_id()
        data_key, wrapped = self.parts.new_key()
        seconds = url_seconds(self.settings.checkpoint_timeout_seconds)
        try:
            read = self._grant_source(source, seconds) if source else None
            grant = grant_take(signer, target.session_id, checkpoint_id, data_key, read, seconds)
        except HangarError as exc:
            raise CheckpointError(f"checkpoint of {target.session_id} failed: {exc.message}",
                                  session_id=target.session_id, cause=exc.code) from exc  # fmt: skip
        granted = [put.key for put in grant.puts]
        try:
            with tempfile.TemporaryFile() as spool:
                self._pack(target, {**config, "direct": True}, spool,
                           grant.model_dump_json().encode())  # fmt: skip
                spool.seek(0)
                line = spool.readline(_MAX_MANIFEST)
                manifest = self._manifest(line, True)
                if _unchanged(target, manifest, previous):
                    return None
                _expect_remaining(spool, 0)
                try:
                    answer = Answer.model_validate_json(line)
                except ValidationError as exc:
                    raise CheckpointError(f"the sandbox's direct checkpoint answer is "
                                          f"malformed: {exc}") from None  # fmt: skip
        except BaseException:
            self._discard(granted)  # whichever it wrote before it failed
            raise

        def write(checkpoint: Checkpoint, key: bytes, stored: list[str]) -> Checkpoint:
            stored.extend(granted)
            return checkpoint.model_copy(update=check_answer(signer, grant, answer, source))

        return self._store(target, reason, manifest, write, (checkpoint_id, data_key, wrapped))

    def _grant_source(self, source: Checkpoint, seconds: int) -> SourceGrant | None:
        """Read access to ``source`` for a direct take; None (reuse nothing) when its data key
        does not unwrap."""
        assert self.signer is not None
        try:
            return grant_source(self.signer, self.parts, source, seconds)
        except DecryptionFailed as exc:
            logger.warning("checkpoint of %s: no chunks to reuse (%s)", source.session_id,
                           exc.message)  # fmt: skip
            return None

    def _source_record(self, target: CheckpointTarget, history: list[Checkpoint]) -> Checkpoint | None:
        """The checkpoint whose chunks a take reuses: the session's newest if it is format 2,
        else (none yet) the one it was forked from if that is. Unopened (a direct take's
        sandbox opens it)."""
        try:
            if history:
                newest = history[-1]
            elif target.fork_of is not None:
                newest = self.db.get_checkpoint(*target.fork_of)
            else:
                return None
        except CheckpointNotFound:
            return None
        return newest if newest.format == 2 else None

    def _pack(self, target: CheckpointTarget, config: dict[str, object], spool: BinaryIO,
              stdin: bytes | None = None) -> None:  # fmt: skip
        try:
            result = agent.run_script(
                self.sandboxes,
                target.sandbox_id,
                "checkpoint",
                json.dumps(config),
                stdin=stdin,
                stdout=cast(BinaryIO, _Bounded(spool, self._output_limit())),
                timeout=self.settings.checkpoint_timeout_seconds,
                user=SandboxUser.HANGAR,
            )
        except ExecTimeout:
            raise CheckpointError(
                f"checkpoint of {target.session_id} timed out after "
                f"{self.settings.checkpoint_timeout_seconds:g} s",
                session_id=target.session_id,
            ) from None
        if not result.ok:
            detail = result.stderr.decode(errors="replace").strip()[-2000:]
            if config.get("direct") and result.exit_code == agent.SEALING_UNAVAILABLE:
                raise SealingUnavailable(f"the sandbox cannot seal checkpoints: {detail}",
                                         session_id=target.session_id)  # fmt: skip
            raise CheckpointError(
                f"checkpoint of {target.session_id} failed in the sandbox: {detail}",
                session_id=target.session_id,
            )

    def _output_limit(self) -> int:
        return len(PART_NAMES) * self.settings.max_part_bytes + _MAX_CHUNKED_MANIFEST

    def _manifest(self, line: bytes, chunked: bool) -> _Manifest:
        """The sandbox's manifest line, checked: the format asked for, and format 1's parts
        (format 2's are checked by :func:`~hangar.checkpoints.chunked.accept`)."""
        if not line.endswith(b"\n"):
            raise CheckpointError("the sandbox's checkpoint manifest is too long or cut short")
        try:
            manifest = _Manifest.model_validate_json(line)
        except ValidationError as exc:
            raise CheckpointError(f"the sandbox's checkpoint manifest is malformed: {exc}") from None
        if not manifest.unchanged and manifest.format != (2 if chunked else 1):
            raise CheckpointError(f"the sandbox answered a format-{2 if chunked else 1} "
                                  f"checkpoint in format {manifest.format}")  # fmt: skip
        if chunked:
            return manifest
        names = [p.name for p in manifest.parts]
        bad = [n for n in names if n not in PART_NAMES]
        if bad or len(set(names)) != len(names):
            raise CheckpointError(f"the sandbox's checkpoint manifest lists bad parts: {names}")
        cap = self.settings.max_part_bytes
        if any(not 0 <= p.size <= cap for p in manifest.parts):
            raise CheckpointError(f"the sandbox's checkpoint manifest lists parts over {cap} bytes")
        return manifest

    def _store(
        self,
        target: CheckpointTarget,
        reason: CheckpointReason,
        manifest: _Manifest,
        write: Write,
        prepared: tuple[str, bytes, str] | None = None,
    ) -> Checkpoint:
        """Write the take's parts (``write``), then record the checkpoint and prune; anything
        that fails before the record deletes what was written and records nothing.
        ``prepared``: the checkpoint's id, data key and wrapped key, when made before the take."""
        checkpoint_id, data_key, wrapped = prepared or (new_checkpoint_id(), *self.parts.new_key())
        checkpoint = Checkpoint(
            id=checkpoint_id,
            session_id=target.session_id,
            reason=reason,
            head=manifest.head,
            base=manifest.base,
            branch=manifest.branch,
            harness=target.harness,
            harness_session=target.harness_session,
            cwd=target.repo_dir,
            conversation_dirs=list(target.conversation_dirs),
            exchange_dir=target.exchange_dir,
            warnings=manifest.warnings,
            fingerprint=manifest.fingerprint,
            verified=manifest.checked,
            wrapped_key=wrapped,
            change=manifest.change,
        )
        stored: list[str] = []
        try:
            checkpoint = write(checkpoint, data_key, stored)
        except BaseException as exc:
            self._abandon(target, stored, exc)
        recorded = self._record(target, checkpoint, stored)
        for old in recorded:
            self._delete_quietly(old)
        self.sweeper.after_drop(recorded)
        return checkpoint.model_copy(update={"version": 1})

    def _store_parts(
        self, checkpoint: Checkpoint, data_key: bytes, manifest: _Manifest, spool: BinaryIO,
        stored: list[str],
    ) -> Checkpoint:  # fmt: skip
        """Format 1: seal and store every part of the spooled output whole, side by side: each
        part is read from its own offset, and one part's writes (and, on disk, its flush to
        stable storage) overlap the others'. Raises the first failure once every part has
        ended (then some may be stored: all their keys are in ``stored``)."""
        stored += [part_key(checkpoint.session_id, checkpoint.id, p.name) for p in manifest.parts]
        offsets, end = [], spool.tell()
        for packed in manifest.parts:
            offsets.append(end)
            end += packed.size

        def store(packed: _PackedPart, offset: int) -> CheckpointPart:
            chunks = _read_range(spool.fileno(), offset, packed.size)
            part = self.parts.put(checkpoint.session_id, checkpoint.id, packed.name, data_key,
                                  chunks)  # fmt: skip
            return CheckpointPart(name=packed.name, size=part.size, stored_size=part.stored_size,
                                  compression=packed.compression, sha256=part.sha256)  # fmt: skip

        workers = max(1, min(len(manifest.parts), _PARTS_AT_ONCE))
        with ThreadPoolExecutor(workers, thread_name_prefix=PART_THREADS) as pool:
            futures = [pool.submit(store, p, o) for p, o in zip(manifest.parts, offsets)]
        for future in futures:
            if (failure := future.exception()) is not None:
                raise failure
        return checkpoint.model_copy(update={"parts": [future.result() for future in futures]})

    def _record(
        self, target: CheckpointTarget, checkpoint: Checkpoint, stored: list[str]
    ) -> list[Checkpoint]:
        """Record the checkpoint (its parts are stored); returns the records it pruned.

        A BackendError may come after the record landed (Firestore: a commit that succeeded
        but whose answer was lost to a deadline), so the record is read back: if it is there
        the checkpoint counts as recorded, but which records were pruned is lost and their
        parts stay in blobs (logged). Only a record that is not there deletes the parts; when
        not even that can be told, the parts are kept (a recorded checkpoint must never lose
        them) and CheckpointError says so."""
        try:
            return self.db.record_checkpoint(checkpoint, self.settings.session_keep_checkpoints)
        except BackendError as exc:
            failure = exc
        except BaseException as exc:
            self._abandon(target, stored, exc)
        try:
            self.db.get_checkpoint(checkpoint.session_id, checkpoint.id)
        except CheckpointNotFound:
            self._abandon(target, stored, failure)
        except HangarError as exc:
            logger.error(
                "checkpoint %s of %s: recording failed (%s) and reading it back failed (%s); "
                "its parts are kept",
                checkpoint.id, target.session_id, failure.message, exc.message,
            )  # fmt: skip
            raise CheckpointError(
                f"checkpoint of {target.session_id} may not have been recorded: "
                f"{failure.message}; its parts are kept",
                session_id=target.session_id,
                cause=failure.code,
            ) from exc
        logger.warning(
            "checkpoint %s of %s was recorded although the db reported an error (%s); the parts "
            "of any checkpoints it pruned are left in blobs", checkpoint.id, target.session_id,
            failure.message,
        )  # fmt: skip
        return []

    def _abandon(self, target: CheckpointTarget, stored: list[str], exc: BaseException) -> NoReturn:
        """Delete the checkpoint's parts (keys ``stored``, whichever of them were written) and
        raise: hangar errors as CheckpointError."""
        self._discard(stored)
        if isinstance(exc, HangarError) and not isinstance(exc, (CheckpointError, SourcePruned)):
            raise CheckpointError(
                f"checkpoint of {target.session_id} failed: {exc.message}",
                session_id=target.session_id,
                cause=exc.code,
            ) from exc
        raise exc

    def _discard(self, keys: list[str]) -> None:
        for key in keys:
            try:
                self.parts.blobs.delete(key)
            except HangarError:
                logger.exception("could not delete part %s of a failed checkpoint", key)

    def _delete_quietly(self, checkpoint: Checkpoint) -> None:
        try:
            self.parts.delete(checkpoint)
        except HangarError:
            logger.exception("could not delete the parts of pruned checkpoint %s", checkpoint.id)

    def drop_all(self, session_id: str) -> list[Checkpoint]:
        """Delete every checkpoint of a session, records first (so none is left half-deleted
        and still listed), then parts. Returns what was dropped."""
        dropped = self.db.delete_checkpoints(session_id)
        for checkpoint in dropped:
            self._delete_quietly(checkpoint)
        self.sweeper.after_drop(dropped, gone=session_id)
        return dropped
