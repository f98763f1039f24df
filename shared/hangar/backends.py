"""Picking a port's backend from the scheme of its URL (one table per port)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar
from urllib.parse import urlsplit

from hangar.errors import InvalidSettings

Opener = TypeVar("Opener")


def pick(backends: Mapping[str, Opener], url: str, setting: str) -> Opener:
    """The opener registered for ``url``'s scheme; InvalidSettings naming ``setting`` and the
    known schemes otherwise."""
    scheme = urlsplit(url).scheme
    try:
        return backends[scheme]
    except KeyError:
        known = ", ".join(sorted(backends))
        raise InvalidSettings(
            f"{setting}: unknown scheme {scheme!r} in {url!r} (known: {known})", setting=setting
        ) from None
