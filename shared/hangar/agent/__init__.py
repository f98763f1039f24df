"""Scripts that run inside sandboxes: standard library only, so any image with ``python3``,
``git`` and ``tar`` can run them (``zstd`` is used when present).

They are passed to the sandbox's interpreter with ``-I -S -c`` (isolated, without site:
nothing the agent can write, such as a module beside the script or PYTHONPATH, is loaded), so
no copy lives in the sandbox to go stale or be edited. Their output is untrusted data to the
control plane.
"""

from __future__ import annotations

import functools
from importlib import resources

SANDBOX_PYTHON = "/usr/bin/python3"


@functools.cache
def source(name: str) -> str:
    """The source of ``hangar/agent/<name>.py``."""
    return resources.files(__package__).joinpath(f"{name}.py").read_text()


def command(name: str, *args: str) -> list[str]:
    """The argv that runs script ``name`` with ``args`` inside a sandbox."""
    return [SANDBOX_PYTHON, "-I", "-S", "-c", source(name), *args]
