"""The keys port: wrap and unwrap data keys (envelope encryption).

Contract for every backend (checked by :mod:`hangar.testing.keys`): ``unwrap(wrap(k)) == k``;
wrapping the same key twice gives different bytes; a wrapped key that was altered, or that was
wrapped by another key, raises :class:`~hangar.errors.DecryptionFailed`. Backends never see the
data itself, only 32-byte data keys; the sealing of data is :mod:`hangar.keys.envelope`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from hangar.backends import pick
from hangar.config import Settings


class Keys(Protocol):
    def wrap(self, data_key: bytes) -> bytes: ...

    def unwrap(self, wrapped: bytes) -> bytes: ...


def _open_local(url: str, settings: Settings) -> Keys:
    from hangar.keys.local import LocalKeys

    return LocalKeys.from_url(url)


def _open_gcpkms(url: str, settings: Settings) -> Keys:
    from hangar.keys.gcpkms import GcpKmsKeys

    return GcpKmsKeys.from_url(url, settings)


_BACKENDS: dict[str, Callable[[str, Settings], Keys]] = {
    "local": _open_local,
    "gcpkms": _open_gcpkms,
}


def open_keys(url: str, settings: Settings) -> Keys:
    """Open the backend the URL's scheme names; InvalidSettings for an unknown scheme."""
    return pick(_BACKENDS, url, "HANGAR_KEYS")(url, settings)
