"""Where a turn's structured result is kept: on the turn record while it is small, sealed in
blobs (``sessions/<session>/turns/<n>/result``) when it is larger than :data:`INLINE_BYTES`,
so a result up to ``HANGAR_EXCHANGE_MAX_RESULT_KB`` never outgrows a database record."""

from __future__ import annotations

import base64
import json
from typing import Any

from hangar.blobs import Blobs
from hangar.keys import Keys
from hangar.keys.envelope import new_data_key, seal_bytes, unseal_bytes
from hangar.models import Turn

INLINE_BYTES = 64 << 10


def result_key(session_id: str, n: int) -> str:
    return f"sessions/{session_id}/turns/{n}/result"


def keep_result(blobs: Blobs, keys: Keys, turn: Turn, value: Any) -> dict[str, Any]:
    """The turn's changes that keep ``value`` as its result."""
    text = json.dumps(value, separators=(",", ":"))
    if len(text) <= INLINE_BYTES:
        return {"result": value, "result_key": None}
    key = result_key(turn.session_id, turn.n)
    data_key = new_data_key()
    blobs.put(key, seal_bytes(data_key, key.encode(), text.encode()))
    return {"result": None, "result_key": base64.b64encode(keys.wrap(data_key)).decode()}


def result_of(blobs: Blobs, keys: Keys, turn: Turn) -> Any:
    """The turn's result, wherever it is kept (None: it has none)."""
    if turn.result_key is None:
        return turn.result
    key = result_key(turn.session_id, turn.n)
    data_key = keys.unwrap(base64.b64decode(turn.result_key))
    return json.loads(unseal_bytes(data_key, key.encode(), blobs.get(key)))
