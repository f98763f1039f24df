"""Whether a harness has written a conversation, looked for in a real sandbox as a stopped turn's
end looks for it: a file that is not empty, named for the id, in that harness's conversation
folder, and nowhere else."""

from __future__ import annotations

import pytest

from hangar.harnesses import get_harness
from hangar.harnesses.turns import conversation_saved
from hangar.sandboxes import HOME, SandboxSpec
from hangar.sandboxes.local import LocalSandboxes

pytestmark = pytest.mark.sandbox

PI_ID = "01a24241-6552-7470-8224-9cfc27fa08c0"


def test_a_conversation_is_saved_once_its_harness_wrote_a_file_named_for_it(
    sandboxes: LocalSandboxes,
) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    pi, codex = get_harness("pi"), get_harness("codex")
    folder = f"{HOME}/.pi/agent/sessions/--workspace-app--"
    assert not conversation_saved(sandboxes, sandbox, pi, PI_ID)  # no folder yet
    sandboxes.put_file(sandbox, f"{folder}/2026-12-04T18-11-51-763Z_{PI_ID}.jsonl", b"")
    assert not conversation_saved(sandboxes, sandbox, pi, PI_ID)  # made, nothing in it
    sandboxes.put_file(sandbox, f"{folder}/2026-12-04T18-11-51-763Z_{PI_ID}.jsonl", b"{}\n")
    assert conversation_saved(sandboxes, sandbox, pi, PI_ID)
    assert not conversation_saved(sandboxes, sandbox, codex, PI_ID)  # another harness's folder
    assert not conversation_saved(sandboxes, sandbox, pi, "01a24241-0000")  # another id


def test_an_id_that_is_not_a_plain_name_is_never_looked_for(sandboxes: LocalSandboxes) -> None:
    sandbox = sandboxes.create(SandboxSpec()).id
    pi = get_harness("pi")
    sandboxes.put_file(sandbox, f"{HOME}/.pi/agent/sessions/x/any.jsonl", b"{}\n")
    for pattern in ("*", "any*", "[a]ny", "../x", "-name"):
        assert not conversation_saved(sandboxes, sandbox, pi, pattern), pattern
    assert conversation_saved(sandboxes, sandbox, pi, "any")
