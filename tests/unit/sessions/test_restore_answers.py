"""How the control plane reads the in-sandbox restore's one-line answer (untrusted)."""

from __future__ import annotations

import json

import pytest

from hangar.errors import RestoreFailed, SandboxError, UnsafeArchive
from hangar.agent.restore import STEPS
from hangar.checkpoints.restore import _STEPS, _seconds_of, _warnings_of
from hangar.testing.db import make_checkpoint

CHECKPOINT = make_checkpoint("ses-1", 1)


def answer(**fields: object) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def test_a_restore_that_succeeded_hands_back_its_warnings_bounded() -> None:
    out = answer(ok=True, warnings=["HEAD is left detached"] + ["x" * 5000] * 30)
    warnings = _warnings_of(CHECKPOINT, 0, out, b"")
    assert warnings[0] == "HEAD is left detached" and len(warnings) == 20
    assert all(len(w) <= 1000 for w in warnings)
    assert _warnings_of(CHECKPOINT, 0, answer(ok=True, warnings="not a list"), b"") == []


def test_a_failed_restore_blames_the_checkpoint_or_the_archive_but_never_for_the_agents_processes() -> None:
    with pytest.raises(RestoreFailed, match="failed at checkout"):
        _warnings_of(CHECKPOINT, 3, answer(ok=False, code="restore_failed", step="checkout",
                                           error="bad"), b"")  # fmt: skip
    with pytest.raises(UnsafeArchive):
        _warnings_of(CHECKPOINT, 3, answer(ok=False, code="unsafe_archive", step="unpack",
                                           error="a link"), b"")  # fmt: skip
    # A process of the agent's that outlived the kill is the sandbox's fault: no older
    # checkpoint is tried (each would fail the same way and be counted against it).
    with pytest.raises(SandboxError) as caught:
        _warnings_of(CHECKPOINT, 3, answer(ok=False, code="restore_failed", step="agent",
                                           error="pid 7 outlived ten seconds"), b"")  # fmt: skip
    assert not isinstance(caught.value, RestoreFailed)
    with pytest.raises(RestoreFailed, match="garbage"):
        _warnings_of(CHECKPOINT, 1, b"[1, 2]\n", b"garbage")


def test_a_restore_s_step_seconds_are_read_only_for_its_own_steps_and_only_as_numbers() -> None:
    assert _STEPS == set(STEPS)
    out = answer(ok=True, warnings=[], seconds={"fetch": 0.25, "untar": 1, "nope": 3.0,
                                                "apply": "fast", "checkout": True})  # fmt: skip
    assert _seconds_of(out) == {"fetch": 0.25, "untar": 1.0}
    assert _seconds_of(answer(ok=True, seconds=[1, 2])) == {}
    assert _seconds_of(b"[1, 2]\n") == {}
    assert _seconds_of(b"not json") == {}
    assert _seconds_of(b"") == {}
