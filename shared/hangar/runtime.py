"""The runtime: every backend opened once from :class:`~hangar.config.Settings`, and the session
service over them. Entry points (``hangar serve``, the Cloud Run functions, tests) build one;
nothing is opened at import time."""

from __future__ import annotations

from hangar.blobs import Blobs, open_blobs
from hangar.config import Settings
from hangar.db import Db, open_db
from hangar.errors import BackendError
from hangar.keys import Keys, open_keys
from hangar.sandboxes import open_sandboxes
from hangar.sandboxes.policy import SandboxPolicy
from hangar.sessions.service import SessionService
from hangar.ticks import Ticks, open_ticks


class Runtime:
    """Opens the backends the settings name. :meth:`start` delivers ticks to the session
    service (the embedded ticker runs in this process); :meth:`close` stops and closes.
    ``sandboxes_on_first_use`` (the Cloud Run functions) opens the sandbox backend only when a
    sandbox is first used, so a cold start that answers a read never loads it."""

    def __init__(self, settings: Settings, *, sandboxes_on_first_use: bool = False) -> None:
        self.settings = settings
        self.db: Db = open_db(settings.db, settings)
        self.blobs: Blobs = open_blobs(settings.session_store, settings)
        self.keys: Keys = open_keys(settings.keys, settings)
        self._check_key_file()
        # hangar's policy (pre-destroy hooks, the veto, force) over whichever backend it is
        self.sandboxes = SandboxPolicy(open_sandboxes(settings.sandboxes, settings,
                                                      on_first_use=sandboxes_on_first_use))
        self.ticks: Ticks = open_ticks(settings.ticks, settings, self.db)
        self.sessions = SessionService(
            settings, self.db, self.blobs, self.keys, self.sandboxes, self.ticks
        )

    def _check_key_file(self) -> None:
        """A local key file is made on first use; making a new one while checkpoints exist
        would leave every checkpoint undecryptable, so that is refused with a clear error."""
        from hangar.keys.local import LocalKeys

        if isinstance(self.keys, LocalKeys) and not self.keys.path.exists():
            if self.blobs.list("sessions/"):
                raise BackendError(
                    f"the key file {self.keys.path} is missing but checkpoints exist in "
                    f"{self.settings.session_store}: put the key file back (a new key could not "
                    "decrypt them)",
                    path=str(self.keys.path),
                )

    def start(self) -> None:
        self.ticks.start(self.sessions.handle_tick)

    def close(self) -> None:
        self.ticks.stop()
        self.db.close()
