"""Bearer tokens: only the SHA-256 of a token's secret is stored; every call is checked.

The admin token of an embedded server lives in ``DATA_DIR/admin-token`` (mode 0600), made on
first start; its secret is never printed or logged.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from hangar.db import Db
from hangar.errors import Forbidden, HangarError, TokenNotFound, Unauthorized
from hangar.models import Token, utcnow
from hangar.private import private_dirs

ADMIN = "admin"
TOKEN_FILE = "admin-token"
REALM = "hangar"
_HOW = ("send the header Authorization: Bearer TOKEN (a local server's admin token is in "
        "DATA_DIR/admin-token)")


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def authenticate(db: Db, header: str | None, *, scope: str = ADMIN) -> Token:
    """The token an ``Authorization: Bearer SECRET`` header names. Unauthorized without a
    known token, or with one past its ``expires_at``; Forbidden when the token lacks ``scope``
    (a terminal ticket, say: it has only ``terminal:<session>``)."""
    kind, _, secret = (header or "").partition(" ")
    secret = secret.strip()
    if kind.lower() != "bearer" or not secret:
        raise Unauthorized(f"a bearer token is required: {_HOW}")
    try:
        token = db.find_token(secret_hash(secret))
    except TokenNotFound:
        raise Unauthorized(f"the bearer token is not valid: {_HOW}", invalid_token=True) from None
    if token.expired(utcnow()):
        raise Unauthorized(f"the bearer token has expired: {_HOW}", invalid_token=True)
    if scope not in token.scopes:
        raise Forbidden(f"this token lacks the {scope!r} scope", scope=scope)
    return token


def challenge(exc: HangarError) -> dict[str, str]:
    """The ``WWW-Authenticate`` header of a 401 (RFC 6750 §3), else none: the realm when no
    token came, with ``error="invalid_token"`` when one came and was refused, so that a client
    knows to ask its user for another token rather than look for OAuth."""
    if not isinstance(exc, Unauthorized):
        return {}
    value = f'Bearer realm="{REALM}"'
    if exc.invalid_token:
        value += ', error="invalid_token", error_description="the token is unknown or expired"'
    return {"WWW-Authenticate": value}


def ensure_admin_token(db: Db, path: Path) -> bool:
    """Make sure ``path`` holds the secret of an admin token the db knows. On first start a
    new secret is written there (created exclusively, mode 0600) and its hash stored; a file
    whose hash the db lost (a new database) is registered again. Returns whether a new secret
    was made. The secret is never printed or logged."""
    try:
        secret = path.read_text().strip()
    except FileNotFoundError:
        secret = ""
    made = not secret
    if made:
        secret = secrets.token_urlsafe(32)
        private_dirs(path.parent)
        path.unlink(missing_ok=True)  # an empty file left by a crash
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secret + "\n")
    try:
        db.find_token(secret_hash(secret))
    except TokenNotFound:
        db.create_token(Token(secret_hash=secret_hash(secret), scopes=[ADMIN], label="admin"))
    return made
