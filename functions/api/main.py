"""Cloud Run function ``api``: hangar's REST API. Wiring only (see :mod:`hangar.functions`).

Run locally: ``functions-framework --asgi --target api --source functions/api/main.py``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hangar.functions import ApiFunction

_function: ApiFunction | None = None


async def api(request: Any) -> Any:
    """Answer one request; the first one on an instance builds the runtime."""
    global _function
    if _function is None:
        from hangar.functions import ApiFunction

        _function = ApiFunction.from_env(os.environ)
    return await _function(request)
