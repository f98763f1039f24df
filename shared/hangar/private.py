"""hangar's own files kept to itself: folders 0700, files 0600.

The data folder (``HANGAR_DATA_DIR``) holds the admin token, the key file, the database (token
hashes, wrapped keys) and the blobs (sealed, but named after sessions): nobody but hangar's user
has any business in it. The embedded backends make every folder they create with
:func:`private_dirs` and every file 0600 (:func:`private_file`, or ``mkstemp``); ``hangar
serve`` tightens a data folder an older hangar, or a person, left open (:func:`tighten`), and
``hangar doctor`` names what is open (:func:`loose`).

Only hangar's own files are touched: a sandbox's folder under ``sandboxes/`` keeps the modes
its unprivileged host users need (see :mod:`hangar.sandboxes.local.layout`); it is reached through
``sandboxes/`` (0700), which no other user can cross anyway.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
FILES = ("hangar.db", "hangar.db-wal", "hangar.db-shm", "admin-token", "vault.key")
"""hangar's files at the top of the data folder (when the embedded backends keep them there)."""
FOLDERS = ("blobs", "sandboxes")


def private_dirs(path: Path) -> None:
    """Make folder ``path`` and any missing parents, each new one 0700; existing folders are
    left as they are. OSError as ``mkdir`` raises it."""
    missing: list[Path] = []
    at = path
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # made meanwhile by another process or thread
        os.chmod(folder, DIR_MODE)  # whatever the umask took away or left


def private_file(path: Path) -> None:
    """Make sure file ``path`` exists, created 0600 when it did not (an existing file keeps its
    mode and content): what is written to it later, by whatever opens it, stays private."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE))


def loose(data_dir: Path) -> list[tuple[Path, int]]:
    """hangar's paths in ``data_dir`` (it, :data:`FILES`, :data:`FOLDERS`) that others may use,
    with their modes; links are not followed (and never counted)."""
    found: list[tuple[Path, int]] = []
    for path, private in _own(data_dir):
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            continue
        mode = stat.S_IMODE(st.st_mode)
        if mode & ~private & 0o7777:
            found.append((path, mode))
    return found


def tighten(data_dir: Path) -> list[str]:
    """Make ``data_dir`` (0700, with missing parents) and take others' access away from it and
    hangar's paths in it (folders 0700, files 0600); returns one line per change, for people.
    A shared folder (sticky, like /tmp) is not made private: it is named instead, and hangar's
    own paths in it are still tightened. Idempotent. OSError when the folder cannot be made."""
    private_dirs(data_dir)
    said: list[str] = []
    for path, mode in loose(data_dir):
        private = DIR_MODE if path.is_dir() else FILE_MODE
        if path == data_dir and mode & stat.S_ISVTX:
            said.append(f"{path} is a shared folder (mode {mode:o}): use a data folder of its "
                        "own (HANGAR_DATA_DIR)")  # fmt: skip
            continue
        os.chmod(path, private)
        said.append(f"{path} had mode {mode:o}; made it {private:o}")
    return said


def _own(data_dir: Path) -> list[tuple[Path, int]]:
    return [(data_dir, DIR_MODE), *((data_dir / n, FILE_MODE) for n in FILES),
            *((data_dir / n, DIR_MODE) for n in FOLDERS)]  # fmt: skip
