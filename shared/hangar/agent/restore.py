"""Restore a checkpoint inside a fresh sandbox. Standard library only; run as
``python3 -I -c SRC`` with the checkpoint on standard input.

Standard input is one JSON line (the plan) followed by the bytes of each part it lists, in
order, each exactly ``size`` bytes::

    repo, home          where the repo and HOME are
    branch, head        check out ``branch`` at ``head`` (detached when branch is null)
    parts               [{"name", "size", "compression"}]: any of repo.bundle, wip.patch,
                        untracked.tar.*, agent.tar.*

Steps, in order: check every archive (nothing is written if one is unsafe), reset and clean the
tree, fetch the bundle, check out, apply wip.patch, unpack the untracked files into the repo and
the conversation folders into HOME. Archive members may not be absolute, contain ``..``, be
hard links or devices, pass through a symbolic link, or be links that lead out of their folder.

Standard output is one JSON line: ``{"ok": true}`` or ``{"ok": false, "code", "step", "error"}``.
"""

import json
import os
import posixpath
import shutil
import subprocess
import sys
import tarfile
import tempfile

GIT = ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"]


class Failure(Exception):
    def __init__(self, code, step, message):
        super().__init__(message)
        self.code, self.step, self.message = code, step, message


def git(repo, step, *args):
    proc = subprocess.run(GIT + ["-C", repo, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise Failure("restore_failed", step, "git %s: %s" % (args[0], err))
    return proc.stdout


def read_exact(stream, size, out):
    remaining = size
    while remaining:
        chunk = stream.read(min(remaining, 1 << 20))
        if not chunk:
            raise Failure("restore_failed", "receive", "input ended early")
        out.write(chunk)
        remaining -= len(chunk)


def decompress(path, compression, staging):
    """Return the path of the plain tar of a compressed archive."""
    plain = path + ".tar"
    with open(path, "rb") as src, open(plain, "wb") as out:
        if compression == "zstd":
            if not shutil.which("zstd"):
                raise Failure("restore_failed", "unpack", "zstd is not installed in this sandbox")
            proc = subprocess.run(["zstd", "-q", "-d", "-c"], stdin=src, stdout=out,
                                  stderr=subprocess.PIPE)  # fmt: skip
            if proc.returncode != 0:
                raise Failure("restore_failed", "unpack", "zstd: %s" % proc.stderr.decode().strip())
        elif compression == "gzip":
            import gzip
            import zlib

            try:
                with gzip.GzipFile(fileobj=src) as gz:
                    shutil.copyfileobj(gz, out, 1 << 20)
            except (OSError, EOFError, zlib.error) as exc:
                raise Failure("restore_failed", "unpack", "gzip: %s" % exc) from None
        else:
            shutil.copyfileobj(src, out, 1 << 20)
    return plain


def clean_name(name):
    """The member's normalised relative path, or None when it is not a safe relative path."""
    if name.startswith("/") or "\0" in name:
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def check_members(tar_path, label):
    """Check every member of an archive by its own content; return [(member, clean name)]."""
    try:
        tf = tarfile.open(tar_path, "r:")
        members = tf.getmembers()
    except (tarfile.TarError, OSError) as exc:
        raise Failure("restore_failed", "unpack", "%s: not a readable archive (%s)" % (label, exc))
    checked = []
    links = set()
    for m in members:
        name = clean_name(m.name)
        if name is None:
            raise Failure("unsafe_archive", "check", "%s: member %r is not a safe relative path"
                          % (label, m.name))  # fmt: skip
        if not (m.isfile() or m.isdir() or m.issym()):
            raise Failure("unsafe_archive", "check", "%s: member %r is a %s, which is refused"
                          % (label, m.name, "hard link" if m.islnk() else "special file"))  # fmt: skip
        parents = name.split("/")[:-1]
        for i in range(1, len(parents) + 1):
            if "/".join(parents[:i]) in links:
                raise Failure("unsafe_archive", "check", "%s: member %r passes through a link"
                              % (label, m.name))  # fmt: skip
        if m.issym():
            target = m.linkname
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
            if target.startswith("/") or resolved == ".." or resolved.startswith("../"):
                raise Failure("unsafe_archive", "check", "%s: link %r leads out (to %r)"
                              % (label, m.name, target))  # fmt: skip
            links.add(name)
        checked.append((m, name))
    tf.close()
    return checked


def check_on_disk(root, checked, label):
    """No member may land beneath a symbolic link that is already on disk."""
    seen = set()
    for m, name in checked:
        parents = name.split("/")[:-1] if not m.isdir() else name.split("/")
        for i in range(1, len(parents) + 1):
            rel = "/".join(parents[:i])
            if rel in seen:
                continue
            seen.add(rel)
            if os.path.islink(os.path.join(root, rel)):
                raise Failure("unsafe_archive", "check", "%s: member %r would pass through the "
                              "link %r on disk" % (label, m.name, rel))  # fmt: skip


def extract(tar_path, root, checked):
    os.makedirs(root, exist_ok=True)
    dir_times = []
    with tarfile.open(tar_path, "r:") as tf:
        for m, name in checked:
            dest = os.path.join(root, name)
            parent = os.path.dirname(dest)
            os.makedirs(parent, exist_ok=True)
            if m.isdir():
                if os.path.lexists(dest) and not os.path.isdir(dest):
                    os.unlink(dest)
                os.makedirs(dest, exist_ok=True)
                os.chmod(dest, (m.mode & 0o777) | 0o700)
                dir_times.append((dest, m.mtime))
                continue
            if os.path.isdir(dest) and not os.path.islink(dest):
                shutil.rmtree(dest)
            fd, tmp = tempfile.mkstemp(dir=parent, prefix=".hangar-restore-")
            try:
                if m.issym():
                    os.close(fd)
                    os.unlink(tmp)
                    os.symlink(m.linkname, tmp)
                else:
                    with os.fdopen(fd, "wb") as out:
                        src = tf.extractfile(m)
                        shutil.copyfileobj(src, out, 1 << 20)
                    os.chmod(tmp, m.mode & 0o777)
                    os.utime(tmp, (m.mtime, m.mtime))
                # Replacing (not opening) the destination never follows a link that is there.
                os.replace(tmp, dest)
            except BaseException:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                raise
    for path, mtime in reversed(dir_times):
        os.utime(path, (mtime, mtime))


def restore(plan, staging):
    repo, home = plan["repo"], plan["home"]
    paths = {}
    for part in plan["parts"]:
        path = os.path.join(staging, part["name"])
        with open(path, "wb") as out:
            read_exact(sys.stdin.buffer, part["size"], out)
        paths[part["name"]] = (path, part.get("compression", "none"))

    archives = []
    for name, root in (("untracked", repo), ("agent", home)):
        found = [n for n in paths if n.startswith(name + ".tar")]
        if found:
            path, compression = paths[found[0]]
            plain = decompress(path, compression, staging)
            archives.append((found[0], root, plain, check_members(plain, found[0])))

    if not os.path.isdir(os.path.join(repo, ".git")):
        raise Failure("restore_failed", "reset", "%s is not a git checkout" % repo)
    git(repo, "reset", "reset", "--hard", "-q")
    git(repo, "clean", "clean", "-fdq")
    head = plan["head"]
    if "repo.bundle" in paths:
        bundle = paths["repo.bundle"][0]
        git(repo, "bundle", "bundle", "verify", "-q", bundle)
        git(repo, "fetch", "fetch", "-q", "--no-tags", bundle,
            "refs/hangar/checkpoint:refs/hangar/checkpoint")  # fmt: skip
    probe = subprocess.run(GIT + ["-C", repo, "cat-file", "-e", head + "^{commit}"],
                           stderr=subprocess.DEVNULL)  # fmt: skip
    if probe.returncode != 0:
        raise Failure("restore_failed", "checkout", "head %s is not in the repo" % head)
    if plan.get("branch"):
        git(repo, "checkout", "checkout", "-q", "-f", "-B", plan["branch"], head)
    else:
        git(repo, "checkout", "checkout", "-q", "-f", "--detach", head)
    if "wip.patch" in paths and os.path.getsize(paths["wip.patch"][0]) > 0:
        git(repo, "apply", "apply", "--binary", "--whitespace=nowarn", paths["wip.patch"][0])

    for label, root, plain, checked in archives:
        check_on_disk(root, checked, label)
    for label, root, plain, checked in archives:
        extract(plain, root, checked)


def main():
    line = sys.stdin.buffer.readline()
    plan = json.loads(line)
    staging = tempfile.mkdtemp(prefix=".hangar-restore-")
    try:
        restore(plan, staging)
        result = {"ok": True}
    except Failure as exc:
        result = {"ok": False, "code": exc.code, "step": exc.step, "error": exc.message}
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.exit(0 if result["ok"] else 3)


if __name__ == "__main__":
    main()
