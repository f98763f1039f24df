"""The runtime with the real in-process ticker: turns finish and idle sessions suspend with
nobody calling in."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from hangar.config import Settings
from hangar.models import CheckpointReason, SessionState, TurnOutcome
from hangar.runtime import Runtime

pytestmark = pytest.mark.sandbox

STANDIN = Path(__file__).parents[1] / "harness" / "agy_standin.py"


def until(predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def test_ticks_finish_the_turn_and_suspend_the_idle_session_by_themselves(
    tmp_path: Path, remote: Path
) -> None:
    harnesses = tmp_path / "harnesses"
    (harnesses / "bin").mkdir(parents=True)
    shutil.copy(STANDIN, harnesses / "bin" / "agy")
    (harnesses / "bin" / "agy").chmod(0o755)
    settings = Settings.build(data_dir=tmp_path / "data", harness_dir=harnesses,
                              activity_grace_seconds=0)  # fmt: skip
    runtime = Runtime(settings)
    runtime.start()
    try:
        runtime.sessions.environments.add("app", str(remote))
        runtime.sessions.new("demo", "hello", "app", harness="antigravity", idle_minutes=0.01)
        until(lambda: runtime.db.find_session("demo").state is SessionState.SUSPENDED)
        detail = runtime.sessions.get("demo")
        assert detail.turns[0].outcome is TurnOutcome.EXITED
        assert [c.reason for c in detail.checkpoints] == [CheckpointReason.TURN,
                                                          CheckpointReason.SUSPEND]  # fmt: skip
        assert detail.sandbox_id is None and runtime.sandboxes.list() == []
    finally:
        runtime.close()
        for info in runtime.sandboxes.list():
            runtime.sandboxes.destroy(info.id, hooks=False)


def test_a_missing_key_file_is_not_silently_replaced_while_checkpoints_exist(
    tmp_path: Path,
) -> None:
    from hangar.errors import BackendError

    settings = Settings.build(data_dir=tmp_path / "data")
    first = Runtime(settings)
    first.keys.wrap(b"k" * 32)  # makes the key file
    first.blobs.put("sessions/ses-1/ckp-1/wip.patch", b"sealed")
    first.close()
    key_file = tmp_path / "data" / "vault.key"
    key_file.unlink()
    with pytest.raises(BackendError, match="key file .* is missing but checkpoints exist"):
        Runtime(settings)
    assert not key_file.exists()
