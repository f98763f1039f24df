"""Scripts that run inside sandboxes: standard library only, so any image with ``python3``,
``git`` and ``tar`` can run them (``zstd`` is used when present).

A script and its helper modules (:data:`USES`) travel on the command line, run by the sandbox's
interpreter with ``-I -S`` (isolated, without site: nothing the agent can write, such as a
module beside the script or PYTHONPATH, is loaded). :func:`command` gives a small launcher that
keeps them, the first time, under ``/hangar/lib/<digest>/`` (hangar's folder, out of the agent's
reach, named by their content so a copy never goes stale) and imports them from there, so later
runs use compiled bytecode: on a small machine compiling them costs a quick checkpoint a fifth
of its budget. Where that folder cannot be written (a sandbox without hangar's folder), the
launcher runs the same sources straight from the command line. Either way each module is
``hangar.agent.<name>``, so ``from hangar.agent import <module>`` works the same in a sandbox as
in the tests. Their output is untrusted data to the control plane.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

SANDBOX_PYTHON = "/usr/bin/python3"
LIB = "/hangar/lib"

USES: dict[str, tuple[str, ...]] = {
    "checkpoint": ("gitsafe", "paths"),
    "context": ("gitsafe",),
    "exchange": ("paths",),
    "homeconfig": ("tomltext",),
    "pirpc": (),
    "restore": ("gitsafe", "paths", "quiesce", "fdtree"),
    "run": (),
}
"""The helper modules of each script, in the order they are loaded."""

# The launcher: SOURCES maps module names to their text; MAIN is the script to run.
_LAUNCHER = """\
import os as _os, sys as _sys
def _hangar_launch(sources, main, digest):
    lib = "%s/" + digest
    if not _os.path.isdir(lib + "/hangar/agent"):
        if not _os.path.isdir(_os.path.dirname(_os.path.dirname(lib))):
            return _hangar_inline(sources, main)  # no folder of hangar's here
        try:
            _hangar_install(lib, sources)
        except OSError:
            return _hangar_inline(sources, main)
    _sys.path.insert(0, lib)
    __import__("hangar.agent." + main)
    _sys.modules["hangar.agent." + main].main()
def _hangar_install(lib, sources):
    tmp = "%%s.%%d.%%s" %% (lib, _os.getpid(), _os.urandom(4).hex())
    _os.makedirs(tmp + "/hangar/agent", 0o700)
    for name, text in sources.items():
        with open("%%s/hangar/agent/%%s.py" %% (tmp, name), "w") as f:
            f.write(text)
    try:
        _os.rename(tmp, lib)
    except OSError:  # installed meanwhile by another run, or not ours to write
        for name in sources:
            _os.unlink("%%s/hangar/agent/%%s.py" %% (tmp, name))
        _os.removedirs(tmp + "/hangar/agent")
        if not _os.path.isdir(lib + "/hangar/agent"):
            raise
def _hangar_inline(sources, main):
    import types
    _sys.modules.setdefault("hangar", types.ModuleType("hangar"))
    pkg = _sys.modules.setdefault("hangar.agent", types.ModuleType("hangar.agent"))
    for name, text in sources.items():
        mod = types.ModuleType("hangar.agent." + name)
        _sys.modules[mod.__name__] = mod
        setattr(pkg, name, mod)
        exec(compile(text, "<hangar.agent.%%s>" %% name, "exec"), mod.__dict__)
    _sys.modules["hangar.agent." + main].main()
""" % LIB


@functools.cache
def source(name: str) -> str:
    """The source of ``hangar/agent/<name>.py``."""
    return resources.files(__package__).joinpath(f"{name}.py").read_text()


@functools.cache
def bundle(name: str) -> str:
    """Script ``name`` with its helper modules, as one source that runs it (its ``main()``)."""
    modules = {module: source(module) for module in (*USES.get(name, ()), name)}
    digest = hashlib.sha256(repr(sorted(modules.items())).encode()).hexdigest()[:20]
    return f"{_LAUNCHER}_hangar_launch({modules!r}, {name!r}, {digest!r})\n"


def command(name: str, *args: str) -> list[str]:
    """The argv that runs script ``name`` with ``args`` inside a sandbox."""
    return [SANDBOX_PYTHON, "-I", "-S", "-c", bundle(name), *args]
