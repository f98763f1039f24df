"""A Kubernetes API stand-in serving the Agent Sandbox kinds, for the official client.

No Kubernetes API server can run on these machines, so this one speaks the wire protocol:
discovery, namespaces, pods (records, with a hook for whatever runs them), Sandbox,
SandboxTemplate, SandboxWarmPool and SandboxClaim (v1beta1, strictly checked), watches with
an ordered ``resourceVersion`` and ``410 Gone``, and a controller that fills pools and binds
claims. ``KubeStandIn().start().kubeconfig`` is a kubeconfig file the client loads unchanged::

    config.load_kube_config(config_file=stand_in.kubeconfig, context=stand_in.context)
"""

from __future__ import annotations

from .launcher import KubeStandIn
from .pods import Knobs

__all__ = ["Knobs", "KubeStandIn"]
