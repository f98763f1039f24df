from __future__ import annotations

from tests.e2e.conftest import backends, standin_server  # noqa: F401  (fixtures)
