"""The launcher: :class:`KubeStandIn`, a context manager serving the stand-in from a thread."""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from hangar.sandboxes import Sandboxes

from emulators.processes import ThreadedStandIn

from . import kinds
from .backing import PodSandboxes
from .controller import Controller, PodHook
from .exec import exec_handler
from .pods import Knobs
from .server import KubeServer
from .store import Obj, Store


class KubeStandIn(ThreadedStandIn):
    """The stand-in on ``host:port`` (port 0 picks a free one).

    - ``token`` is the bearer token every request must carry (made at random when not given);
      ``kubeconfig`` is a file, written by :meth:`start` and removed by :meth:`stop`, naming
      the server, the token and the context ``context`` (namespace ``default``, which exists).
    - ``knobs`` (:class:`Knobs`) steer how pods start; change them with :meth:`set_knobs`
      (or ``PUT /_stand-in/knobs``), which takes effect at once.
    - ``history`` is how many events watches can resume from; older resourceVersions are
      410 Gone. ``store`` and ``controller`` are exposed for tests and for the exec helper.
    - ``on_pod_created`` / ``on_pod_deleted`` are called with each pod record as it is added
      to or deleted from the store.
    - ``sandboxes`` (a backend such as ``LocalSandboxes``) makes each pod a real sandbox
      (:mod:`.backing`): one is made when the pod is (labels ``kube.namespace``,
      ``kube.pod``, ``kube.uid``; no ``ro_paths``, no ``host_ports``) and the pod turns Ready
      only after it exists; deleting the pod destroys it; :meth:`sandbox_id` names a pod's
      sandbox; ``server.exec_handler`` runs pods/exec in it as the sandbox's hangar user (uid 0
      inside, as a root pod); :meth:`stop` destroys every sandbox made (the backend itself
      stays the caller's). Without it pods are records and exec is 501 until
      ``server.exec_handler`` is set. ``services`` are the host loopback ports every pod
      reaches at ``127.0.0.1:PORT``, as pods reach a cluster's Services (:mod:`.backing`);
      :meth:`set_services` changes them for pods made afterwards. ``on_pod_created`` runs after the sandbox is made,
      ``on_pod_deleted`` after it is destroyed.
    """

    label = "kube stand-in"
    context = "hangar-stand-in"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, verbose: bool = False,
                 token: str | None = None, knobs: Knobs | None = None, history: int = 1000,
                 on_pod_created: PodHook | None = None,
                 on_pod_deleted: PodHook | None = None,
                 sandboxes: Sandboxes | None = None,
                 services: Sequence[int] = ()) -> None:  # fmt: skip
        super().__init__(host, port, verbose=verbose)
        self.token = token or secrets.token_urlsafe(24)
        self.store = Store(history)
        self.pod_sandboxes = (None if sandboxes is None
                              else PodSandboxes(sandboxes, self.store, services))  # fmt: skip
        if self.pod_sandboxes is not None:
            on_pod_created = _chain(self.pod_sandboxes.created, on_pod_created)
            on_pod_deleted = _chain(self.pod_sandboxes.deleted, on_pod_deleted)
        self.controller = Controller(self.store, knobs, on_pod_created=on_pod_created,
                                     on_pod_deleted=on_pod_deleted)  # fmt: skip
        self.kubeconfig = ""
        self._kube_server: KubeServer | None = None
        self.store.create(kinds.NAMESPACES.resource, "", {"metadata": {"name": "default"},
                          "apiVersion": "v1", "kind": "Namespace",
                          "status": {"phase": "Active"}})  # fmt: skip

    @property
    def knobs(self) -> Knobs:
        return self.controller.knobs

    def set_services(self, ports: Sequence[int]) -> None:
        """The host loopback ports pods made from now on reach (ValueError without
        ``sandboxes``: record-only pods reach nothing)."""
        if self.pod_sandboxes is None:
            raise ValueError("services need pods backed by sandboxes")
        self.pod_sandboxes.services = tuple(sorted(set(ports)))

    def set_knobs(self, **change: Any) -> dict[str, Any]:
        """Change knobs by name (ValueError on an unknown one); returns them all."""
        self.knobs.update(change)
        self.controller.poke()
        return self.knobs.as_dict()

    @property
    def server(self) -> KubeServer:
        """The bound HTTP server (its ``exec_handler`` and ``requests`` count)."""
        if self._kube_server is None:
            raise RuntimeError("the kube stand-in is not started")
        return self._kube_server

    def sandbox_id(self, namespace: str, pod: str) -> str | None:
        """The id of pod ``namespace/pod``'s sandbox; None for a pod not there, one without a
        sandbox, or a stand-in without ``sandboxes``."""
        return None if self.pod_sandboxes is None else self.pod_sandboxes.sandbox_id(namespace, pod)

    def make_server(self) -> KubeServer:
        self._kube_server = KubeServer((self.host, self.port), self.store, self.token,
                                       knobs=self._knobs_endpoint, verbose=self.verbose)  # fmt: skip
        if self.pod_sandboxes is not None:
            self._kube_server.exec_handler = exec_handler(self.pod_sandboxes.resolve)
        return self._kube_server

    def _knobs_endpoint(self, change: dict[str, Any] | None) -> dict[str, Any]:
        from .store import StoreError

        if change is None:
            return self.knobs.as_dict()
        if not isinstance(change, dict):
            raise StoreError(400, "BadRequest", "knobs must be a JSON object")
        try:
            return self.set_knobs(**change)
        except ValueError as exc:
            raise StoreError(400, "BadRequest", str(exc)) from exc

    def bind(self) -> None:
        super().bind()
        if not self.kubeconfig:
            fd, path = tempfile.mkstemp(prefix="kube-stand-in-", suffix=".yaml")
            with os.fdopen(fd, "w") as out:
                json.dump(self.kubeconfig_doc(), out)  # JSON is YAML
            self.kubeconfig = path

    def start(self) -> Self:
        super().start()
        self.controller.start()
        return self

    def serve_forever(self) -> None:
        self.bind()
        self.controller.start()
        super().serve_forever()

    def stop(self) -> None:
        self.controller.stop()
        super().stop()
        if self.pod_sandboxes is not None:
            self.pod_sandboxes.close()
        self._kube_server = None
        if self.kubeconfig:
            Path(self.kubeconfig).unlink(missing_ok=True)
            self.kubeconfig = ""

    def kubeconfig_doc(self) -> dict[str, Any]:
        """The kubeconfig naming this server, its token and :attr:`context`."""
        name = self.context
        return {"apiVersion": "v1", "kind": "Config", "current-context": name,
                "clusters": [{"name": name, "cluster": {"server": self.url}}],
                "users": [{"name": name, "user": {"token": self.token}}],
                "contexts": [{"name": name, "context": {"cluster": name, "user": name,
                                                        "namespace": "default"}}],
                "preferences": {}}  # fmt: skip

    def environment(self) -> dict[str, str]:
        """``KUBECONFIG`` (the file) and ``HANGAR_KUBE_CONTEXT`` (its context)."""
        return {"KUBECONFIG": self.kubeconfig, "HANGAR_KUBE_CONTEXT": self.context}


def _chain(first: PodHook, then: PodHook | None) -> PodHook:
    """``first(pod)`` then ``then(pod)`` (when given)."""

    def hook(pod: Obj) -> None:
        first(pod)
        if then is not None:
            then(pod)

    return hook
