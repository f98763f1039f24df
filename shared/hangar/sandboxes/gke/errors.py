"""The ``gke://`` backend's errors: every exception the ``kubernetes`` client and its
transports raise, turned into hangar's by one table (:data:`TABLE`, :func:`translate`), so
that none escapes :mod:`hangar.sandboxes.gke`. Nothing imports the client until
:func:`vendor_errors` is first called.
"""

from __future__ import annotations

import importlib
from typing import Any

from hangar.errors import HangarError, InvalidSettings, SandboxError, SandboxNotFound
from hangar.errors import SandboxUnavailable
from hangar.sandboxes.gke.pools import AlreadyThere

__all__ = ["TABLE", "WatchExpired", "translate", "vendor_errors"]

_K = "kubernetes.client.exceptions"
_C = "kubernetes.config.config_exception"
_U = "urllib3.exceptions"
_W = "websocket._exceptions"

_U_DOWN = ("ProtocolError", "ConnectionError", "MaxRetryError", "TimeoutError", "ReadTimeoutError",
           "ConnectTimeoutError", "NewConnectionError", "NameResolutionError", "EmptyPoolError",
           "ClosedPoolError", "SSLError", "ProxyError", "IncompleteRead")  # fmt: skip
_U_OTHER = ("HTTPError", "HTTPWarning", "PoolError", "RequestError", "DecodeError",
            "HostChangedError", "TimeoutStateError", "FullPoolError", "LocationValueError",
            "LocationParseError", "URLSchemeUnknown", "ResponseError", "SecurityWarning",
            "InsecureRequestWarning", "NotOpenSSLWarning", "SystemTimeWarning",
            "InsecurePlatformWarning", "DependencyWarning", "ResponseNotChunked",
            "BodyNotHttplibCompatible", "InvalidChunkLength", "InvalidHeader",
            "ProxySchemeUnknown", "ProxySchemeUnsupported", "HeaderParsingError",
            "UnrewindableBodyError")  # fmt: skip
_W_DOWN = ("WebSocketConnectionClosedException", "WebSocketTimeoutException",
           "WebSocketAddressException", "WebSocketProxyException")  # fmt: skip
_W_OTHER = ("WebSocketException", "WebSocketProtocolException", "WebSocketPayloadException",
            "WebSocketBadStatusException")  # fmt: skip
_K_ALL = ("OpenApiException", "ApiTypeError", "ApiValueError", "ApiAttributeError", "ApiKeyError",
          "ApiException", "BadRequestException", "NotFoundException", "UnauthorizedException",
          "ForbiddenException", "ServiceException", "ConflictException",
          "UnprocessableEntityException")  # fmt: skip

TABLE: dict[tuple[str, str], type[HangarError]] = {
    **{(_K, name): SandboxError for name in _K_ALL},  # ApiException: by status, in translate
    (_C, "ConfigException"): InvalidSettings,
    **{(_U, name): SandboxUnavailable for name in _U_DOWN},
    **{(_U, name): SandboxError for name in _U_OTHER},
    **{(_W, name): SandboxUnavailable for name in _W_DOWN},
    **{(_W, name): SandboxError for name in _W_OTHER},
}
"""Module, class name -> hangar's error, for every exception class of the client and its
transports (a test walks the modules). An ``ApiException`` is read by its status first
(:func:`translate`): 404 of a sandbox is SandboxNotFound, 409 on create is "already there",
0 (no connection; the websocket helper wraps its failures so), 429 and 5xx are
SandboxUnavailable; 410 Gone (a watch's resourceVersion expired) is :class:`WatchExpired`."""


class WatchExpired(SandboxUnavailable):
    """410 Gone on a watch: its resourceVersion is too old (internal: the watch is resumed
    from a fresh read)."""

_UNAVAILABLE = {0, 429, 500, 502, 503, 504}


def translate(exc: BaseException, sandbox_id: str | None = None) -> HangarError:
    """hangar's error for a client exception (see :data:`TABLE`)."""
    status = getattr(exc, "status", None)
    reason = str(getattr(exc, "reason", "") or exc)
    name = type(exc).__name__
    data: dict[str, Any] = {"sandbox_id": sandbox_id} if sandbox_id else {}
    if isinstance(status, int) and hasattr(exc, "body"):  # an ApiException
        if status == 404 or (status == 0 and "Handshake status 404" in reason):
            if sandbox_id:
                return SandboxNotFound(f"no sandbox {sandbox_id}", **data)
            return SandboxError(f"Kubernetes: not found: {reason}", **data)
        if status == 409:
            return AlreadyThere(f"Kubernetes: already exists: {reason}", **data)
        if status == 410:
            return WatchExpired(f"Kubernetes: watch expired: {reason}"[:2000], **data)
        kind = SandboxUnavailable if status in _UNAVAILABLE else SandboxError
        return kind(f"Kubernetes API {status or 'unreachable'}: {reason}"[:2000], status=status,
                    **data)  # fmt: skip
    for klass in type(exc).__mro__:
        mapped = TABLE.get((klass.__module__, klass.__name__))
        if mapped is not None:
            if mapped is InvalidSettings:
                return InvalidSettings(f"HANGAR_SANDBOXES: kubeconfig: {exc}",
                                       setting="HANGAR_SANDBOXES")  # fmt: skip
            return mapped(f"Kubernetes client: {name}: {exc}"[:2000], **data)
    if isinstance(exc, OSError):
        return SandboxUnavailable(f"Kubernetes API unreachable: {exc}", **data)
    return SandboxError(f"Kubernetes client: {name}: {exc}"[:2000], **data)


_CAUGHT: tuple[type[BaseException], ...] = ()


def vendor_errors() -> tuple[type[BaseException], ...]:
    """The roots of what the client and its transports raise (what this module catches)."""
    global _CAUGHT
    if not _CAUGHT:
        roots = ((_K, "OpenApiException"), (_C, "ConfigException"), (_U, "HTTPError"),
                 (_W, "WebSocketException"))  # fmt: skip
        _CAUGHT = (*(getattr(importlib.import_module(m), n) for m, n in roots), OSError)
    return _CAUGHT
