"""Approvals (spec 002): a turn whose permission mode is not ``auto`` runs its agent's CLI asking
before each command and edit; the driver publishes each request as a signed ``hangar.approval``
line in the run log (:func:`hangar.agent.commands.signed_event`) and waits for a decision.

:meth:`Approvals.scan` (the turn watch, every couple of seconds) reads the run log from the
turn's ``events_cursor`` through this process's follower of the run (no call into the sandbox
of its own), keeps the lines that verify under the turn's key (the log also carries the agent's
CLI's output, which could print anything) and records each request on the session's
``pending_approvals``; one nobody answers within ``HANGAR_APPROVAL_TIMEOUT_MINUTES`` is denied
with a message saying so. :meth:`Approvals.decide` sends a person's decision to the driver over
the signed command channel (:mod:`.steering`) and takes the approval off the session; an id that
is unknown or answered already is ApprovalNotFound. Nothing is kept in memory: a restarted
control plane reads the same log from the same cursor and answers the same approvals.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

from hangar.agent import commands
from hangar.config import Settings
from hangar.db import Db
from hangar.db.records import modify_session
from hangar.errors import ApprovalNotFound, CommandRefused, TurnEnded, VersionConflict
from hangar.models import PendingApproval, PermissionMode, Session, Turn, utcnow
from hangar.processes.following import RunFollowers
from hangar.redact import redact
from hangar.sessions.environments import Environments
from hangar.sessions.rules import denial
from hangar.sessions.schedule import Schedule
from hangar.sessions.steering import Steering
from hangar.sessions.turns import Turns

logger = logging.getLogger(__name__)

SUMMARY_CHARS = 200
"""The longest summary of a tool's input kept on the session."""
_EVENT = b'"type":"hangar.approval"'


def summary_of(tool: str, tool_input: Any) -> str:
    """One redacted line saying what the tool would do: a command's words, an edit's file."""
    text = ""
    if isinstance(tool_input, dict):
        for name in ("command", "file_path", "path", "notebook_path", "url", "pattern"):
            value = tool_input.get(name)
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            if isinstance(value, str) and value:
                text = value
                break
        else:
            text = json.dumps(tool_input, sort_keys=True)
    summary = " ".join((redact(text) or "").split())
    if len(summary) > SUMMARY_CHARS:
        summary = summary[: SUMMARY_CHARS - 1] + "…"
    return f"{tool}: {summary}" if summary else tool


class Approvals:
    """The pending approvals of sessions' running turns."""

    def __init__(self, settings: Settings, db: Db, turns: Turns, steering: Steering,
                 followers: RunFollowers, environments: Environments,
                 schedule: Schedule) -> None:  # fmt: skip
        self.settings, self.db, self.turns, self.schedule = settings, db, turns, schedule
        self.steering, self.followers, self.environments = steering, followers, environments

    def scan(self, session: Session, turn: Turn) -> None:
        """Record the approvals ``turn``'s driver published since the turn's cursor; deny those
        nobody answered in time. Only for a live turn that asks; reads what this process's
        follower of the run holds."""
        if turn.command_key is None or session.sandbox_id is None or turn.permission_mode == "auto":
            return
        status = self.followers.since(session.sandbox_id, turn.run_id, turn.events_cursor)
        end = status.data.rfind(b"\n") + 1
        found: list[PendingApproval] = []
        key = b""  # unwrapped (a call to the keys port) only when a line may need it
        for line in status.data[:end].splitlines():
            if _EVENT not in line[:40]:
                continue
            key = key or self.turns.command_key(turn) or b""
            try:
                fields = commands.verify_event(key, turn.run_id, json.loads(line))
            except ValueError:
                continue
            if fields is None or not isinstance(fields.get("id"), str):
                continue  # not the driver's: the agent's CLI printed it
            if turn.permission_mode is PermissionMode.DENY_RISKY and self._denied(
                    session, turn, fields):  # fmt: skip
                continue
            asked = datetime.fromtimestamp(float(fields.get("at") or 0), timezone.utc)
            found.append(PendingApproval(id=fields["id"], turn=turn.n,
                                         tool=str(fields.get("tool") or ""),
                                         summary=summary_of(str(fields.get("tool") or ""),
                                                            fields.get("input")),
                                         asked_at=min(asked, utcnow())))  # fmt: skip
        cursor = status.cursor - len(status.data) + end
        if found:
            self._add(session.id, found)
        if cursor != turn.events_cursor:
            self._advance(turn, cursor)
        self._expire(session.id, turn)

    def _denied(self, session: Session, turn: Turn, fields: dict[str, Any]) -> bool:
        """Whether a deny-risky rule denied the request (told to the driver at once)."""
        env = self.environments.require(session.environment)
        found = denial(fields.get("input"), env.deny_rules, env.allowed_hosts)
        if found is None:
            return False
        live = self.steering.live_turn(session)
        if live is not None and live[0].n == turn.n:
            body = {"approval": fields["id"], "allow": False, "message": found.message}
            try:
                self.steering.command(session, live[0], live[1], "decide", body)
            except (TurnEnded, CommandRefused):
                pass  # over, or decided before (a scan after a restart reads it again)
        logger.info("%s of %s denied by rule %s", fields["id"], session.name, found.rule)
        return True

    def decide(self, session: Session, approval_id: str, allow: bool, message: str = "") -> Turn:
        """Send the decision on ``approval_id`` to the running turn's driver and take the
        approval off the session; the turn. ApprovalNotFound for an id that does not wait
        (unknown, answered, or its turn over)."""
        pending = [a for a in session.pending_approvals if a.id == approval_id]
        live = self.steering.live_turn(session)
        if not pending or live is None or live[0].n != pending[0].turn:
            raise ApprovalNotFound(f"session {session.name} has no approval {approval_id} "
                                   "waiting", session=session.name, approval=approval_id)  # fmt: skip
        turn, key = live
        body = {"approval": approval_id, "allow": allow, "message": message}
        try:
            self.steering.command(session, turn, key, "decide", body)
        except TurnEnded:
            self._remove(session.id, approval_id)
            raise
        except CommandRefused:  # the driver has no such approval waiting (decided meanwhile)
            self._remove(session.id, approval_id)
            raise ApprovalNotFound(f"session {session.name} has no approval {approval_id} "
                                   "waiting", session=session.name, approval=approval_id) from None
        self._remove(session.id, approval_id)
        return turn

    def _expire(self, session_id: str, turn: Turn) -> None:
        limit = timedelta(minutes=self.settings.approval_timeout_minutes)
        session = self.db.get_session(session_id)
        for approval in session.pending_approvals:
            if approval.turn == turn.n and utcnow() - approval.asked_at > limit:
                minutes = f"{self.settings.approval_timeout_minutes:g}"
                logger.info("approval %s of %s unanswered for %s minutes: denied",
                            approval.id, session.name, minutes)  # fmt: skip
                try:
                    self.decide(session, approval.id, False, f"denied: nobody answered within "
                                f"{minutes} minutes (HANGAR_APPROVAL_TIMEOUT_MINUTES)")  # fmt: skip
                except (ApprovalNotFound, TurnEnded):
                    pass
                session = self.db.get_session(session_id)

    def _add(self, session_id: str, found: list[PendingApproval]) -> None:
        """Record ``found`` (those not recorded already) and tell HANGAR_NOTIFY_URL of each."""
        new: list[PendingApproval] = []

        def add(kept: list[PendingApproval]) -> list[PendingApproval]:
            known = {a.id for a in kept}
            new[:] = [a for a in found if a.id not in known]
            return kept + new

        self._update(session_id, add)
        if new:
            session = self.db.get_session(session_id)
            for approval in new:
                self.schedule.approval_pending(session, approval.turn, approval.id,
                                               approval.summary,
                                               self.turns.notify_env(session))  # fmt: skip

    def _remove(self, session_id: str, approval_id: str) -> None:
        self._update(session_id, lambda kept: [a for a in kept if a.id != approval_id])

    def _update(self, session_id: str, change: Any) -> None:
        """Change the session's pending approvals as they are now
        (:func:`hangar.db.records.modify_session`: re-read and retried on a concurrent write)."""

        def pending(session: Session) -> dict[str, Any] | None:
            after = change(list(session.pending_approvals))
            return None if after == session.pending_approvals else {"pending_approvals": after}

        modify_session(self.db, session_id, pending)

    def _advance(self, turn: Turn, cursor: int) -> None:
        while True:
            try:
                self.db.update_turn(turn.model_copy(update={"events_cursor": cursor}))
                return
            except VersionConflict:
                turn = self.db.get_turn(turn.session_id, turn.n)
                if turn.events_cursor >= cursor:
                    return
