"""A cluster to run hangar's ``gke://`` sandboxes on: :class:`StandInCluster`, the Kubernetes
stand-in whose pods are real local sandboxes under a folder of its own.

- Each pod is a local sandbox that shows ``harness_dir`` at ``/hangar/harnesses``, as an image
  holding the harness CLIs would (the stand-in pulls no image: every image name runs the
  host's system).
- Pods reach the host loopback ports of :attr:`services` at ``127.0.0.1:PORT``, as pods reach a
  cluster's Services (:mod:`.backing`): a model server, a git server, the storage emulator.
- :meth:`environment` points hangar at it: ``KUBECONFIG`` and ``HANGAR_SANDBOXES`` (the
  stand-in's context, namespace ``default``, :data:`IMAGE` as the default image).

Used by ``emulators/run --sandboxes gke``, the end-to-end tests and the GKE bench lines.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from hangar.sandboxes.local import LocalSandboxes

from emulators.processes import Emulator

from .launcher import KubeStandIn

IMAGE = "hangar-stand-in/sandbox:1"
"""The default image of ``HANGAR_SANDBOXES`` (a name only: the stand-in's pods run the host's
system, whatever image they name)."""
NAMESPACE = "default"


class StandInCluster(Emulator):
    """The stand-in with real pods (the module's contract). ``replicas`` of each warm pool are
    hangar's to set (``gke://...?warm_pool=N``); ``memory_mb`` is each pod's memory limit."""

    def __init__(self, harness_dir: Path | None = None, services: Sequence[int] = (), *,
                 memory_mb: int = 2048) -> None:  # fmt: skip
        self.harness_dir = harness_dir
        self.memory_mb = memory_mb
        self._services = tuple(services)
        self._root: Path | None = None
        self._kube: KubeStandIn | None = None

    @property
    def kube(self) -> KubeStandIn:
        if self._kube is None:
            raise RuntimeError("the stand-in cluster is not started")
        return self._kube

    def start(self) -> Self:
        self._root = Path(tempfile.mkdtemp(prefix="hangar-kube-pods-"))
        pods = LocalSandboxes(self._root / "sandboxes", self.harness_dir,
                              memory_mb=self.memory_mb, disk_gb=0)  # fmt: skip
        self._kube = KubeStandIn(sandboxes=pods, services=self._services).start()
        return self

    def stop(self) -> None:
        if self._kube is not None:
            self._kube.stop()  # destroys every pod's sandbox
            self._kube = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    @property
    def services(self) -> tuple[int, ...]:
        return self._services

    def set_services(self, ports: Sequence[int]) -> None:
        """The host loopback ports pods made from now on reach at ``127.0.0.1:PORT``."""
        self._services = tuple(ports)
        if self._kube is not None:
            self._kube.set_services(ports)

    def sandboxes_url(self, image: str = IMAGE, **options: str | int) -> str:
        """``HANGAR_SANDBOXES`` for this cluster (more URL options as keywords)."""
        query = "&".join(f"{k}={v}" for k, v in {"image": image, **options}.items())
        return f"gke://{self.kube.context}/{NAMESPACE}?{query}"

    def environment(self, image: str = IMAGE, **options: str | int) -> dict[str, str]:
        """The variables that point hangar at this cluster."""
        return {"KUBECONFIG": self.kube.kubeconfig,
                "HANGAR_SANDBOXES": self.sandboxes_url(image, **options)}  # fmt: skip
