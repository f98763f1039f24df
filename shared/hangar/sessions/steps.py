"""A turn's steps (spec 002 "Trees"): the git tree of the working tree at the turn's start, after
each edit or shell step of a live turn, and at its end, and each step's patch against the turn's
first tree, kept with the session so that any step can be shown days later with no git in the
control plane.

As the turn ends, a live turn's driver (:mod:`hangar.agent.driver`), or a one-shot turn's run
supervisor (:mod:`hangar.agent.run`: its start and end only), writes ``steps.jsonl`` into the
run's folder (hangar's folder: the agent can neither write nor replace it), one line a step
with its patch. :meth:`Steps.keep`, at the turn's finish, reads it (bounded), seals it whole into
blobs at ``sessions/<session>/turns/<n>/steps`` under a fresh data key and answers the steps
for the turn's record (without their patches); :meth:`Steps.show` reads one step's patch back.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from hangar.blobs import Blobs
from hangar.errors import InvalidInput, NotFound
from hangar.keys import Keys
from hangar.keys.envelope import new_data_key, seal_bytes, unseal_bytes
from hangar.models import Session, Turn, TreeStep
from hangar.processes.runs import run_dir
from hangar.sandboxes import Sandboxes, SandboxUser

MAX_STEPS_BYTES = 24 << 20
"""The most of a run's ``steps.jsonl`` read (the driver writes at most 16 MiB of patches,
base64 and the steps' fields on top)."""


def steps_key(session_id: str, n: int) -> str:
    """Where turn ``n``'s steps are sealed (also their associated data)."""
    return f"sessions/{session_id}/turns/{n}/steps"


@dataclass(frozen=True)
class Shown:
    """One step and its patch against the turn's first tree."""

    step: TreeStep
    patch: bytes


class Steps:
    """Keeps and shows the steps of sessions' turns."""

    def __init__(self, sandboxes: Sandboxes, blobs: Blobs, keys: Keys) -> None:
        self.sandboxes, self.blobs, self.keys = sandboxes, blobs, keys

    def keep(self, session: Session, turn: Turn) -> tuple[list[TreeStep], str | None]:
        """Read the turn's ``steps.jsonl`` from its run's folder, seal it into blobs; the steps
        and the wrapped data key (``([], None)`` when the driver wrote none)."""
        assert session.sandbox_id is not None
        read = self.sandboxes.exec(session.sandbox_id, ["head", "-c", str(MAX_STEPS_BYTES),
                                                        f"{run_dir(turn.run_id)}/steps.jsonl"],
                                   user=SandboxUser.HANGAR)  # fmt: skip
        if not read.ok or not read.stdout:
            return [], None
        steps = [step for step, _ in _parse(read.stdout)]
        if not steps:
            return [], None
        data_key = new_data_key()
        key = steps_key(session.id, turn.n)
        self.blobs.put(key, seal_bytes(data_key, key.encode(), read.stdout))
        return steps, base64.b64encode(self.keys.wrap(data_key)).decode()

    def show(self, session: Session, turn: Turn, step: int) -> Shown:
        """Step ``step`` of ``turn`` with its patch. InvalidInput for a step it does not have;
        NotFound when the turn recorded no steps."""
        if turn.steps_key is None or not turn.steps:
            raise NotFound(f"turn {turn.n} of {session.name} recorded no steps",
                           session=session.name, turn=turn.n)  # fmt: skip
        if not 0 <= step < len(turn.steps):
            raise InvalidInput(f"step must be from 0 to {len(turn.steps) - 1} (turn {turn.n}'s "
                               f"steps), not {step}", field="step")  # fmt: skip
        key = steps_key(session.id, turn.n)
        data_key = self.keys.unwrap(base64.b64decode(turn.steps_key))
        data = unseal_bytes(data_key, key.encode(), self.blobs.get(key))
        for found, patch in _parse(data):
            if found.step == step:
                return Shown(found, patch)
        raise InvalidInput(f"turn {turn.n} has no step {step}", field="step")


def _parse(data: bytes) -> list[tuple[TreeStep, bytes]]:
    """The steps in ``steps.jsonl`` with their patches; lines that do not parse are skipped
    (the file is hangar's, but read as data all the same)."""
    found: list[tuple[TreeStep, bytes]] = []
    for line in data.splitlines():
        try:
            value = json.loads(line)
            patch = base64.b64decode(value.pop("patch", "") or "", validate=True)
            step = TreeStep.model_validate({**value, "size": len(patch)})
        except (ValueError, TypeError, AttributeError, binascii.Error):
            continue
        found.append((step, patch))
    return found
