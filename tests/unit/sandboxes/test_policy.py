"""The policy above the sandboxes port, the same over every backend: pre-destroy hooks, the
veto and ``force`` (here over the local backend, which has none of them itself)."""

from __future__ import annotations

import io

import pytest

from hangar.errors import CheckpointError, DestroyVetoed, SandboxNotFound
from hangar.sandboxes import HOME, SandboxInfo, SandboxSpec
from hangar.sandboxes.local import LocalSandboxes
from hangar.sandboxes.policy import SandboxPolicy, guarded
from hangar.testing.sandboxes import run

pytestmark = pytest.mark.sandbox


def test_destroy_runs_hooks_in_order_while_the_sandbox_still_runs(
    sandboxes: LocalSandboxes,
) -> None:
    policy = SandboxPolicy(sandboxes)
    info = policy.create(SandboxSpec())
    policy.put_file(info.id, f"{HOME}/last-words", b"goodbye")
    seen: list[str] = []

    def first(hooked: SandboxInfo) -> None:
        seen.append(f"first {hooked.id}")

    def second(hooked: SandboxInfo) -> None:
        out = io.BytesIO()
        sandboxes.get_file(hooked.id, f"{HOME}/last-words", out)
        seen.append(f"second {out.getvalue().decode()}")

    policy.add_pre_destroy_hook(first)
    policy.add_pre_destroy_hook(second)
    policy.destroy(info.id)
    assert seen == [f"first {info.id}", "second goodbye"]
    with pytest.raises(SandboxNotFound):
        sandboxes.get(info.id)


def test_destroy_with_hooks_false_or_of_a_missing_sandbox_runs_no_hook(
    sandboxes: LocalSandboxes,
) -> None:
    policy = SandboxPolicy(sandboxes)
    info = policy.create(SandboxSpec())
    seen: list[str] = []
    policy.add_pre_destroy_hook(lambda hooked: seen.append(hooked.id))
    policy.destroy(info.id, hooks=False)
    with pytest.raises(SandboxNotFound):
        sandboxes.get(info.id)
    policy.destroy(info.id)  # gone already: nothing to save, nothing to do
    assert seen == []


def test_a_failing_hook_vetoes_the_destroy_unless_forced(sandboxes: LocalSandboxes) -> None:
    policy = SandboxPolicy(sandboxes)
    info = policy.create(SandboxSpec())
    seen: list[str] = []
    failing = [True]

    def checkpoint(hooked: SandboxInfo) -> None:
        if failing[0]:
            raise CheckpointError("the checkpoint failed")

    policy.add_pre_destroy_hook(checkpoint)
    policy.add_pre_destroy_hook(lambda hooked: seen.append(hooked.id))
    with pytest.raises(DestroyVetoed, match="the checkpoint failed") as vetoed:
        policy.destroy(info.id)
    assert vetoed.value.code == "destroy_vetoed" and vetoed.value.data["sandbox_id"] == info.id
    assert policy.get(info.id) == info and run(policy, info.id, "echo alive") == "alive\n"
    assert seen == []
    policy.destroy(info.id, force=True)
    assert seen == [info.id]
    with pytest.raises(SandboxNotFound):
        policy.get(info.id)
    other = policy.create(SandboxSpec())
    failing[0] = False
    policy.destroy(other.id)  # once the cause is gone, an ordinary destroy goes ahead
    with pytest.raises(SandboxNotFound):
        policy.get(other.id)


def test_guarded_wraps_a_bare_backend_once_and_passes_the_port_through(
    sandboxes: LocalSandboxes,
) -> None:
    policy = guarded(sandboxes)
    assert isinstance(policy, SandboxPolicy) and policy.backend is sandboxes
    assert guarded(policy) is policy
    assert policy.capabilities == sandboxes.capabilities
    info = policy.create(SandboxSpec(labels={"policy": "pass"}))
    assert policy.status(info.id) == sandboxes.status(info.id)
    assert [i.id for i in policy.list({"policy": "pass"})] == [info.id]
    assert policy.exec(info.id, ["echo", "through"]).stdout == b"through\n"
