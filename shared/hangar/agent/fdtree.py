"""Changing the agent's trees as hangar's user by folder descriptors, never through a link.
Standard library only: shipped into sandboxes with the scripts that import it.

hangar's tools run as uid 0 inside the sandbox, with capabilities over every file there. A
walk by path names (``os.walk``, ``git clean``) checks that a name is a folder and then uses the
name again: if the name has become a link meanwhile, the second use follows it, and a removal
or a change of owner lands wherever the link points (hangar's own ``/hangar``, say). Here every
folder is opened from the one above it with ``O_NOFOLLOW | O_DIRECTORY``, and every change is
made relative to an open folder on a single name (``unlinkat``, ``fchownat`` with
``AT_SYMLINK_NOFOLLOW``, ``fchown`` on the open folder itself), so a link is changed itself or
left alone, never followed. What changes under a walk is left as it is found, never an error:
each function here finishes whatever another process does meanwhile.

Folders are reopened from their walk's starting folder rather than held open, so no tree is too
deep for the descriptors a process may hold.

Names are bytes or str as given; the bases are paths hangar trusts (the agent cannot replace
``/workspace`` or HOME themselves, only what is inside them).
"""

import errno
import os
import stat

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_folder(parent, name):
    """A descriptor of folder ``name`` in the open folder ``parent``, or None when there is no
    folder by that name (missing, a file, or a link, which is never followed)."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            return None
        raise


def open_path(root, parts):
    """A descriptor of the folder ``parts`` beneath the open folder ``root``, every step opened
    without following a link; None when any step is not a folder."""
    fd = os.dup(root)
    for part in parts:
        if part in ("", ".", "..", b"", b".", b".."):
            os.close(fd)
            return None  # never a step down
        nxt = open_folder(fd, part)
        os.close(fd)
        if nxt is None:
            return None
        fd = nxt
    return fd


def open_base(path):
    """A descriptor of a base folder named by hangar (its last step is never a link)."""
    return os.open(path, DIR_FLAGS)


# -- git clean -fd ------------------------------------------------------------------------------


def remove_untracked(root, files, folders):
    """Remove what ``git clean -fd`` would: each of ``files`` (paths relative to folder
    ``root``, bytes or str, as ``git ls-files --others`` lists them; an entry ending in ``/`` is
    a nested repo, which is kept), then every folder beneath each of ``folders`` (as
    ``--directory`` lists them) left empty, deepest first; a folder holding ``.git`` (a nested
    repo) is kept with everything in it. A path whose folders are no longer folders is left
    alone. Returns how many files and links were removed."""
    removed = 0
    root_fd = open_base(root)
    try:
        parent_parts, parent = None, None
        try:
            for path in map(os.fsdecode, files):
                if not path or path.endswith("/"):
                    continue
                parts = path.split("/")
                if parts[:-1] != parent_parts:  # git lists a folder's files together
                    if parent is not None:
                        os.close(parent)
                    parent_parts, parent = parts[:-1], open_path(root_fd, parts[:-1])
                if parent is None:
                    continue
                try:
                    os.unlink(parts[-1], dir_fd=parent)  # a link goes itself
                    removed += 1
                except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                    pass  # gone, or a folder now: not what git listed
        finally:
            if parent is not None:
                os.close(parent)
        for path in map(os.fsdecode, folders):
            if path.endswith("/"):
                prune_empty(root_fd, path.rstrip("/").split("/"))
    finally:
        os.close(root_fd)
    return removed


def prune_empty(root, parts):
    """Remove the folder ``parts`` beneath the open folder ``root`` and every folder beneath it
    that is, or becomes, empty; a folder holding ``.git`` is kept whole."""
    found = []  # parents before their children
    todo = [list(parts)]
    while todo:
        here = todo.pop()
        fd = open_path(root, here)
        if fd is None:
            continue
        try:
            names = os.listdir(fd)
            if ".git" in names:
                continue
            found.append(here)
            for name in names:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    todo.append(here + [name])
        finally:
            os.close(fd)
    for here in reversed(found):
        parent = open_path(root, here[:-1])
        if parent is None:
            continue
        try:
            os.rmdir(here[-1], dir_fd=parent)  # never follows: a link is ENOTDIR
        except OSError:
            pass  # not empty (ignored files), or changed meanwhile
        finally:
            os.close(parent)


# -- links in the way ---------------------------------------------------------------------------


def remove_link_on_path(root, parts):
    """Remove the first link met on the way from folder ``root`` down the folders ``parts``
    (the link itself, never what it points to); returns its path relative to ``root``, or None
    when there was none. A missing step or a file ends the way quietly: whoever makes the
    folders says what is wrong."""
    fd = open_base(root)
    try:
        for depth, part in enumerate(parts, 1):
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if stat.S_ISLNK(st.st_mode):
                os.unlink(part, dir_fd=fd)
                return "/".join(parts[:depth])
            nxt = open_folder(fd, part)
            if nxt is None:
                return None
            os.close(fd)
            fd = nxt
        return None
    finally:
        os.close(fd)


# -- handing over -------------------------------------------------------------------------------


def hand_over(base, parts, uid, gid, parents=False):
    """Make ``uid:gid`` own the folder ``parts`` beneath folder ``base``, everything beneath it
    (on the same filesystem), and, when ``parents``, the folders on the way to it. A link is
    handed over itself; a regular file with other hard links keeps its owner (its other names
    may lie outside the tree). Raises OSError when an owner cannot be changed."""
    base_fd = open_base(base)
    try:
        fd = os.dup(base_fd)
        for i, part in enumerate(parts):
            nxt = open_folder(fd, part)
            if nxt is None:  # not a folder (any more): hand over the entry itself
                if parents or i == len(parts) - 1:
                    _own_entry(fd, part, uid, gid)
                os.close(fd)
                return
            os.close(fd)
            fd = nxt
            if parents or i == len(parts) - 1:
                _own_folder(fd, uid, gid)
        try:
            _own_tree(fd, uid, gid)
        finally:
            os.close(fd)
    finally:
        os.close(base_fd)


def _own_folder(fd, uid, gid):
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) != (uid, gid):
        os.fchown(fd, uid, gid)


def _own_entry(parent, name, uid, gid, st=None):
    if st is None:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
    if (st.st_uid, st.st_gid) == (uid, gid):
        return
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        return
    try:
        os.chown(name, uid, gid, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        pass


def _own_tree(top, uid, gid):
    """Hand over everything beneath the open folder ``top`` (already handed over itself)."""
    device = os.fstat(top).st_dev
    todo = [[]]
    while todo:
        here = todo.pop()
        fd = open_path(top, here)
        if fd is None:
            continue  # changed meanwhile: not a folder to walk any more
        try:
            if here:
                if os.fstat(fd).st_dev != device:
                    continue  # another filesystem mounted here: not the tree's
                _own_folder(fd, uid, gid)
            for name in os.listdir(fd):
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    todo.append(here + [name])
                else:
                    _own_entry(fd, name, uid, gid, st)
        finally:
            os.close(fd)
