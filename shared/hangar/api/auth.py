"""Bearer tokens: only the SHA-256 of a token's secret is stored; every call is checked."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from hangar.db import Db
from hangar.errors import Forbidden, TokenNotFound, Unauthorized
from hangar.models import Token

ADMIN = "admin"


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def authenticate(db: Db, header: str | None, *, scope: str = ADMIN) -> Token:
    """The token an ``Authorization: Bearer ...`` header names, if it has ``scope``."""
    if not header or not header.startswith("Bearer ") or not header[7:].strip():
        raise Unauthorized("a bearer token is required (Authorization: Bearer TOKEN)")
    try:
        token = db.find_token(secret_hash(header[7:].strip()))
    except TokenNotFound:
        raise Unauthorized("the bearer token is not valid") from None
    if scope not in token.scopes:
        raise Forbidden(f"this token lacks the {scope!r} scope", scope=scope)
    return token


def ensure_admin_token(db: Db, path: Path) -> bool:
    """Make an admin token on first start: its secret goes to ``path`` (mode 0600, created
    exclusively), its hash to the db. Returns whether one was made. The secret is never
    printed or logged."""
    if path.exists():
        return False
    secret = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    db.create_token(Token(secret_hash=secret_hash(secret), scopes=[ADMIN], label="admin"))
    return True
