"""Read what the agent left in a turn's exchange folder ($HANGAR_IO). Standard library only; run
as hangar's user (uid 0 of the sandbox) as ``python3 -I -S -c SRC COMMAND ARGS``.

The folder is the agent's, and the agent may be hostile, while this process can read every file
in the sandbox. So, everywhere:

- a path is walked one folder at a time with file descriptors, each opened relative to its
  parent with O_NOFOLLOW|O_DIRECTORY, from ``/`` down to IO_DIR (the agent owns HOME, so
  ``~/.hangar`` could be a link as well) and on below it: a symbolic link is never followed;
- a file is read only when it is a regular file: checked with lstat, opened with
  O_RDONLY|O_NOFOLLOW|O_NONBLOCK (a FIFO put there meanwhile cannot block the open) and checked
  again with fstat. A link, FIFO, socket or device is skipped and named in a warning, by its
  path relative to IO_DIR and why ("out/artifacts/x: a symbolic link, skipped");
- no more than a cap is read from any file, and a file over its cap is not read at all;
- nothing is ever written, created, changed or removed in the agent's folders.

Commands (IO_DIR an absolute path; byte counts and offsets non-negative integers; bad arguments
exit 2, with why on stderr):

``collect IO_DIR MAX_RESULT_BYTES MAX_ARTIFACT_BYTES``
    Prints one JSON object::

        summary             RESULT.md (at most 64 KiB), or null
        summary_truncated   whether RESULT.md was longer
        result              out/result.json: {present, size, too_large, text}; text is null
                            unless it is present and at most MAX_RESULT_BYTES
        question            out/QUESTION.md (at most 16 KiB), or null
        question_json       out/QUESTION.json's text (at most 16 KiB, not parsed), or null
        artifacts           [{path, size, sha256}]: every regular file under out/artifacts,
                            its path relative to it ("/"-separated), sorted; sha256 is null
                            (the file unread) when it is over MAX_ARTIFACT_BYTES. At most
                            10,000 entries are looked at and 32 levels of folders.
        warnings            [str]: what was skipped and why (at most 200)

    A missing IO_DIR or out/ gives the empty answer (nulls, empty lists); an IO_DIR reached
    through a link is treated as missing, with a warning. Exit 0.

``read IO_DIR REL_PATH MAX_BYTES``
    Writes the bytes of out/artifacts/REL_PATH to stdout. REL_PATH must be a clean relative
    path (exit 2). Missing, not a regular file, or reached through a link: exit 3. Over
    MAX_BYTES: exit 4 (also when it grows past it while being read: stdout then holds a part
    of it, which the caller drops).

``progress IO_DIR CURSOR MAX_BYTES``
    Prints one JSON object ``{size, cursor, lines}``: the complete lines (without their
    newline) of out/progress.jsonl from byte offset CURSOR, reading at most MAX_BYTES and
    stopping at the last newline read, so that a line still being written is read next time;
    ``cursor`` is the offset after the last line returned, ``size`` the file's. A file shorter
    than CURSOR (cleared for a new turn) is read from 0. A single line longer than MAX_BYTES
    is skipped: the cursor moves past what was read. Missing (or not a regular file, said on
    stderr): size 0, cursor 0, no lines.

All text is the agent's, decoded as UTF-8 with errors="replace"; nothing here parses what the
agent wrote. A name that is not valid UTF-8 is skipped with a warning (it could not be named
back to ``read``).
"""

import hashlib
import json
import os
import stat
import sys

from hangar.agent.paths import clean_name

MAX_SUMMARY = 64 * 1024
MAX_QUESTION = 16 * 1024
MAX_ENTRIES = 10_000
MAX_DEPTH = 32
MAX_WARNINGS = 200
CHUNK = 1 << 20

NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
FOLDER = os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW
PASSAGE = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | NOFOLLOW  # IO_DIR's ancestors
FILE = os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW


class Unsafe(Exception):
    """What is at ``path`` (relative to IO_DIR) is not what may be read: ``why``."""

    def __init__(self, path, why):
        super().__init__("%s: %s" % (path, why))
        self.path, self.why = path, why


class Fail(Exception):
    """The command fails with exit status ``code``."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


# Walking without following links --------------------------------------------------------------


def kind_of(mode):
    """What a file of this type is, for warnings."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file or folder"


def lstat_at(fd, name):
    """The entry ``name`` of folder ``fd``, not followed; None when there is none."""
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def open_folder(fd, name, shown, flags=FOLDER):
    """The folder ``name`` in folder ``fd``, opened without following a link; None when there
    is none. Raises Unsafe when something else is there (``shown`` names it)."""
    try:
        sub = os.open(name, flags, dir_fd=fd)
    except OSError as exc:
        st = lstat_at(fd, name)
        if st is None:
            return None
        if not stat.S_ISDIR(st.st_mode):
            raise Unsafe(shown, kind_of(st.st_mode)) from None
        raise Unsafe(shown, "cannot be opened (%s)" % exc.strerror) from None
    mode = os.fstat(sub).st_mode
    if not stat.S_ISDIR(mode):  # O_PATH may open a link itself
        os.close(sub)
        raise Unsafe(shown, kind_of(mode))
    return sub


def open_file(fd, name, shown):
    """(descriptor, fstat) of the regular file ``name`` in folder ``fd``; None when there is
    none. Raises Unsafe when it is anything else, which is not opened then (one swapped in
    between the check and the open is harmless: O_NOFOLLOW refuses a link, O_NONBLOCK keeps a
    FIFO from blocking, and fstat rejects it)."""
    st = lstat_at(fd, name)
    if st is None:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise Unsafe(shown, kind_of(st.st_mode))
    try:
        f = os.open(name, FILE, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        st = lstat_at(fd, name)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise Unsafe(shown, kind_of(st.st_mode)) from None
        raise Unsafe(shown, "cannot be opened (%s)" % exc.strerror) from None
    st = os.fstat(f)
    if not stat.S_ISREG(st.st_mode):
        os.close(f)
        raise Unsafe(shown, kind_of(st.st_mode))
    return f, st


def open_io_dir(io_dir, warnings):
    """IO_DIR, walked from ``/`` without following a link; None when it is missing, or when
    something on the way is not a folder (named in a warning: it is treated as missing)."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    parts = [p for p in io_dir.split("/") if p not in ("", ".")]
    for i, part in enumerate(parts):
        shown = "/" + "/".join(parts[: i + 1])
        try:
            sub = open_folder(fd, part, shown, FOLDER if i == len(parts) - 1 else PASSAGE)
        except Unsafe as exc:
            warnings.append("IO_DIR %s: %s, treated as missing" % (exc.path, exc.why))
            sub = None
        finally:
            os.close(fd)
        if sub is None:
            return None
        fd = sub
    return fd


def read_upto(f, limit):
    """At most ``limit`` bytes from ``f``'s current offset."""
    chunks, got = [], 0
    while got < limit:
        chunk = os.read(f, min(CHUNK, limit - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def whole_chars(data):
    """``data`` without a UTF-8 sequence cut short at its end (where a cap cut it)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # ASCII or the first byte of a sequence
            need = 1 if byte < 0xC0 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data[:-back] if need > back else data
    return data


def text(data):
    return data.decode("utf-8", "replace")


def valid_name(name):
    """Whether a name read from a folder is valid UTF-8 (else it holds surrogate escapes)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_name(name):
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def capped_warnings(warnings):
    if len(warnings) <= MAX_WARNINGS:
        return warnings
    more = len(warnings) - MAX_WARNINGS + 1
    return warnings[: MAX_WARNINGS - 1] + ["and %d more warnings" % more]


# collect --------------------------------------------------------------------------------------


def empty_answer():
    return {
        "summary": None,
        "summary_truncated": False,
        "result": {"present": False, "size": 0, "too_large": False, "text": None},
        "question": None,
        "question_json": None,
        "artifacts": [],
        "warnings": [],
    }


def read_text(fd, name, shown, cap, warnings):
    """(text, truncated) of the regular file ``name``, at most ``cap`` bytes of it; (None,
    False) when it is missing or not a regular file (warned about)."""
    try:
        opened = open_file(fd, name, shown)
    except Unsafe as exc:
        warnings.append("%s, skipped" % exc)
        return None, False
    if opened is None:
        return None, False
    f, _ = opened
    try:
        data = read_upto(f, cap + 1)
    except OSError as exc:
        warnings.append("%s: cannot be read (%s), skipped" % (shown, exc.strerror))
        return None, False
    finally:
        os.close(f)
    if len(data) > cap:
        return text(whole_chars(data[:cap])), True
    return text(data), False


def read_result(out, cap, warnings):
    """out/result.json: {present, size, too_large, text}."""
    result = {"present": False, "size": 0, "too_large": False, "text": None}
    try:
        opened = open_file(out, "result.json", "out/result.json")
    except Unsafe as exc:
        warnings.append("%s, skipped" % exc)
        return result
    if opened is None:
        return result
    f, st = opened
    result.update(present=True, size=st.st_size)
    try:
        if st.st_size > cap:
            result["too_large"] = True
            return result
        data = read_upto(f, cap + 1)
    except OSError as exc:
        warnings.append("out/result.json: cannot be read (%s)" % exc.strerror)
        return result
    finally:
        os.close(f)
    if len(data) > cap:  # it grew meanwhile
        result.update(size=len(data), too_large=True)
    else:
        result.update(size=len(data), text=text(data))
    return result


class Walk:
    """The state of a walk of out/artifacts: what was found, what is left of the budget."""

    def __init__(self, cap, warnings):
        self.cap, self.warnings = cap, warnings
        self.found = []
        self.left = MAX_ENTRIES
        self.full = False


def list_artifacts(fd, cap, warnings):
    """Every regular file under the folder ``fd`` (out/artifacts), sorted by path."""
    walk = Walk(cap, warnings)
    walk_folder(walk, fd, "", 0)
    if walk.full:
        warnings.append("out/artifacts: more than %d entries, the rest not listed" % MAX_ENTRIES)
    return sorted(walk.found, key=lambda artifact: artifact["path"])


def walk_folder(walk, fd, rel, depth):
    """List folder ``fd``, at ``rel`` (ending with "/" unless it is the top) ``depth`` levels
    below out/artifacts, and the folders in it."""
    names = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if walk.left == 0:
                walk.full = True
                break
            walk.left -= 1
            names.append(entry.name)
    for name in sorted(names):
        if not valid_name(name):
            shown = "out/artifacts/%s%s" % (rel, shown_name(name))
            walk.warnings.append("%s: a name that is not valid UTF-8, skipped" % shown)
            continue
        path = rel + name
        shown = "out/artifacts/" + path
        st = lstat_at(fd, name)
        if st is None:
            continue  # gone meanwhile
        if stat.S_ISREG(st.st_mode):
            artifact = hashed(walk, fd, name, path, shown, st)
            if artifact is not None:
                walk.found.append(artifact)
        elif stat.S_ISDIR(st.st_mode):
            if depth + 1 >= MAX_DEPTH:
                why = "more than %d levels deep, not listed" % MAX_DEPTH
                walk.warnings.append("%s: %s" % (shown, why))
                continue
            try:
                sub = open_folder(fd, name, shown)
            except Unsafe as exc:
                walk.warnings.append("%s, skipped" % exc)
                continue
            if sub is None:
                continue
            try:
                walk_folder(walk, sub, path + "/", depth + 1)
            except OSError as exc:
                walk.warnings.append("%s: cannot be read (%s), skipped" % (shown, exc.strerror))
            finally:
                os.close(sub)
        else:
            walk.warnings.append("%s: %s, skipped" % (shown, kind_of(st.st_mode)))


def hashed(walk, fd, name, path, shown, st):
    """The artifact entry of the regular file ``name`` in ``fd``: its sha256 when it is at most
    the cap (a file over it is not opened); None when it cannot be read."""
    if st.st_size > walk.cap:
        return {"path": path, "size": st.st_size, "sha256": None}
    try:
        opened = open_file(fd, name, shown)
    except Unsafe as exc:
        walk.warnings.append("%s, skipped" % exc)
        return None
    if opened is None:
        return None
    f, st = opened
    digest, size = hashlib.sha256(), 0
    try:
        while size <= walk.cap:
            chunk = os.read(f, min(CHUNK, walk.cap + 1 - size))
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    except OSError as exc:
        walk.warnings.append("%s: cannot be read (%s), skipped" % (shown, exc.strerror))
        return None
    finally:
        os.close(f)
    if size > walk.cap:  # it grew meanwhile
        return {"path": path, "size": size, "sha256": None}
    return {"path": path, "size": size, "sha256": digest.hexdigest()}


def collect(io_dir, max_result, max_artifact):
    answer = empty_answer()
    warnings = answer["warnings"]
    top = open_io_dir(io_dir, warnings)
    if top is None:
        return answer
    try:
        answer["summary"], answer["summary_truncated"] = read_text(
            top, "RESULT.md", "RESULT.md", MAX_SUMMARY, warnings
        )
        try:
            out = open_folder(top, "out", "out")
        except Unsafe as exc:
            warnings.append("%s, skipped" % exc)
            out = None
    finally:
        os.close(top)
    if out is None:
        return answer
    try:
        answer["result"] = read_result(out, max_result, warnings)
        for key, name in (("question", "QUESTION.md"), ("question_json", "QUESTION.json")):
            answer[key] = read_text(out, name, "out/" + name, MAX_QUESTION, warnings)[0]
        try:
            artifacts = open_folder(out, "artifacts", "out/artifacts")
        except Unsafe as exc:
            warnings.append("%s, skipped" % exc)
            artifacts = None
    finally:
        os.close(out)
    if artifacts is not None:
        try:
            answer["artifacts"] = list_artifacts(artifacts, max_artifact, warnings)
        except OSError as exc:
            warnings.append("out/artifacts: cannot be read (%s), skipped" % exc.strerror)
        finally:
            os.close(artifacts)
    answer["warnings"] = capped_warnings(warnings)
    return answer


# read -----------------------------------------------------------------------------------------


def read(io_dir, rel, limit, out):
    """Copy out/artifacts/REL_PATH to ``out`` (binary), at most ``limit`` bytes."""
    if clean_name(rel) != rel:
        raise Fail(2, "%r is not a clean relative path" % rel)
    warnings = []
    fd = open_io_dir(io_dir, warnings)
    if fd is None:
        raise Fail(3, warnings[0] if warnings else "%s: no such folder" % io_dir)
    names = ["out", "artifacts"] + rel.split("/")
    try:
        for i, name in enumerate(names[:-1]):
            sub = open_folder(fd, name, "/".join(names[: i + 1]))
            os.close(fd)
            fd = sub
            if fd is None:
                raise Fail(3, "out/artifacts/%s: no such file" % rel)
        opened = open_file(fd, names[-1], "out/artifacts/" + rel)
    except Unsafe as exc:
        raise Fail(3, "%s: %s, not read" % (exc.path, exc.why)) from None
    finally:
        if fd is not None:
            os.close(fd)
    if opened is None:
        raise Fail(3, "out/artifacts/%s: no such file" % rel)
    f, st = opened
    try:
        if st.st_size > limit:
            raise Fail(4, "out/artifacts/%s: %d bytes, over %d" % (rel, st.st_size, limit))
        sent = 0
        while True:
            chunk = os.read(f, min(CHUNK, limit + 1 - sent))
            if not chunk:
                break
            sent += len(chunk)
            if sent > limit:
                raise Fail(4, "out/artifacts/%s: grew past %d bytes while read" % (rel, limit))
            out.write(chunk)
        out.flush()
    finally:
        os.close(f)


# progress -------------------------------------------------------------------------------------


def progress(io_dir, cursor, limit):
    answer = {"size": 0, "cursor": 0, "lines": []}
    warnings = []
    opened = None
    fd = open_io_dir(io_dir, warnings)
    try:
        if fd is not None:
            out = open_folder(fd, "out", "out")
            if out is not None:
                try:
                    opened = open_file(out, "progress.jsonl", "out/progress.jsonl")
                finally:
                    os.close(out)
    except Unsafe as exc:
        warnings.append("%s, skipped" % exc)
    finally:
        if fd is not None:
            os.close(fd)
    for warning in warnings:
        sys.stderr.write("exchange progress: %s\n" % warning)
    if opened is None:
        return answer
    f, st = opened
    try:
        start = cursor if cursor <= st.st_size else 0
        chunks, got = [], 0
        while got < limit:
            chunk = os.pread(f, min(CHUNK, limit - got), start + got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(f)
    end = data.rfind(b"\n")
    if end >= 0:
        answer["lines"] = [text(line) for line in data[:end].split(b"\n")]
        answer["cursor"] = start + end + 1
    elif limit > 0 and len(data) == limit:
        answer["cursor"] = start + len(data)  # one line longer than the limit: skipped
    else:
        answer["cursor"] = start
    answer["size"] = max(st.st_size, start + len(data))
    return answer


# Command line ---------------------------------------------------------------------------------

USAGE = {
    "collect": "collect IO_DIR MAX_RESULT_BYTES MAX_ARTIFACT_BYTES",
    "read": "read IO_DIR REL_PATH MAX_BYTES",
    "progress": "progress IO_DIR CURSOR MAX_BYTES",
}


def number(value, what):
    if not (value.isascii() and value.isdigit()):
        raise Fail(2, "%s must be a non-negative integer, not %r" % (what, value))
    return int(value)


def io_dir_of(value):
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if not value.startswith("/") or not parts or ".." in parts:
        raise Fail(2, "IO_DIR must be an absolute path without '..', not %r" % value)
    return value


def run(args):
    if not args or args[0] not in USAGE or len(args) != 4:
        raise Fail(2, "usage: " + " | ".join(USAGE.values()))
    command, io_dir, first, second = args
    io_dir = io_dir_of(io_dir)
    if command == "collect":
        caps = number(first, "MAX_RESULT_BYTES"), number(second, "MAX_ARTIFACT_BYTES")
        answer = collect(io_dir, *caps)
    elif command == "progress":
        answer = progress(io_dir, number(first, "CURSOR"), number(second, "MAX_BYTES"))
    else:
        return read(io_dir, first, number(second, "MAX_BYTES"), sys.stdout.buffer)
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def main():
    args = sys.argv[1:]
    try:
        run(args)
    except Fail as exc:
        command = " " + args[0] if args and args[0] in USAGE else ""
        sys.stderr.write("exchange%s: %s\n" % (command, exc))
        sys.exit(exc.code)


if __name__ == "__main__":
    main()
