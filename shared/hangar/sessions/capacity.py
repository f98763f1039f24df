"""How many sandboxes may live at once (``HANGAR_MAX_SANDBOXES``), whatever the backend.

Each sandbox may use ``HANGAR_SANDBOX_MEMORY_MB``; the default cap is what this machine's
memory holds at that (:mod:`hangar.config`) on local sandboxes, and none (0) on a cluster,
whose own quotas and node limits hold (no sandbox is counted then: listing a cluster's
sandboxes costs API requests on every start). A start past it is refused with
:class:`~hangar.errors.CapacityExhausted` (503, ``retry_after``) rather than overcommitting.
It is checked twice:

- **At the request** (:meth:`Capacity.check`): ``new``, ``fork``, and ``send`` or ``open`` of a
  session with no live sandbox, count the backend's live sandboxes plus the starts that have
  claimed a place but not yet made their sandbox (STARTING sessions with none recorded). When
  the new ones would not fit, the request is refused before anything is stored: no session
  record, no turn, no context sealed, the session as it was.
- **When a start makes its sandbox** (:func:`admit`, the ``creating_sandbox`` step): requests
  that raced past the first check (their sandboxes did not exist yet) are caught here. The
  sandbox is made, then the live ones are counted again; over the cap, this one is destroyed
  (it holds nothing yet) and the start fails like any failed start: FAILED with ``start_error``
  code ``capacity_exhausted``, its turn FAILED with that code, nothing stuck and no work lost
  (``send`` or ``open`` start it again once a place is free). Counting after making means two
  starts racing for the last place never both keep a sandbox (both may lose it).

Sandboxes that are not a session's (``hangar doctor``'s probe) take a place while they live, but
are never refused.
"""

from __future__ import annotations

from datetime import datetime

from hangar.config import Settings
from hangar.db import Db
from hangar.errors import CapacityExhausted, SandboxNotFound
from hangar.models import Session, SessionState as S
from hangar.sandboxes import SandboxInfo, Sandboxes
from hangar.sandboxes.policy import SandboxPolicy

RETRY_SECONDS = 60
"""What a refusal's ``Retry-After`` says: places free as sessions suspend or are deleted."""

_PAGE = 200


def needs_sandbox(sandboxes: Sandboxes, session: Session) -> bool:
    """Whether a start of the session (a send, an open) would make a new sandbox: it is not
    busy (busy ones are refused as such) and names no live sandbox."""
    if session.state not in (S.IDLE, S.SUSPENDED, S.FAILED):
        return False
    if not session.sandbox_id:
        return True
    try:
        sandboxes.get(session.sandbox_id)
    except SandboxNotFound:
        return True
    return False


class Capacity:
    """The request-time check (see the module doc)."""

    def __init__(self, settings: Settings, db: Db, sandboxes: Sandboxes) -> None:
        self.settings = settings
        self.db = db
        self.sandboxes = sandboxes

    def check(self, need: int = 1) -> None:
        """CapacityExhausted when ``need`` more sandboxes would pass the cap, counting the live
        ones and the starts still making theirs. No cap (0): nothing is counted."""
        if not self.settings.max_sandboxes:
            return
        live = self.sandboxes.list()
        taken = len(live) + self._making({i.id for i in live})
        if taken + need > self.settings.max_sandboxes:
            raise refusal(self.settings.max_sandboxes, taken, need)

    def check_for(self, session: Session) -> None:
        """:meth:`check` for a start of ``session`` (a send, an open), when it needs a sandbox."""
        if self.settings.max_sandboxes and needs_sandbox(self.sandboxes, session):
            self.check()

    def _making(self, live: set[str]) -> int:
        """STARTING sessions whose sandbox is not among the live ones yet."""
        count = 0
        after: tuple[datetime, str] | None = None
        while True:
            page = self.db.page_sessions(_PAGE, after, state=S.STARTING)
            count += sum(1 for s in page if s.sandbox_id not in live)
            if len(page) < _PAGE:
                return count
            after = (page[-1].created_at, page[-1].id)


def admit(settings: Settings, sandboxes: SandboxPolicy, info: SandboxInfo) -> None:
    """After ``info`` was made for a start: when more sandboxes than the cap now live, destroy
    it (no hooks: it holds nothing yet) and raise CapacityExhausted. No cap (0): nothing
    is counted."""
    if not settings.max_sandboxes:
        return
    live = len(sandboxes.list())
    if live > settings.max_sandboxes:
        sandboxes.destroy(info.id, hooks=False)
        raise refusal(settings.max_sandboxes, live - 1, 1)


def refusal(cap: int, taken: int, need: int) -> CapacityExhausted:
    what = "a sandbox" if need == 1 else f"{need} sandboxes"
    return CapacityExhausted(
        f"no room for {what}: {taken} of the {cap} places (HANGAR_MAX_SANDBOXES) are taken; "
        "suspend a session, or try again later", limit=cap, taken=taken,
        retry_after=RETRY_SECONDS,
    )  # fmt: skip
