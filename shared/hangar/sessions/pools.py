"""Warm pools on a schedule: each environment's pool kept at its ``warm_pool`` within its
``warm_pool_hours`` and at none outside them, on a sandbox backend with pools (gke://).

An environment is *kept* when its ``warm_pool`` is above 0 or it is prebuilt
(``HANGAR_PREBUILD_ENVIRONMENTS``, names or ``all``). For a kept one, :meth:`PoolKeeper.apply`
sets its pool's replicas to what its hours say now (:meth:`PoolKeeper.wanted`: the size within
them, 0 outside; no hours: the size always) through the port's ``keep_pool`` (the pool and its
template made if missing) and schedules the ``pool:<environment>`` tick at the next boundary
(none when the answer never changes). The tick's handler is :meth:`PoolKeeper.apply` again, on
the environment as it is then, so a stale or repeated tick does no harm. Every reaper pass
(:meth:`PoolKeeper.check`) applies every kept environment again: a wrong replica count, a
missing pool and a lost tick are repaired within a pass. An environment that stops being kept
(its ``warm_pool`` set to 0, or deleted) has its pool scaled to 0 and its tick cancelled
(:meth:`PoolKeeper.release`). An environment with no warm pool of its own and not prebuilt is
never touched: its pool keeps what the backend made it with.

Time comes from ``clock`` (tests inject one). Failures of the backend are logged and left to
the next pass; only :meth:`PoolKeeper.apply` called for a person's change raises them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from hangar.config import Settings
from hangar.db import Db
from hangar.errors import EnvironmentNotFound, HangarError
from hangar.models import Environment, utcnow
from hangar.sandboxes import PoolState, Sandboxes
from hangar.sessions import warmhours
from hangar.sessions.schedule import PoolTick, Schedule

__all__ = ["PoolKeeper"]

logger = logging.getLogger(__name__)



class PoolKeeper:
    """Keeps the environments' warm pools (the module's contract)."""

    def __init__(self, settings: Settings, db: Db, sandboxes: Sandboxes, schedule: Schedule,
                 clock: Callable[[], datetime] = utcnow) -> None:  # fmt: skip
        self.settings = settings
        self.db = db
        self.sandboxes = sandboxes
        self.schedule = schedule
        self.clock = clock

    def prebuilt(self, name: str) -> bool:
        """Whether HANGAR_PREBUILD_ENVIRONMENTS names environment ``name`` (or is ``all``)."""
        names = self.settings.prebuilt
        return names is None or name in names

    def kept(self, env: Environment) -> bool:
        """Whether hangar keeps ``env``'s pool: a warm pool of its own, or prebuilt."""
        return env.warm_pool > 0 or self.prebuilt(env.name)

    def wanted(self, env: Environment, at: datetime) -> tuple[int, datetime | None]:
        """The replicas ``env``'s pool should have at ``at``, and when that next changes (None:
        never)."""
        if env.warm_pool == 0 or env.warm_pool_hours is None:
            return env.warm_pool, None
        hours = warmhours.parse(env.warm_pool_hours)
        return (env.warm_pool if hours.active(at) else 0), hours.next_change(at)

    def apply(self, env: Environment) -> PoolState | None:
        """Bring ``env``'s pool to what its hours say now and schedule its next boundary; None
        (and no tick) when it is not kept or the backend has no pools. Raises what
        ``keep_pool`` raises (the tick stays scheduled: the next pass tries again)."""
        if not self.sandboxes.capabilities.pools or not self.kept(env):
            self.schedule.pool(env.name, None)
            return None
        replicas, change = self.wanted(env, self.clock())
        self.schedule.pool(env.name, change)
        return self.sandboxes.keep_pool(env.name, image=env.image, replicas=replicas)

    def release(self, env: Environment) -> None:
        """``env`` is no longer kept (deleted, or its warm pool set to 0): its tick cancelled
        and, where it had a pool of hangar's, the pool scaled to 0 (a failure logged)."""
        self.schedule.pool(env.name, None)
        if not self.sandboxes.capabilities.pools:
            return
        try:
            self.sandboxes.keep_pool(env.name, image=env.image, replicas=0)
        except HangarError as exc:
            logger.warning("could not scale environment %s's warm pool to 0: %s", env.name,
                           exc.message)  # fmt: skip

    def changed(self, before: Environment | None, after: Environment) -> PoolState | None:
        """An environment added (``before`` None) or updated: applied at once; one that stops
        being kept is released."""
        if before is not None and self.kept(before) and not self.kept(after):
            self.release(after)
            return None
        return self.apply(after)

    def handle(self, tick: PoolTick) -> None:
        """A ``pool`` tick: apply the environment as it is now (a deleted one: nothing)."""
        try:
            env = self.db.get_environment(tick.environment)
        except EnvironmentNotFound:
            self.schedule.pool(tick.environment, None)
            return
        self._applied(env)

    def check(self) -> list[str]:
        """The reaper pass: apply every kept environment (repairing a wrong count, a missing
        pool or a lost tick). Returns the names applied without error."""
        if not self.sandboxes.capabilities.pools:
            return []
        return [e.name for e in self.db.list_environments() if self.kept(e) and self._applied(e)]

    def prebuild(self) -> list[str]:
        """At start: every prebuilt environment's template and pool made (applied); a name that
        is no environment is a warning in the log. Returns the names applied without error."""
        unknown = self.unknown_prebuilds()
        if unknown:
            logger.warning("HANGAR_PREBUILD_ENVIRONMENTS names no environment %s: not prebuilt",
                           ", ".join(unknown))  # fmt: skip
        if not self.sandboxes.capabilities.pools:
            if self.settings.prebuild_environments.strip():
                logger.warning("HANGAR_PREBUILD_ENVIRONMENTS is set, but this sandbox backend "
                               "has no warm pools (a GKE feature): nothing is prebuilt")
            return []
        return [e.name for e in self.db.list_environments()
                if self.prebuilt(e.name) and self._applied(e)]  # fmt: skip

    def unknown_prebuilds(self) -> list[str]:
        """The names HANGAR_PREBUILD_ENVIRONMENTS gives that are no environment, sorted."""
        names = self.settings.prebuilt
        if not names:
            return []
        return sorted(names - {e.name for e in self.db.list_environments()})

    def _applied(self, env: Environment) -> bool:
        try:
            self.apply(env)
        except HangarError as exc:  # the next pass tries again
            logger.warning("keeping environment %s's warm pool failed: %s", env.name,
                           exc.message)  # fmt: skip
            return False
        return True
