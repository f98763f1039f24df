"""What a finished turn handed back through ``$HANGAR_IO`` (spec 004 "Out"), recorded on the
turn: the summary (``RESULT.md``, else the agent's last message), a question (the turn ends
NEEDS_INPUT), the structured result checked against the turn's ``output_schema``, and the new
or changed artifacts, stored.

A turn with a schema whose result is missing or invalid gets one repair run in the same
conversation (:func:`repair_prompt`; started and finished by :mod:`.turns`); only a result still
missing or invalid after it is the turn's ``result_error``; so is a schema that cannot be
applied (:func:`~hangar.exchange.schemas.validate` raises InvalidSchema: a repair could not
help, so none is run). A turn that ends NEEDS_INPUT gets
no repair and no ``result_error`` (its schema carries over to the answering turn); a turn that
was interrupted, timed out or failed keeps its outcome, and its question is not carried on.
Reading is done once per turn (``collected``), so a finisher that takes over from one that died
does not store the artifacts twice.
"""

from __future__ import annotations

import json
from typing import Any

from hangar.blobs import Blobs
from hangar.config import Settings
from hangar.db import Db
from hangar.errors import InvalidSchema
from hangar.exchange.artifacts import Artifacts
from hangar.exchange.handback import Handback, collect
from hangar.exchange.results import keep_result
from hangar.exchange.schemas import validate
from hangar.keys import Keys
from hangar.models import Repair, Session, Turn, TurnOutcome
from hangar.sandboxes import Sandboxes


def repair_prompt(reason: str, schema: dict[str, Any]) -> str:
    """What the repair run is asked: the reason, and the schema again."""
    return (f"Your structured result for this turn is not usable: {reason}. Save a result that "
            "is valid against the schema below with `hangar-agent result`, then end your turn. "
            "Change nothing else.\nJSON Schema: " + json.dumps(schema, separators=(",", ":")))  # fmt: skip


class HandBacks:
    """Reads and records what turns hand back."""

    def __init__(self, settings: Settings, db: Db, blobs: Blobs, keys: Keys,
                 sandboxes: Sandboxes) -> None:  # fmt: skip
        self.settings = settings
        self.db = db
        self.blobs = blobs
        self.keys = keys
        self.sandboxes = sandboxes
        self.artifacts = Artifacts(settings, blobs, keys, sandboxes)

    def read(self, session: Session, turn: Turn) -> Turn:
        """Record what the turn (its run ended, its outcome recorded) handed back, and, when its
        result needs the repair run, that run (to start), in the same write."""
        handback = collect(self.sandboxes, session, self.settings)
        earlier = [t for t in self.db.list_turns(session.id) if t.n < turn.n]
        stored, skipped = self.artifacts.store(session, turn.n, handback.artifacts, earlier)
        good = turn.outcome is TurnOutcome.EXITED
        changes: dict[str, Any] = {"collected": True, "artifacts": stored,
                                   "warnings": [*turn.warnings, *handback.warnings, *skipped]}  # fmt: skip
        if good and handback.summary:
            changes["summary"] = handback.summary
        if good and handback.question:
            changes.update(outcome=TurnOutcome.NEEDS_INPUT, question=handback.question,
                           question_options=handback.options)  # fmt: skip
        if good and not handback.question:
            try:
                value, why = self._checked(handback, turn.output_schema)
            except InvalidSchema as exc:
                changes["result_error"] = exc.message
                return self.db.update_turn(turn.model_copy(update=changes))
            if why is None and value is not None:
                changes.update(keep_result(self.blobs, self.keys, turn, value))
            elif why is not None and turn.output_schema is not None:
                changes["repair"] = Repair(run_id=f"{turn.run_id}-repair", reason=why)
            elif why is not None and handback.result_present:
                changes["warnings"].append(f"the result was left out: {why}")
        return self.db.update_turn(turn.model_copy(update=changes))

    def read_repaired(self, session: Session, turn: Turn, failure: str | None) -> dict[str, Any]:
        """The turn's changes once its repair run has ended (``failure``: why it went wrong)."""
        assert turn.output_schema is not None
        try:
            value, why = self._checked(collect(self.sandboxes, session, self.settings),
                                       turn.output_schema)  # fmt: skip
        except InvalidSchema as exc:
            return {"result_error": exc.message}
        if why is None:
            return keep_result(self.blobs, self.keys, turn, value)
        if failure:
            why = f"{why}; {failure}"
        return {"result_error": f"{why} (after a repair turn)"}

    def _checked(self, handback: Handback, schema: dict[str, Any] | None) -> tuple[Any, str | None]:
        value, why = handback.result(self.settings.max_result_bytes)
        if why is None and schema is not None:
            invalid = validate(value, schema)
            if invalid:
                return None, f"out/result.json does not match the schema: {invalid}"
        if why is not None and schema is None and not handback.result_present:
            return None, None  # no schema, no result: nothing asked, nothing wrong
        return value, why
