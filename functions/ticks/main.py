"""Cloud Run function ``ticks``: delivers the ticks Cloud Tasks posts. Private (Cloud Run IAM).
Wiring only (see :mod:`hangar.functions`).

Run locally: ``functions-framework --asgi --target ticks --source functions/ticks/main.py``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hangar.functions import TicksFunction

_function: TicksFunction | None = None


async def ticks(request: Any) -> Any:
    """Deliver one tick; the first request on an instance builds the runtime."""
    global _function
    if _function is None:
        from hangar.functions import TicksFunction

        _function = TicksFunction.from_env(os.environ)
    return await _function(request)
