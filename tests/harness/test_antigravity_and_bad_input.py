"""Antigravity against its scripted stand-in, and the typed errors every harness turn reports:
an unknown harness, a CLI missing from the sandbox, a CLI that exits non-zero, output without a
conversation id, a conversation other than the one asked for."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.blobs.local import LocalBlobs
from hangar.config import Settings
from hangar.db.sqlite import SqliteDb
from hangar.errors import (
    ConversationMismatch,
    HarnessError,
    HarnessMissing,
    NoConversationId,
    UnknownHarness,
)
from hangar.harnesses import Harness, TurnResult, TurnSpec, get_harness
from hangar.processes.runs import wait_run
from hangar.harnesses.turns import start_turn, turn_result
from hangar.keys.local import LocalKeys
from hangar.sandboxes.local import LocalSandboxes
from tests.conftest import GIT_IDENTITY
from tests.rig import Engine, make_engine

pytestmark = [pytest.mark.harness, pytest.mark.sandbox]

STANDIN = Path(__file__).with_name("agy_standin.py")


@pytest.fixture
def standin_dir(tmp_path: Path) -> Path:
    """A harness folder holding only the Antigravity stand-in, as ``bin/agy``."""
    folder = tmp_path / "agy-harness"
    (folder / "bin").mkdir(parents=True)
    shutil.copy(STANDIN, folder / "bin" / "agy")
    (folder / "bin" / "agy").chmod(0o755)
    return folder


def make(
    harness: Harness,
    harness_dir: Path | None,
    settings: Settings,
    db: SqliteDb,
    blobs: LocalBlobs,
    keys: LocalKeys,
    remote: Path,
    root: Path,
) -> Engine:
    return make_engine(settings, db, blobs, keys, LocalSandboxes(root, harness_dir), remote,
                       name=f"s-{uuid.uuid4().hex[:6]}", harness=harness.name,
                       conversation_dirs=harness.conversation_dirs)  # fmt: skip


@pytest.fixture
def agy(
    standin_dir: Path,
    settings: Settings,
    db: SqliteDb,
    blobs: LocalBlobs,
    keys: LocalKeys,
    remote: Path,
    tmp_path: Path,
) -> Iterator[Engine]:
    engine = make(get_harness("antigravity"), standin_dir, settings, db, blobs, keys, remote,
                  tmp_path / "sandboxes")  # fmt: skip
    yield engine
    for info in engine.sandboxes.list():
        engine.sandboxes.destroy(info.id)


def run(engine: Engine, sandbox: str, harness: Harness, spec: TurnSpec) -> tuple[TurnResult, bytes]:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    start_turn(engine.sandboxes, sandbox, harness, spec, run_id)
    log, code = wait_run(engine.sandboxes, sandbox, run_id, timeout=60)
    return turn_result(engine.sandboxes, sandbox, harness, spec, run_id, log, code), log


def spec(prompt: str, **kw: object) -> TurnSpec:
    fields: dict[str, object] = {"env": GIT_IDENTITY, **kw}
    return TurnSpec(prompt=prompt, cwd="/workspace/app", **fields)  # type: ignore[arg-type]


def test_antigravity_resumes_its_conversation_in_a_new_sandbox(agy: Engine) -> None:
    harness = get_harness("antigravity")
    sandbox, workspace = agy.sandbox()
    first, _ = run(agy, sandbox, harness, spec("turn one: plan the work"))
    assert first.ok and first.conversation_id
    agy.take(sandbox, workspace)
    agy.sandboxes.destroy(sandbox)

    fresh, again = agy.sandbox()
    agy.restorer.restore(agy.session.id, fresh, again.repo_dir)
    second, _ = run(agy, fresh, harness, spec("turn two", conversation_id=first.conversation_id))
    assert second.ok, second.error
    assert second.conversation_id == first.conversation_id
    assert second.summary == "Seen 2 earlier messages; the task began with: turn one: plan the work"
    assert second.usage == {"input_tokens": 10, "output_tokens": 5}


def test_antigravity_silently_starting_a_new_conversation_is_a_failed_turn(agy: Engine) -> None:
    harness = get_harness("antigravity")
    sandbox, _ = agy.sandbox()
    result, log = run(agy, sandbox, harness, spec("carry on", conversation_id="lost-conversation"))
    assert isinstance(result.error, ConversationMismatch)
    assert result.error.data["expected"] == "lost-conversation"
    assert result.conversation_id and result.conversation_id != "lost-conversation"
    assert b'"type": "init"' in log, "the run log is kept"


def test_a_cli_that_exits_non_zero_is_a_harness_error_with_its_message(agy: Engine) -> None:
    harness = get_harness("antigravity")
    sandbox, _ = agy.sandbox()
    failing = spec("anything", env={**GIT_IDENTITY, "AGY_STANDIN_EXIT": "3"})
    result, _ = run(agy, sandbox, harness, failing)
    assert type(result.error) is HarnessError and result.exit_code == 3
    assert "the model service refused the request" in result.error.message
    assert result.error.code == "harness_failed"


def test_output_without_a_conversation_id_is_a_failed_turn(agy: Engine) -> None:
    harness = get_harness("antigravity")
    sandbox, _ = agy.sandbox()
    result, log = run(agy, sandbox, harness, spec("hi", env={**GIT_IDENTITY, "AGY_STANDIN_NO_INIT": "1"}))
    assert isinstance(result.error, NoConversationId)
    assert result.summary and b'"type": "result"' in log


def test_a_harness_cli_missing_from_the_sandbox_is_reported_as_missing(
    settings: Settings,
    db: SqliteDb,
    blobs: LocalBlobs,
    keys: LocalKeys,
    remote: Path,
    tmp_path: Path,
) -> None:
    claude = get_harness("claude")
    engine = make(claude, None, settings, db, blobs, keys, remote, tmp_path / "bare")
    sandbox, _ = engine.sandbox()
    result, _ = run(engine, sandbox, claude, spec("hello", new_id=str(uuid.uuid4())))
    assert isinstance(result.error, HarnessMissing)
    assert result.exit_code == 127 and "claude" in result.error.message
    engine.sandboxes.destroy(sandbox)


def test_an_unknown_harness_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(UnknownHarness, match="claude, codex, pi") as info:
        get_harness("cursor")
    assert info.value.code == "unknown_harness" and info.value.status == 400


def test_antigravity_cannot_fork_and_says_to_hand_off() -> None:
    with pytest.raises(HarnessError, match="handoff"):
        get_harness("antigravity").command(spec("x", fork_from="abc"))
