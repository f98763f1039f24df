"""Artifacts: files a turn handed back under ``out/artifacts/``, stored sealed per turn.

After each turn the new or changed files (by sha256 against the latest stored version of the
same path) are copied out of the sandbox by hangar's script (never through a link), text is
redacted for known secret shapes, and each is sealed under a data key of its own at
``sessions/<session>/artifacts/<turn>/<path>`` (:func:`artifact_key`). Unchanged files are not
stored again; a file over the size cap, past the count cap (``HANGAR_EXCHANGE_MAX_ARTIFACTS``)
or past the turn's total (``..._MAX_ARTIFACTS_MB``) is skipped with a warning on the turn,
never failing it. So is a file whose name holds a control character (CR, LF, ESC and the rest
that :func:`hangar.inert.inert` escapes): such a name cannot be downloaded by URL or named in a
header, and a terminal would act on it; the warning shows it escaped. Artifacts outlive the
sandbox and go with the session.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass

from hangar import agent
from hangar.blobs import Blobs
from hangar.config import Settings
from hangar.errors import ArtifactNotFound, InvalidInput
from hangar.exchange import is_text
from hangar.exchange.handback import Found
from hangar.exchange.layout import io_path
from hangar.inert import inert
from hangar.keys import Keys
from hangar.keys.envelope import new_data_key, seal, unseal
from hangar.models import Artifact, Session, Turn
from hangar.redact import redact
from hangar.sandboxes import Sandboxes, SandboxUser


def artifact_key(session_id: str, n: int, path: str) -> str:
    """Where turn ``n``'s artifact ``path`` is stored (also its associated data)."""
    return f"sessions/{session_id}/artifacts/{n}/{path}"


def artifact_uri(session: Session, n: int, path: str) -> str:
    """The MCP resource that reads it."""
    return f"hangar://sessions/{session.name}/artifacts/{n}/{path}"


@dataclass(frozen=True)
class Listed:
    """One stored artifact as surfaces list it."""

    path: str
    turn: int
    size: int
    uri: str


class Artifacts:
    """Stores, lists and reads a session's artifacts."""

    def __init__(self, settings: Settings, blobs: Blobs, keys: Keys, sandboxes: Sandboxes) -> None:
        self.settings = settings
        self.blobs = blobs
        self.keys = keys
        self.sandboxes = sandboxes

    def store(
        self, session: Session, n: int, found: Sequence[Found], earlier: Sequence[Turn]
    ) -> tuple[list[Artifact], list[str]]:
        """Store turn ``n``'s new and changed artifacts; returns them and the warnings."""
        latest = {a.path: a.sha256 for t in sorted(earlier, key=lambda t: t.n) for a in t.artifacts}
        stored: list[Artifact] = []
        warnings: list[str] = []
        total = 0
        cap = self.settings.max_artifact_bytes
        for f in found:
            if inert(f.path) != f.path:
                warnings.append(f"out/artifacts/{inert(f.path)}: a name with control "
                                "characters; skipped")  # fmt: skip
                continue
            if f.sha256 is not None and latest.get(f.path) == f.sha256:
                continue  # unchanged since it was stored
            where = f"out/artifacts/{f.path}"
            if f.sha256 is None or f.size > cap:
                warnings.append(f"{where}: {f.size} bytes, over the "
                                f"{self.settings.exchange_max_artifact_mb:g} MB cap; skipped")  # fmt: skip
                continue
            if len(stored) >= self.settings.exchange_max_artifacts:
                warnings.append(f"{where}: over {self.settings.exchange_max_artifacts} new "
                                "artifacts this turn; skipped")  # fmt: skip
                continue
            if total + f.size > self.settings.max_artifacts_bytes:
                warnings.append(f"{where}: over the turn's "
                                f"{self.settings.exchange_max_artifacts_mb:g} MB of artifacts; "
                                "skipped")  # fmt: skip
                continue
            data = self._fetch(session, f.path)
            if data is None:
                warnings.append(f"{where}: changed or went away while it was read; skipped")
                continue
            total += len(data)
            stored.append(self._put(session.id, n, f.path, f.sha256, data))
        return stored, warnings

    def _fetch(self, session: Session, path: str) -> bytes | None:
        assert session.sandbox_id is not None
        out = io.BytesIO()
        result = agent.run_script(self.sandboxes, session.sandbox_id, "exchange", "read",
                                  io_path(session), path, str(self.settings.max_artifact_bytes),
                                  stdout=out, user=SandboxUser.HANGAR, timeout=300)  # fmt: skip
        return out.getvalue() if result.ok else None

    def _put(self, session_id: str, n: int, path: str, sha256: str, data: bytes) -> Artifact:
        redacted = False
        if is_text(data):
            clean = (redact(data.decode()) or "").encode()
            redacted, data = clean != data, clean
        key = artifact_key(session_id, n, path)
        data_key = new_data_key()
        self.blobs.put(key, seal(data_key, key.encode(), [data]))
        wrapped = base64.b64encode(self.keys.wrap(data_key)).decode()
        return Artifact(path=path, size=len(data), sha256=sha256, key=wrapped, redacted=redacted)

    def listing(self, session: Session, turns: Sequence[Turn], turn: int | None = None) -> list[Listed]:
        """Every stored artifact of the session (of turn ``turn`` only, if given), by turn."""
        return [Listed(a.path, t.n, a.size, artifact_uri(session, t.n, a.path))
                for t in turns if turn is None or t.n == turn for a in t.artifacts]  # fmt: skip

    def find(self, session: Session, turn: Turn, path: str) -> Artifact:
        for artifact in turn.artifacts:
            if artifact.path == path:
                return artifact
        raise ArtifactNotFound(f"session {session.name} has no artifact {path!r} from turn "
                               f"{turn.n}", session=session.name, turn=turn.n, path=path)  # fmt: skip

    def read(self, session: Session, turn: Turn, path: str) -> bytes:
        """The stored bytes of turn ``turn``'s artifact ``path``; ArtifactNotFound otherwise."""
        if "\0" in path:
            raise InvalidInput("the artifact path has a NUL byte", field="path")
        artifact = self.find(session, turn, path)
        key = artifact_key(session.id, turn.n, path)
        data_key = self.keys.unwrap(base64.b64decode(artifact.key))
        with self.blobs.open(key) as stream:
            return b"".join(unseal(data_key, key.encode(), stream))

    def delete(self, session_id: str, turns: Sequence[Turn]) -> None:
        for t in turns:
            for a in t.artifacts:
                self.blobs.delete(artifact_key(session_id, t.n, a.path))
