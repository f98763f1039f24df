"""``hangar serve``: the embedded control plane on one machine.

On first start it makes an admin token, writes it to ``DATA_DIR/admin-token`` (mode 0600) and
says where it is (never what it is). It starts the in-process ticker, so turns finish, idle
sessions suspend and expired sandboxes are reaped with nobody calling in, and serves the REST
API with uvicorn until SIGINT or SIGTERM.
"""

from __future__ import annotations

import logging
import sys

from hangar.api.auth import ensure_admin_token
from hangar.config import Settings


def serve(settings: Settings, host: str, port: int) -> int:
    import uvicorn

    from hangar.api.app import create_app
    from hangar.runtime import Runtime

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    runtime = Runtime(settings)
    token_file = settings.data_dir / "admin-token"
    if ensure_admin_token(runtime.db, token_file):
        print(f"hangar: made an admin token; it is in {token_file} (mode 0600)", file=sys.stderr)
    else:
        print(f"hangar: the admin token is in {token_file}", file=sys.stderr)
    runtime.start()
    print(f"hangar: serving http://{host}:{port}/api (data in {settings.data_dir})",
          file=sys.stderr, flush=True)  # fmt: skip
    try:
        uvicorn.run(create_app(runtime), host=host, port=port, log_level="warning")
    finally:
        runtime.close()
    return 0
