"""A session's sandbox used by hand: commands (exec), shells and terminals, and the agent's own
interactive resume, each holding a lease on the session while it runs.

A lease is an entry of ``Session.shells`` (lease id -> expiry): while one is live the session
is in use, so it never suspends for idleness. Each is added and removed alone (other leases
are never rewritten), renewed every :data:`TOUCH_SECONDS`, and expires by itself if its process
dies. The agent's interactive resume holds a lease whose id starts with :data:`AGENT_LEASE`:
while it is live no turn starts (two processes of the harness would write one conversation),
and while a turn runs it does not open.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import BinaryIO

from hangar.config import Settings
from hangar.errors import HangarError, InvalidInput, NoConversation, SessionBusy, SessionNotRunning
from hangar.harnesses import Invocation
from hangar.models import Session, SessionState as S, utcnow
from hangar.sandboxes import Sandboxes
from hangar.sessions.environments import Environments
from hangar.sessions.records import Records
from hangar.sessions.sandbox import sandbox_alive
from hangar.sessions.schedule import Schedule
from hangar.sessions.turns import Turns
from hangar.sessions.workspace import repo_dir_for

logger = logging.getLogger(__name__)

TOUCH_SECONDS = 30.0
"""How often a held lease is renewed; it expires after twice this without a renewal."""
AGENT_LEASE = "agent-"
Leases = dict[str, datetime]


def live(shells: Leases) -> Leases:
    """The leases that have not expired."""
    now = utcnow()
    return {k: v for k, v in shells.items() if v > now}


def talking(session: Session) -> bool:
    """Whether someone is talking to the session's agent in a terminal now."""
    return any(lease.startswith(AGENT_LEASE) for lease in live(session.shells))


class Shells:
    def __init__(self, settings: Settings, sandboxes: Sandboxes, environments: Environments,
                 records: Records, schedule: Schedule, turns: Turns) -> None:  # fmt: skip
        self.settings = settings
        self.sandboxes = sandboxes
        self.environments = environments
        self.records = records
        self.schedule = schedule
        self.turns = turns

    def running(self, ref: str) -> Session:
        """The session, if it has a live sandbox; SessionNotRunning else."""
        session = self.records.resolve(ref)
        if session.state not in (S.IDLE, S.ACTIVE) or not sandbox_alive(self.sandboxes, session):
            raise SessionNotRunning(
                f"session {session.name} has no sandbox ({session.state.value}); open it first "
                f"(hangar session open {session.name})", session=session.name,
                state=session.state.value,
            )  # fmt: skip
        return session

    def require(self, ref: str, *, agent: bool = False) -> Session:
        """The session, if a terminal can open on it now: a shell needs a sandbox
        (SessionNotRunning else); the agent also a conversation (NoConversation before a turn
        of its harness has named one) and no turn running (SessionBusy)."""
        session = self.running(ref)
        if not agent:
            return session
        if session.state is not S.IDLE:
            raise SessionBusy(
                f"session {session.name} is running a turn: wait for it (hangar session wait "
                f"{session.name}) before talking to the agent; a shell works meanwhile",
                session=session.name, state=session.state.value,
            )  # fmt: skip
        if not session.harness_session:
            raise NoConversation(
                f"session {session.name} has no {session.harness} conversation to resume yet; "
                f"send it a message first (hangar session send {session.name} ...)",
                session=session.name, harness=session.harness,
            )  # fmt: skip
        return session

    def agent_command(self, ref: str) -> Invocation:
        """What the terminal's agent mode runs (through :meth:`exec` with ``agent``): the
        session's harness resuming its conversation interactively, with the model and the whole
        environment a turn gets (variables, opened secrets, ``$HANGAR_IO``, the harness's
        settings) in ``env``, for the process environment; the harness's configuration files
        are written under HOME first. The errors of :meth:`require` with ``agent``."""
        return self.turns.interactive(self.require(ref, agent=True))

    def exec(
        self,
        ref: str,
        argv: list[str],
        *,
        stdin: bytes | BinaryIO | Iterator[bytes] | None = None,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        agent: bool = False,
        cancel: threading.Event | None = None,
    ) -> int:
        """Run a command in the session's repo folder, as the agent, with the environment's
        variables (never its secrets) and ``env`` on top, through the process environment.
        SessionNotRunning when the session has no sandbox (open it first). Holds a lease (the
        agent's with ``agent``) while it runs. Returns its exit status; once ``cancel`` is set
        the command is killed (exit 137) and the lease let go."""
        if not argv:
            raise InvalidInput("exec needs a command")
        session = self.running(ref)
        assert session.sandbox_id is not None
        environment = self.environments.require(session.environment)
        with self.lease(session.id, agent=agent):
            result = self.sandboxes.exec(
                session.sandbox_id, argv, stdin=stdin, stdout=stdout, stderr=stderr,
                env={**environment.vars, **(env or {})}, cwd=repo_dir_for(session.repo or ""),
                timeout=timeout, cancel=cancel,
            )  # fmt: skip
        return result.exit_code

    @contextlib.contextmanager
    def lease(self, session_id: str, *, agent: bool = False) -> Iterator[None]:
        """Hold a lease on the session while the block runs (see the module's doc)."""
        lease = (AGENT_LEASE if agent else "shell-") + uuid.uuid4().hex[:12]
        stop = threading.Event()

        def hold() -> None:
            expiry = utcnow() + timedelta(seconds=2 * TOUCH_SECONDS)
            self.touch(session_id, lambda shells: {**live(shells), lease: expiry})

        def keep_holding() -> None:
            while not stop.wait(TOUCH_SECONDS):
                try:
                    hold()
                except HangarError:
                    logger.warning("could not renew shell lease %s of %s", lease, session_id)

        hold()
        keeper = threading.Thread(target=keep_holding, daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join()
            self.touch(session_id, lambda shells: {k: v for k, v in live(shells).items()
                                                   if k != lease})  # fmt: skip

    def touch(self, session_id: str, shells: Callable[[Leases], Leases] | None = None) -> None:
        """Record use through hangar (activity), extending the sandbox's TTL; ``shells``
        changes the leases of the record as it is now."""
        ttl = timedelta(minutes=self.settings.sandbox_ttl_minutes)

        def change(current: Session) -> dict[str, object]:
            changes: dict[str, object] = {"last_active_at": utcnow(),
                                          "sandbox_expires_at": utcnow() + ttl}  # fmt: skip
            if shells is not None:
                changes["shells"] = shells(current.shells)
            return changes

        session = self.records.modify(session_id, change)
        self.schedule.idle(session)
