"""Every error hangar raises on purpose, under one root.

Each class carries a stable ``code`` (what clients match on), an HTTP ``status`` (what the REST
surface answers) and keyword ``data`` fields that say which thing was wrong. Codes never change
once shipped; messages may.

::

    HangarError                         internal            500
    ├── InvalidInput                    invalid_input       400
    │   ├── InvalidName                 invalid_name        400
    │   ├── UnknownHarness              unknown_harness     400
    │   ├── InvalidSettings             invalid_settings    400
    │   ├── InvalidSchema               invalid_schema      400
    │   ├── InvalidContext              invalid_context     400
    │   └── SandboxCapabilityMissing    sandbox_capability_missing 400
    ├── PayloadTooLarge                 payload_too_large   413
    ├── MessageTooLarge                 message_too_large   413
    ├── Unauthorized                    unauthorized        401
    ├── Forbidden                       forbidden           403
    ├── NotFound                        not_found           404
    │   ├── SessionNotFound             session_not_found   404
    │   ├── CheckpointNotFound          checkpoint_not_found 404
    │   ├── EnvironmentNotFound         environment_not_found 404
    │   ├── TokenNotFound               token_not_found     404
    │   ├── SandboxNotFound             sandbox_not_found   404
    │   ├── BlobNotFound                blob_not_found      404
    │   ├── ArtifactNotFound            artifact_not_found  404
    │   ├── ApprovalNotFound            approval_not_found  404
    │   └── UploadNotFound              upload_not_found    404
    ├── Conflict                        conflict            409
    │   ├── VersionConflict             version_conflict    409
    │   ├── AlreadyExists               already_exists      409
    │   ├── NameTaken                   name_taken          409
    │   ├── InvalidState                invalid_state       409
    │   ├── SessionBusy                 session_busy        409
    │   ├── TurnEnded                   turn_ended          409
    │   ├── SessionNotRunning           session_not_running 409
    │   ├── NoConversation              no_conversation     409
    │   ├── EnvironmentInUse            environment_in_use  409
    │   ├── DestroyVetoed               destroy_vetoed      409
    │   └── SourcePruned                checkpoint_source_pruned 409
    ├── SandboxError                    sandbox_error       502
    │   ├── CommandRefused              command_refused     502
    │   ├── SandboxUnavailable          sandbox_unavailable 503
    │   └── ExecTimeout                 exec_timeout        504
    ├── CheckpointError                 checkpoint_failed   500
    │   ├── SealingUnavailable          sealing_unavailable 500
    │   └── RestoreFailed               restore_failed      500
    │       └── NoUsableCheckpoint      no_usable_checkpoint 500
    ├── ArtifactTooLarge                artifact_too_large  413
    ├── TooManyUploads                  too_many_uploads    429
    ├── CapacityExhausted               capacity_exhausted  503
    ├── ContextRejected                 context_rejected    422
    ├── UnsafeArchive                   unsafe_archive      422
    ├── HarnessError                    harness_failed      502
    │   ├── HarnessMissing              harness_missing     502
    │   ├── NoConversationId            no_conversation_id  502
    │   └── ConversationMismatch        conversation_mismatch 502
    ├── CryptoError                     crypto_error        500
    │   └── DecryptionFailed            decryption_failed   500
    ├── NotifyFailed                    notify_failed       502
    └── BackendError                    backend_error       503

An error about a passing shortage (``too_many_uploads``, ``capacity_exhausted``) says in its
``retry_after`` data field when the same call may succeed, in seconds (REST sends it as the
``Retry-After`` header too).

Vendor exceptions (sqlite3, OSError from a backend's own files, google.api_core) are translated
inside the backend module that meets them and never escape it.
"""

from __future__ import annotations

import math

from typing import Any, ClassVar


class HangarError(Exception):
    """The root: an error with a stable code, an HTTP status and data fields."""

    code: ClassVar[str] = "internal"
    status: ClassVar[int] = 500

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = data

    @property
    def retry_after(self) -> int | None:
        """Seconds after which the same call may succeed (the ``retry_after`` data field), for
        errors about a passing shortage; None for the rest."""
        value = self.data.get("retry_after")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def to_dict(self) -> dict[str, Any]:
        """The wire shape: ``{"error": {"code", "message", ...data}}``; every value JSON can
        carry (a value it cannot, an infinite number say, as its text)."""
        data = {k: v if _plain(v) else str(v) for k, v in self.data.items()}
        return {"error": {"code": self.code, "message": self.message, **data}}


def _plain(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or isinstance(value, str | int | bool)


class InvalidInput(HangarError):
    code = "invalid_input"
    status = 400


class SandboxCapabilityMissing(InvalidInput):
    """A sandbox was asked for an optional capability its backend lacks (host paths shown
    read-only, host ports): ``capability`` names the first, ``missing`` all of them,
    ``backend`` the backend. Nothing was made."""

    code = "sandbox_capability_missing"


class PayloadTooLarge(HangarError):
    """A request body over the server's cap (``HANGAR_MAX_BODY_MB``), refused before it is
    read."""

    code = "payload_too_large"
    status = 413


class MessageTooLarge(HangarError):
    """A message over ``HANGAR_MAX_MESSAGE_KB`` (counted in UTF-8 bytes), refused at the request
    with nothing started."""

    code = "message_too_large"
    status = 413


class InvalidName(InvalidInput):
    code = "invalid_name"


class UnknownHarness(InvalidInput):
    code = "unknown_harness"


class InvalidSettings(InvalidInput):
    code = "invalid_settings"


class InvalidSchema(InvalidInput):
    """An ``output_schema`` that is not a JSON Schema (its meta-schema says why)."""

    code = "invalid_schema"


class InvalidContext(InvalidInput):
    """A context item refused when the request came: its kind, name, encoding or size, a patch
    that is not a diff, a bundle without a bundle header, an upload that is not complete."""

    code = "invalid_context"


class Unauthorized(HangarError):
    """No token, or a token hangar does not know (``invalid_token``: one was shown and
    refused, RFC 6750's ``invalid_token``)."""

    code = "unauthorized"
    status = 401

    def __init__(self, message: str, *, invalid_token: bool = False, **data: Any) -> None:
        super().__init__(message, **data)
        self.invalid_token = invalid_token


class Forbidden(HangarError):
    """A known token without the scope the call needs."""

    code = "forbidden"
    status = 403


class NotFound(HangarError):
    code = "not_found"
    status = 404


class SessionNotFound(NotFound):
    code = "session_not_found"


class CheckpointNotFound(NotFound):
    code = "checkpoint_not_found"


class ArtifactNotFound(NotFound):
    code = "artifact_not_found"


class ApprovalNotFound(NotFound):
    """No such approval waits: unknown, answered already, or its turn is over."""

    code = "approval_not_found"


class UploadNotFound(NotFound):
    """No upload with that id (it never was, or it expired after an hour, or it was used)."""

    code = "upload_not_found"


class ContextRejected(HangarError):
    """What came with a turn could not be put in place in the sandbox (a patch that does not
    apply, a bundle whose base is not on the remote or that neither fast-forwards nor starts
    the branch fresh): the turn fails with git's reason, the tree as it was."""

    code = "context_rejected"
    status = 422


class ArtifactTooLarge(HangarError):
    """An artifact larger than an inline answer may be (``HANGAR_EXCHANGE_INLINE_ARTIFACT_KB``):
    download it over REST instead."""

    code = "artifact_too_large"
    status = 413


class TooManyUploads(HangarError):
    """The token holds as many uploads as it may (``HANGAR_EXCHANGE_MAX_OPEN_UPLOADS``: begun
    and neither used nor expired): use or let one expire first (``retry_after``: when the
    oldest expires)."""

    code = "too_many_uploads"
    status = 429


class CapacityExhausted(HangarError):
    """Every sandbox place is taken (``HANGAR_MAX_SANDBOXES``): the start would overcommit the
    machine. Nothing was changed; try again once a session is suspended (``retry_after``)."""

    code = "capacity_exhausted"
    status = 503


class EnvironmentNotFound(NotFound):
    code = "environment_not_found"


class TokenNotFound(NotFound):
    code = "token_not_found"


class SandboxNotFound(NotFound):
    code = "sandbox_not_found"


class BlobNotFound(NotFound):
    code = "blob_not_found"


class Conflict(HangarError):
    code = "conflict"
    status = 409


class VersionConflict(Conflict):
    """The record changed since it was read; re-read and try again."""

    code = "version_conflict"


class AlreadyExists(Conflict):
    code = "already_exists"


class NameTaken(Conflict):
    code = "name_taken"


class InvalidState(Conflict):
    """The action does not apply to the session's current state (e.g. sending to an archived
    session)."""

    code = "invalid_state"


class SessionBusy(Conflict):
    code = "session_busy"


class TurnEnded(Conflict):
    """A steer meant for a turn that is over (``expected_turn`` names an ended turn), or a
    command that reached a live turn's driver only after its turn had ended."""

    code = "turn_ended"


class SessionNotRunning(Conflict):
    """The session has no sandbox to run a command or open a terminal in: open it first."""

    code = "session_not_running"


class NoConversation(Conflict):
    """The session's harness has no conversation yet (no turn has named one), so there is
    nothing to resume interactively: send it a message first."""

    code = "no_conversation"


class EnvironmentInUse(Conflict):
    """An environment sessions were made from cannot be deleted unless forced (they could not
    start a sandbox again)."""

    code = "environment_in_use"


class DestroyVetoed(Conflict):
    """A pre-destroy hook (the checkpoint before a sandbox goes) failed, so the sandbox was
    kept: destroying it would lose the work since the last good checkpoint. ``force`` goes
    ahead anyway."""

    code = "destroy_vetoed"


class SandboxError(HangarError):
    code = "sandbox_error"
    status = 502


class CommandRefused(SandboxError):
    """A live turn's driver refused a command hangar signed (a bug, or a key that does not
    match): nothing reached the agent."""

    code = "command_refused"


class SandboxUnavailable(SandboxError):
    """The sandbox backend cannot start or reach sandboxes (e.g. bubblewrap is missing)."""

    code = "sandbox_unavailable"
    status = 503


class ExecTimeout(SandboxError):
    code = "exec_timeout"
    status = 504


class CheckpointError(HangarError):
    """A checkpoint could not be taken; nothing was recorded and its parts were deleted."""

    code = "checkpoint_failed"
    status = 500


class SealingUnavailable(CheckpointError):
    """A sandbox cannot seal checkpoints itself (its ``python3`` cannot load hangar's
    ``cryptography``): its checkpoints and restores go through the control plane instead."""

    code = "sealing_unavailable"


class SourcePruned(Conflict):
    """A checkpoint reusing the chunks of one that was pruned (or deleted) meanwhile: it is not
    recorded (those chunks may be swept); the take tries again without reusing any."""

    code = "checkpoint_source_pruned"


class RestoreFailed(CheckpointError):
    """One checkpoint could not be restored into a sandbox."""

    code = "restore_failed"


class NoUsableCheckpoint(RestoreFailed):
    """Every checkpoint of a session was tried and none restored."""

    code = "no_usable_checkpoint"


class UnsafeArchive(HangarError):
    """An archive member would land outside its folder, or is of a refused kind."""

    code = "unsafe_archive"
    status = 422


class HarnessError(HangarError):
    """An agent turn failed: the harness CLI exited non-zero or its output was unusable.
    Recorded as the turn's outcome; the run log is kept."""

    code = "harness_failed"
    status = 502


class HarnessMissing(HarnessError):
    """The harness CLI is not installed in the sandbox."""

    code = "harness_missing"


class NoConversationId(HarnessError):
    """The harness's output named no conversation, so the next turn could not resume it."""

    code = "no_conversation_id"


class ConversationMismatch(HarnessError):
    """The harness continued another conversation than the one asked for (for example, it
    silently started a new one for an unknown id)."""

    code = "conversation_mismatch"


class CryptoError(HangarError):
    code = "crypto_error"
    status = 500


class DecryptionFailed(CryptoError):
    """Ciphertext was tampered with, truncated, or bound to another session, checkpoint or part."""

    code = "decryption_failed"


class NotifyFailed(HangarError):
    """An event POSTed to the notify URL was not taken: no answer in time, or an answer other
    than 2xx (``status``, when one came). Retryable: the ``notify`` tick tries again later."""

    code = "notify_failed"
    status = 502


class BackendError(HangarError):
    """A storage or key backend failed in a way the caller cannot fix (disk, network)."""

    code = "backend_error"
    status = 503
