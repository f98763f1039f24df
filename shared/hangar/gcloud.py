"""What the Google Cloud backends share: the one table that turns the Google client libraries'
exceptions into hangar's (as httpx maps its transport errors: one table, every class named).

Each backend first handles the few vendor errors that mean something to it (a blob that
exists, a ciphertext the key refuses), then passes anything else to :func:`translate`, so no
vendor exception ever escapes a backend. :func:`vendor_errors` is what a backend catches. A
test walks ``google.api_core.exceptions`` and ``google.auth.exceptions`` and fails on any class
the table does not name: a new one in a client release cannot slip through as a 500.

Nothing here imports a Google library until it is used.
"""

from __future__ import annotations

import functools
import importlib

from hangar.errors import AlreadyExists, BackendError, HangarError, VersionConflict

_API = "google.api_core.exceptions"
_AUTH = "google.auth.exceptions"

# Module, class name -> what it becomes. Conflicts a caller can retry (a transaction that lost
# a race, a precondition on a generation) are VersionConflict; an object that exists already is
# AlreadyExists; everything else (the service's refusals, quotas, outages, transport, auth) is
# a BackendError, naming the class, and 503 to a client.
TABLE: dict[tuple[str, str], type[HangarError]] = {
    (_API, "GoogleAPIError"): BackendError,
    (_API, "GoogleAPICallError"): BackendError,
    (_API, "RetryError"): BackendError,
    (_API, "DuplicateCredentialArgs"): BackendError,
    (_API, "Redirection"): BackendError,
    (_API, "MovedPermanently"): BackendError,
    (_API, "NotModified"): BackendError,
    (_API, "TemporaryRedirect"): BackendError,
    (_API, "ResumeIncomplete"): BackendError,
    (_API, "ClientError"): BackendError,
    (_API, "BadRequest"): BackendError,
    (_API, "InvalidArgument"): BackendError,
    (_API, "FailedPrecondition"): BackendError,
    (_API, "OutOfRange"): BackendError,
    (_API, "Unauthorized"): BackendError,
    (_API, "Unauthenticated"): BackendError,
    (_API, "Forbidden"): BackendError,
    (_API, "PermissionDenied"): BackendError,
    (_API, "NotFound"): BackendError,
    (_API, "MethodNotAllowed"): BackendError,
    (_API, "Conflict"): VersionConflict,
    (_API, "AlreadyExists"): AlreadyExists,
    (_API, "Aborted"): VersionConflict,
    (_API, "LengthRequired"): BackendError,
    (_API, "PreconditionFailed"): VersionConflict,
    (_API, "RequestRangeNotSatisfiable"): BackendError,
    (_API, "TooManyRequests"): BackendError,
    (_API, "ResourceExhausted"): BackendError,
    (_API, "Cancelled"): BackendError,
    (_API, "ServerError"): BackendError,
    (_API, "InternalServerError"): BackendError,
    (_API, "Unknown"): BackendError,
    (_API, "DataLoss"): BackendError,
    (_API, "MethodNotImplemented"): BackendError,
    (_API, "BadGateway"): BackendError,
    (_API, "ServiceUnavailable"): BackendError,
    (_API, "GatewayTimeout"): BackendError,
    (_API, "DeadlineExceeded"): BackendError,
    (_API, "AsyncRestUnsupportedParameterError"): BackendError,
    (_API, "MissingStatusHeaderError"): BackendError,
    (_API, "ResumableTransferError"): BackendError,
    (_API, "TransferStalledError"): BackendError,
    (_API, "UnseekableStreamError"): BackendError,
    (_API, "UploadCancelledError"): BackendError,
    (_AUTH, "GoogleAuthError"): BackendError,
    (_AUTH, "TransportError"): BackendError,
    (_AUTH, "RefreshError"): BackendError,
    (_AUTH, "UserAccessTokenError"): BackendError,
    (_AUTH, "DefaultCredentialsError"): BackendError,
    (_AUTH, "MutualTLSChannelError"): BackendError,
    (_AUTH, "ClientCertError"): BackendError,
    (_AUTH, "OAuthError"): BackendError,
    (_AUTH, "ReauthFailError"): BackendError,
    (_AUTH, "ReauthSamlChallengeFailError"): BackendError,
    (_AUTH, "MalformedError"): BackendError,
    (_AUTH, "InvalidResource"): BackendError,
    (_AUTH, "InvalidOperation"): BackendError,
    (_AUTH, "InvalidValue"): BackendError,
    (_AUTH, "InvalidType"): BackendError,
    (_AUTH, "ResponseError"): BackendError,
    (_AUTH, "TimeoutError"): BackendError,
    (_AUTH, "OSError"): BackendError,
}


@functools.cache
def _resolved() -> dict[type[BaseException], type[HangarError]]:
    table: dict[type[BaseException], type[HangarError]] = {}
    for (module, name), target in TABLE.items():
        cls = getattr(importlib.import_module(module), name, None)
        if isinstance(cls, type):  # a class an older release lacks is simply not there
            table[cls] = target
    return table


@functools.cache
def vendor_errors() -> tuple[type[BaseException], ...]:
    """Every exception type a Google client raises for service and transport failures."""
    kinds: list[type[BaseException]] = list(_resolved())
    for module, name in (("requests.exceptions", "RequestException"), ("grpc", "RpcError"),
                         ("google.cloud.storage.exceptions", "InvalidResponse"),
                         ("google.resumable_media.common", "InvalidResponse")):  # fmt: skip
        try:
            kinds.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue  # that client is not installed, or has no such class
    return tuple(kinds)


def translate(exc: BaseException, what: str, **data: object) -> HangarError:
    """The hangar error for a vendor exception: ``what`` failed, and how (the class and its
    message). The nearest class of the exception that the table names decides the kind."""
    table = _resolved()
    target: type[HangarError] = BackendError
    for cls in type(exc).__mro__:
        if cls in table:
            target = table[cls]
            break
    try:
        message = getattr(exc, "message", None) or str(exc)
    except (AttributeError, TypeError, IndexError):  # a vendor class whose text needs more
        message = ""
    message = message or type(exc).__name__
    return target(f"{what}: {type(exc).__name__}: {message}", vendor=type(exc).__name__, **data)
