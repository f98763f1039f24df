"""Service account keys as Google issues them, for tests: an RSA key pair, its id, and the JSON
key file (``type``, ``project_id``, ``private_key_id``, ``private_key``, ``client_email``,
``token_uri``, ...) that ``google.oauth2.service_account.Credentials`` reads.

``cryptography`` only (a hangar dependency).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

TOKEN_URI = "https://oauth2.googleapis.com/token"


@functools.lru_cache(maxsize=64)
def _loaded(private_key_pem: bytes) -> rsa.RSAPrivateKey:
    """The key of ``private_key_pem``, loaded once: loading checks the key, which costs tens
    of milliseconds, more than the signature."""
    key = serialization.load_pem_private_key(private_key_pem, password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return key


@dataclass(frozen=True)
class ServiceAccountKey:
    """One key of a service account: ``email``, ``key_id`` (40 hex, as Google's key ids are)
    and the private key as PKCS#8 PEM."""

    email: str
    key_id: str
    private_key_pem: bytes

    @classmethod
    def generate(cls, email: str) -> ServiceAccountKey:
        """A fresh 2048-bit RSA key for ``email``."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
        return cls.of(email, pem)

    @classmethod
    def of(cls, email: str, private_key_pem: bytes) -> ServiceAccountKey:
        """The key ``private_key_pem`` (an RSA key, PEM) of ``email``; its id is the SHA-1 of
        its public key, so one key always has one id. ValueError for anything but RSA."""
        key = serialization.load_pem_private_key(private_key_pem, password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("a service account key is an RSA key")
        public = key.public_key().public_bytes(serialization.Encoding.DER,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
        return cls(email, hashlib.sha1(public).hexdigest(), private_key_pem)

    def _private(self) -> rsa.RSAPrivateKey:
        return _loaded(self.private_key_pem)

    @property
    def public_key_pem(self) -> bytes:
        """The public key (SubjectPublicKeyInfo PEM): what a verifier of signatures trusts."""
        return self._private().public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def sign(self, payload: bytes) -> bytes:
        """RSASSA-PKCS1-v1_5 with SHA-256 over ``payload``, as ``signBlob`` signs."""
        return self._private().sign(payload, padding.PKCS1v15(), hashes.SHA256())

    def key_file(self, project_id: str = "hangar-local") -> dict[str, Any]:
        """The JSON key file Google issues for this key."""
        client_id = str(int(hashlib.sha256(self.email.encode()).hexdigest()[:20], 16))
        return {
            "type": "service_account",
            "project_id": project_id,
            "private_key_id": self.key_id,
            "private_key": self.private_key_pem.decode(),
            "client_email": self.email,
            "client_id": client_id,
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": TOKEN_URI,
            "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
            "client_x509_cert_url": "https://www.googleapis.com/robot/v1/metadata/x509/"
            + self.email.replace("@", "%40"),
            "universe_domain": "googleapis.com",
        }

    def write_key_file(self, path: str | os.PathLike[str], project_id: str = "hangar-local") -> Path:
        """Write :meth:`key_file` to ``path`` (mode 0600, as a secret should be); returns it."""
        target = Path(path)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(self.key_file(project_id), out, indent=2)
        return target
