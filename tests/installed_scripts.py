"""hangar's in-sandbox scripts installed on this machine, as a sandbox gets them (the real
installer, the archive on its standard input), for tests that run a script outside a sandbox."""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import tempfile

from hangar import agent


@functools.cache
def lib() -> str:
    """A folder of this process's own holding the installed scripts (removed at exit)."""
    top = tempfile.mkdtemp(prefix="hangar-lib-")
    atexit.register(shutil.rmtree, top, True)
    folder = f"{top}/lib"
    subprocess.run(agent.installer(folder), input=agent.archive(), check=True, timeout=60)
    return folder


def command(name: str, *args: str) -> list[str]:
    """:func:`hangar.agent.command` for the scripts installed here."""
    return agent.command(name, *args, lib=lib())
