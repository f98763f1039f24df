"""What a checkpoint's archives may hold: one set of path rules for the checkpoint, which leaves
out what breaks them (naming each path in a warning), and the restore, which refuses it.

Because both scripts judge by these functions, a checkpoint never holds what its restore would
refuse: whatever the agent leaves in its tree, every checkpoint restores.

An archive has a root (the repo for untracked files, HOME for the conversation and exchange
folders) and an area rule: which relative paths of it may be written. An entry may go in when:

- its name is a clean relative path: not absolute, no ``..``, no NUL;
- it is a regular file, a folder or a symbolic link (no FIFO, socket, device or hard link);
- the area rule allows it: untracked files never lie inside a ``.git`` folder, in any letter
  case (a case-folding disk would make ``.GIT`` one); conversation and exchange entries lie
  inside their folders;
- a link is relative, stays inside the root once normalised, has no ``..`` after a folder name
  (an earlier link on the way could turn that into a way out), and its target obeys the same
  area rule.

Standard library only: this module is shipped into sandboxes with the scripts that import it.
"""

import os
import posixpath
import stat


def clean_name(name):
    """The normalised relative path, or None when ``name`` is not a safe relative path."""
    if not isinstance(name, str) or name.startswith("/") or "\0" in name:
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def untracked_rule(path, is_folder):
    """The repo's untracked files: anything in .git (hooks, config) would run or steer git."""
    if any(p.lower() == ".git" for p in path.split("/")):
        return "is inside .git"
    return None


def folders_rule(dirs, what):
    """Entries under HOME that must lie in one of ``dirs`` (relative to HOME)."""

    def rule(path, is_folder):
        if any(path.startswith(d + "/") or (path == d and is_folder) for d in dirs):
            return None
        return "is outside the %s %s" % (what, ", ".join(dirs) or "(none)")

    return rule


def link_problem(name, target):
    """Why the link ``name -> target`` is refused, or None, with its root-relative resolution."""
    if not target or target.startswith("/") or "\0" in target:
        return "is a link that is not relative", None
    seen_normal = False
    for part in target.split("/"):
        if part == "..":
            # `a/..` is only `.` textually: when `a` is itself a link it is somewhere else.
            if seen_normal:
                return "is a link with .. after a folder name", None
        elif part not in ("", "."):
            seen_normal = True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if resolved == ".." or resolved.startswith("../"):
        return "is a link that leads out", None
    return None, resolved


def kind_problem(mode):
    """Why an entry of this file type is refused, or None for files, folders and links."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "is a FIFO"
    if stat.S_ISSOCK(mode):
        return "is a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device"
    return "is not a file, folder or link"


def member_problem(name, is_folder, link_target, rule):
    """Why an entry called ``name`` (a folder, or a link to ``link_target``, or a file) may not
    be in an archive with area ``rule``; None when it may."""
    if clean_name(name) != name:
        return "is not a clean relative path"
    why = rule(name, is_folder)
    if why:
        return why
    if link_target is not None:
        why, resolved = link_problem(name, link_target)
        if why:
            return why
        why = rule(resolved, True)
        if why:
            return "is a link whose target %s" % why
    return None


def entry_problem(root, rel, rule):
    """Why the entry ``rel`` on disk under ``root`` may not go into an archive with area
    ``rule``, or None. An entry that has gone meanwhile is "gone" (leave it out, say nothing)."""
    try:
        st = os.lstat(os.path.join(root, rel))
    except (FileNotFoundError, NotADirectoryError):
        return "gone"
    why = kind_problem(st.st_mode)
    if why:
        return why
    target = os.readlink(os.path.join(root, rel)) if stat.S_ISLNK(st.st_mode) else None
    return member_problem(rel, stat.S_ISDIR(st.st_mode), target, rule)


def readable(text):
    """``text`` with each byte of a name that is not UTF-8 (decoded with surrogateescape, as
    ``os`` does) shown as ``\\xNN``: JSON cannot carry such a name raw, and a person reads it."""
    if text.isascii():
        return text
    return "".join(
        ("\\x%02x" % (ord(c) - 0xDC00) if "\udc80" <= c <= "\udcff" else "\\u%04x" % ord(c))
        if "\ud800" <= c <= "\udfff" else c
        for c in text
    )


def left_out_warning(label, left_out, limit=8):
    """One warning naming the entries left out of ``label`` and why, ``[(path, why)]``."""
    shown = "; ".join("%s %s" % (path, why) for path, why in left_out[:limit])
    more = " and %d more" % (len(left_out) - limit) if len(left_out) > limit else ""
    return "%s left out (a restore would refuse them): %s%s" % (label, shown, more)


def private_folder(path):
    """True when ``path`` is a folder (not a link) of this process's user that no one else may
    enter: hangar's own scratch folder, whose contents the agent can neither read nor write."""
    try:
        st = os.lstat(path) if path else None
    except OSError:
        return False
    return st is not None and st.st_uid == os.geteuid() and (st.st_mode & 0o170077) == 0o040000
