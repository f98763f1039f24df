"""The ``gke://`` backend's warm pools: one ``SandboxWarmPool`` per environment over one
``SandboxTemplate``, kept in step with the environment (:mod:`hangar.sandboxes.gke.manifests`
makes the manifests).

Contract of :meth:`WarmPools.ensure`: after it returns, the pool exists, points at the template
of the image, pod settings and network asked for (made if missing, with the backend's default
``replicas``) and recreates its unclaimed ones on a repointing; an existing pool's replicas are
never changed by it (they are :meth:`WarmPools.keep`'s, which sets them when they differ); a
pool found on another template has that template and any older one deleted unless a live
claim was made on it (a template's NetworkPolicy goes with the template, and so would the
policy of that claim's sandbox). What
it did is cached per pool: asked again for the same within :attr:`WarmPools.fresh` seconds, it
makes no request; later, one (the pool read; another process may have repointed it meanwhile).
Not locked: two threads racing do the same idempotent requests twice.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from hangar.errors import HangarError, SandboxError, SandboxNotFound
from hangar.sandboxes.gke import manifests as objects
from hangar.sandboxes.gke.manifests import PodSettings

__all__ = ["AlreadyThere", "WarmPools"]

logger = logging.getLogger(__name__)

_CACHE = 4096  # pools remembered per backend


class AlreadyThere(SandboxError):
    """409 AlreadyExists on a create (internal: a template or pool made before)."""


class WarmPools:
    """The pools of one namespace, through the client's ``CustomObjectsApi``; ``translate``
    turns the client's exceptions (``caught``) into hangar's (409: :class:`AlreadyThere`)."""

    fresh = 60.0
    """Seconds a pool brought in step is trusted to stay so without a look."""

    def __init__(self, api: Any, namespace: str, pod: PodSettings, policy: dict[str, Any],
                 replicas: int,
                 translate: Callable[[BaseException], HangarError],
                 caught: tuple[type[BaseException], ...]) -> None:  # fmt: skip
        self.api = api
        self.namespace = namespace
        self.pod = pod
        self.policy = policy
        self.replicas = replicas
        self._translate = translate
        self._caught = caught
        self._known: dict[str, tuple[str, float]] = {}  # pool -> (template, when checked)

    def ensure(self, pool: str, image: str, replicas: int | None = None) -> str:
        """Bring ``pool`` in step for ``image`` (the module's contract); returns the name of
        its template. ``replicas``: what a pool made here starts with (default: the
        backend's); an existing pool's are left as they are."""
        template = objects.template_name(pool, image, self.pod, self.policy)
        want = _without_replicas(objects.pool_spec(template, 0))
        known, checked = self._known.get(pool, ("", 0.0))
        if known == template:
            if time.monotonic() < checked + self.fresh:
                return template
            try:
                if self._in_step(self._request("get", objects.POOLS, pool), want):
                    return self._checked(pool, template)
            except SandboxError:
                pass  # gone: made again below
        body = objects.template(template, pool, image, self.pod, self.policy)
        try:
            self._request("create", objects.TEMPLATES, body)
        except AlreadyThere:
            pass  # made by an earlier create, here or elsewhere
        try:
            made = self.replicas if replicas is None else replicas
            self._request("create", objects.POOLS,
                          objects.warm_pool(pool, template, made))  # fmt: skip
        except AlreadyThere:
            found = self._request("get", objects.POOLS, pool)
            if not self._in_step(found, want):
                self._request("patch", objects.POOLS, pool, {"spec": want})
            if ((found.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name") != template:
                self._collect(pool, template)
        return self._checked(pool, template)

    def keep(self, pool: str, image: str | None, replicas: int) -> tuple[int, int]:
        """Keep ``pool`` at ``replicas``: in step for ``image`` first (:meth:`ensure`; None:
        only scaled, and SandboxNotFound if it is missing), then one read, and a patch of the
        count only when it differs. Returns the replicas asked for and those ready now."""
        if image is not None:
            self.ensure(pool, image, replicas)
        found = self._read(pool)
        if found is None:
            raise SandboxNotFound(f"no warm pool {pool}", pool=pool)
        if (found.get("spec") or {}).get("replicas") != replicas:
            found = self._request("patch", objects.POOLS, pool, {"spec": {"replicas": replicas}})
        ready = (found.get("status") or {}).get("readyReplicas") or 0
        return replicas, min(int(ready), replicas)

    def _read(self, pool: str) -> dict[str, Any] | None:
        """The pool, or None when it is missing (404)."""
        try:
            return self.api.get_namespaced_custom_object(  # type: ignore[no-any-return]
                objects.EXTENSIONS_GROUP, objects.VERSION, self.namespace, objects.POOLS, pool)
        except self._caught as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise self._translate(exc) from exc

    def _checked(self, pool: str, template: str) -> str:
        if len(self._known) >= _CACHE:
            self._known.clear()
        self._known[pool] = (template, time.monotonic())
        return template

    @staticmethod
    def _in_step(pool: dict[str, Any], want: dict[str, Any]) -> bool:
        spec = pool.get("spec") or {}
        return all(spec.get(key) == value for key, value in want.items())

    def _collect(self, pool: str, keep: str) -> None:
        """Delete ``pool``'s templates but ``keep`` and those a live claim was made on (they
        are collected at a later repointing)."""
        found = self._request("list", objects.TEMPLATES, None,
                              label_selector=f"{objects.POOL_LABEL}={pool}")  # fmt: skip
        old = {t["metadata"]["name"] for t in found.get("items") or []} - {keep}
        if not old:
            return
        claims = self._request("list", objects.CLAIMS, None, label_selector=(
            f"{objects.TEMPLATE_LABEL} in ({','.join(sorted(old))})"))  # fmt: skip
        used = {(c["metadata"].get("labels") or {}).get(objects.TEMPLATE_LABEL)
                for c in claims.get("items") or []
                if not c["metadata"].get("deletionTimestamp")}  # fmt: skip
        for name in sorted(old - used):
            try:
                self._request("delete", objects.TEMPLATES, name)
            except SandboxError as exc:  # gone already, or the next repointing tries again
                logger.info("template %s not collected: %s", name, exc.message)

    def _request(self, verb: str, plural: str, name_or_body: Any, body: Any = None,
                 **options: Any) -> Any:  # fmt: skip
        """One call of ``verb`` on an extension kind in the namespace."""
        call = getattr(self.api, f"{verb}_namespaced_custom_object")
        args: tuple[Any, ...] = (objects.EXTENSIONS_GROUP, objects.VERSION, self.namespace,
                                 plural)  # fmt: skip
        if name_or_body is not None:
            args = (*args, name_or_body)
        if body is not None:
            args = (*args, body)
        try:
            return functools.partial(call, *args, **options)()
        except self._caught as exc:
            raise self._translate(exc) from exc


def _without_replicas(spec: dict[str, Any]) -> dict[str, Any]:
    """A pool's spec less its replicas (what :meth:`WarmPools.ensure` keeps in step)."""
    return {key: value for key, value in spec.items() if key != "replicas"}
