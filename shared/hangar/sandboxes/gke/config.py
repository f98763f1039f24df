"""The ``gke://`` backend's URL and credentials: what ``HANGAR_SANDBOXES=gke://...`` says, the
client's Configuration (a kubeconfig context, or an endpoint with Google's default
credentials), and the control plane's address (what a sandbox's NetworkPolicy denies).

Nothing imports ``kubernetes`` until :func:`configuration` is called.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from hangar.config import Settings
from hangar.errors import InvalidSettings

__all__ = ["configuration", "control_plane", "parse_url"]

_OPTIONS = ("image", "runtime_class", "warm_pool", "deny")

def parse_url(url: str) -> tuple[str, str, dict[str, str]]:
    """``gke://CONTEXT/NAMESPACE[?image=REF&runtime_class=NAME&warm_pool=N&deny=CIDR,...]`` ->
    (context, namespace, options), ``warm_pool`` a count and ``deny`` CIDRs, checked.
    InvalidSettings naming HANGAR_SANDBOXES otherwise."""
    rest, _, query = url.partition("?")
    head, _, namespace = rest.removeprefix("gke://").rpartition("/")
    options = {k: v[-1] for k, v in parse_qs(query).items()}
    unknown = set(options) - set(_OPTIONS)
    try:
        if int(options.get("warm_pool", "0")) < 0:
            raise ValueError("warm_pool below 0")
        for cidr in filter(None, options.get("deny", "0.0.0.0/32").split(",")):
            ipaddress.ip_network(cidr)
        bad = ""
    except ValueError as exc:
        bad = f" ({exc})"
    if not url.startswith("gke://") or not head or not namespace or unknown or bad:
        raise InvalidSettings(
            f"HANGAR_SANDBOXES: expected gke://CONTEXT/NAMESPACE[?image=REF&warm_pool=N&"
            f"deny=CIDR,...], got {url!r}{bad}"
            + (f" (unknown options: {', '.join(sorted(unknown))})" if unknown else ""),
            setting="HANGAR_SANDBOXES",
        )
    return unquote(head), unquote(namespace), options


def ca_file(ca: str) -> str:
    """A file holding the CA ``ca`` names: ``ca`` itself when it is a path; PEM text
    (``-----BEGIN``, as Terraform passes a cluster's CA in an environment variable) is written
    once to a file of its own (named by its hash, 0600, in the temporary folder), since the
    client takes CA files only. A CA certificate is public: nothing secret is written."""
    if not ca.lstrip().startswith("-----BEGIN"):
        return ca
    data = ca.strip().encode() + b"\n"
    name = f"hangar-gke-ca-{hashlib.sha256(data).hexdigest()[:16]}.pem"
    path = Path(tempfile.gettempdir()) / name
    try:
        if path.read_bytes() == data:
            return str(path)
    except OSError:
        pass
    fd, temp = tempfile.mkstemp(prefix=".hangar-gke-ca-", dir=path.parent)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(temp, path)
    return str(path)


def configuration(context: str, settings: Settings) -> Any:
    """The client's Configuration: HANGAR_GKE_ENDPOINT with HANGAR_GKE_CA and a token of
    Google's default credentials (refreshed before it expires) when set, else the kubeconfig's
    ``context``. InvalidSettings when neither can be loaded."""
    from kubernetes import client, config

    cfg: Any = client.Configuration()
    if settings.gke_endpoint:
        cfg.host = settings.gke_endpoint
        cfg.ssl_ca_cert = ca_file(settings.gke_ca) if settings.gke_ca else None
        cfg.api_key_prefix = {"authorization": "Bearer"}
        cfg.refresh_api_key_hook = _google_token
        return cfg
    # KUBECONFIG as it is now: the client reads it once, when it is first imported.
    files = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=files, context=context, client_configuration=cfg,
            persist_config=False)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise InvalidSettings(f"HANGAR_SANDBOXES: cannot load kubeconfig context {context!r}: "
                              f"{exc}", setting="HANGAR_SANDBOXES") from exc  # fmt: skip
    return cfg


def _google_token(cfg: Any) -> None:
    """Configuration.refresh_api_key_hook: a fresh access token of the default credentials."""
    import google.auth
    import google.auth.transport.requests

    creds = getattr(cfg, "_hangar_credentials", None)
    if creds is None:
        creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        cfg._hangar_credentials = creds
    if not creds.valid:
        creds.refresh(google.auth.transport.requests.Request())
    cfg.api_key = {"authorization": creds.token}



def control_plane(host: str | None) -> tuple[str, ...]:
    """The API server's address as a CIDR, when ``host`` names it by IP address (a name is
    not resolved: a private control plane is in the internal ranges, a public one is named by
    address on GKE)."""
    try:
        address = ipaddress.ip_address(urlsplit(host or "").hostname or "")
    except ValueError:
        return ()
    return (f"{address}/{address.max_prefixlen}",)
