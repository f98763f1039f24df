"""Container image references, as an environment names its image.

The grammar is the distribution project's (``reference.go``): ``[HOST[:PORT]/]PATH[:TAG]
[@DIGEST]``. The first component is a registry host only when another follows it and it holds
a dot or a port, or is ``localhost`` (as container runtimes read it). A host is DNS labels, an
IPv4 address or a bracketed IPv6 address, with an optional port; the path is components of
lowercase letters and digits joined by ``.``, ``_``, ``__`` or dashes, and ``/`` between them;
the name (host and path) is at most 255 characters; a tag is a word character then up to 127
of word characters, dots and dashes. hangar takes only ``sha256`` digests (64 lowercase hex
digits): the one algorithm every registry serves.
"""

from __future__ import annotations

import re

from hangar.errors import InvalidInput, SandboxCapabilityMissing

NAME_MAX = 255
"""The distribution spec's bound on a repository name (host and path)."""
SHOWN = 80
"""How much of a refused reference its error repeats."""

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?")
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def check_image(image: str, field: str = "image") -> str:
    """``image`` unchanged if it is a container image reference (see the module's docstring);
    InvalidInput naming ``field`` and what is wrong otherwise. Pure: it looks nothing up."""
    shown = image if len(image) <= SHOWN else image[:SHOWN] + "..."

    def bad(why: str) -> InvalidInput:
        return InvalidInput(f"{field} {shown!r} is not a container image reference: {why}",
                            field=field)  # fmt: skip

    rest, at, digest = image.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        raise bad("a digest after @ must be sha256: and 64 lowercase hex digits")
    name, tag = rest, None
    if rest.rfind(":") > rest.rfind("/"):
        name, _, tag = rest.rpartition(":")
        if not _TAG.fullmatch(tag):
            raise bad("a tag is a letter, digit or _ then up to 127 of those, dots and dashes")
    if not name:
        raise bad("it names no image")
    if len(name) > NAME_MAX:
        raise bad(f"its name (registry and path) is longer than {NAME_MAX} characters")
    first, slash, path = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        if not _HOST.fullmatch(first):
            raise bad(f"{first!r} is not a registry host with an optional port")
    else:
        path = name
    for component in path.split("/"):
        if _COMPONENT.fullmatch(component):
            continue
        if _COMPONENT.fullmatch(component.lower()):
            raise bad("its path must be lowercase")
        raise bad(f"path component {component!r} is not lowercase letters and digits "
                  "joined by '.', '_', '__' or dashes")  # fmt: skip
    return image


def image_refused(sandboxes_url: str, what: str, **data: str) -> SandboxCapabilityMissing:
    """The error for an image on a hangar whose sandbox backend (named by its URL,
    HANGAR_SANDBOXES) runs none; ``what`` says, in the environment's terms, what named it."""
    backend = sandboxes_url.partition("://")[0]
    why = " (its sandboxes run the host's own system)" if backend == "local" else ""
    return SandboxCapabilityMissing(
        f"{what}, and this hangar's sandbox backend ({backend}) runs no container images{why}: "
        "give the environment no image, or run hangar on a backend that runs them (gke://)",
        capability="images", missing=["images"], backend=backend, **data,
    )  # fmt: skip
