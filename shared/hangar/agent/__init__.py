"""Scripts that run inside sandboxes: standard library only, so any image with ``python3``,
``git`` and ``tar`` can run them (``zstd`` is used when present).

They are passed to the sandbox's interpreter with ``-I -S -c`` (isolated, without site:
nothing the agent can write, such as a module beside the script or PYTHONPATH, is loaded), so
no copy lives in the sandbox to go stale or be edited. A script's helper modules (:data:`USES`)
travel with it: :func:`command` puts each one's source ahead of the script and registers it as
``hangar.agent.<module>``, so the script's ``from hangar.agent import <module>`` works the same
in the sandbox as in the tests. Their output is untrusted data to the control plane.
"""

from __future__ import annotations

import functools
from importlib import resources

SANDBOX_PYTHON = "/usr/bin/python3"

USES: dict[str, tuple[str, ...]] = {
    "checkpoint": ("gitsafe",),
    "restore": ("gitsafe",),
    "run": (),
}
"""The helper modules of each script, in the order they are loaded."""

_LOADER = """\
import sys as _sys, types as _types
def _hangar_module(_name, _source):
    _sys.modules.setdefault("hangar", _types.ModuleType("hangar"))
    _pkg = _sys.modules.setdefault("hangar.agent", _types.ModuleType("hangar.agent"))
    _mod = _types.ModuleType("hangar.agent." + _name)
    _sys.modules[_mod.__name__] = _mod
    setattr(_pkg, _name, _mod)
    exec(compile(_source, "<hangar.agent.%s>" % _name, "exec"), _mod.__dict__)
"""


@functools.cache
def source(name: str) -> str:
    """The source of ``hangar/agent/<name>.py``."""
    return resources.files(__package__).joinpath(f"{name}.py").read_text()


@functools.cache
def bundle(name: str) -> str:
    """Script ``name`` with its helper modules ahead of it, as one source."""
    uses = USES.get(name, ())
    if not uses:
        return source(name)
    loads = [f"_hangar_module({module!r}, {source(module)!r})" for module in uses]
    return "\n".join([_LOADER, *loads, source(name)])


def command(name: str, *args: str) -> list[str]:
    """The argv that runs script ``name`` with ``args`` inside a sandbox."""
    return [SANDBOX_PYTHON, "-I", "-S", "-c", bundle(name), *args]
