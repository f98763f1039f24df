"""Merge hangar's settings into a harness's own configuration files under HOME. Standard library
only; run as the agent (the files are the agent's) as ``python3 -I -S -c SRC HOME``, reading
one JSON object on standard input::

    {"files": {"<path under HOME>": {<the keys to set, as nested tables>}}}

A path ends in ``.toml`` or ``.json``. Each file is read and the keys merged in: a table merges
key by key, any other value replaces the one there, and every other key and table stays (what
the environment's setup or an image put there). The file is written only when that changes it,
atomically (a new file renamed over it, its mode kept; a new file is 0600, new folders 0700).
A TOML file keeps its text too (comments, order) when hangar's keys are all new and can go in as
lines of their own (top-level keys first, the others under new table headers at the end);
otherwise (a key of hangar's already there with another value, say) it is written again from its
parsed data, every key and table kept, its comments lost. Either way the new text is parsed again
and must hold exactly the merge, or the file is left as it was. A missing file is created.

The files are the agent's, and the agent may be hostile:

- nothing follows a link: each folder from HOME down is opened from the one above it with
  O_NOFOLLOW|O_DIRECTORY (a missing one is made there), the file with O_NOFOLLOW|O_NONBLOCK (a
  FIFO cannot block the open) and checked to be a regular file; a link, on the way or as the
  file, leaves the file as it is;
- a file over :data:`MAX_BYTES`, not UTF-8, not valid TOML or JSON, or a JSON file that is not
  an object, is left as it is;

each with a warning. The answer, on standard output, is ``{"warnings": [...]}``: one line per
file left as it was, saying why. Exit 0; a bad request exits 2.
"""

import json
import os
import stat
import sys

from hangar.agent import tomltext

MAX_BYTES = 1 << 20
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class LeftAsIs(Exception):
    """The file is left as it is, for the reason given."""


def merged(base, wanted):
    """``base`` with ``wanted`` merged in: tables key by key, anything else replaced."""
    out = dict(base)
    for name, item in wanted.items():
        if isinstance(item, dict) and isinstance(out.get(name), dict):
            out[name] = merged(out[name], item)
        else:
            out[name] = item
    return out


def same(a, b):
    """Equal, and of the same types all the way down (TOML's 1 is not its true)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def leaves(base, wanted, path=()):
    """The ``(path, value)`` of each key of ``wanted`` that ``base`` lacks or holds otherwise,
    a table of hangar's descended into."""
    for name, item in wanted.items():
        here = base.get(name) if isinstance(base, dict) else None
        if isinstance(item, dict) and item and (here is None or isinstance(here, dict)):
            yield from leaves(here or {}, item, path + (name,))
        elif here is None or not same(here, item):
            yield path + (name,), item


def merge_toml(text, wanted):
    """The new text of a TOML file holding ``text``, or None when it holds ``wanted``
    already."""
    try:
        import tomllib
    except ImportError:  # before Python 3.11: a new file can still be written, unchecked
        if text.strip():
            raise LeftAsIs("this sandbox's Python cannot read TOML (3.11 or later can)") from None
        return tomltext.dump(wanted)
    try:
        data = tomllib.loads(text)
    except (ValueError, RecursionError) as exc:
        raise LeftAsIs("it is not valid TOML: %s" % exc) from None
    goal = merged(data, wanted)
    if same(goal, data):
        return None
    for candidate in (lambda: tomltext.with_keys(text, list(leaves(data, wanted))),
                      lambda: tomltext.dump(goal)):  # fmt: skip
        try:
            new = candidate()
            if same(tomllib.loads(new), goal):
                return new
        except (ValueError, RecursionError):
            continue
    raise LeftAsIs("hangar's keys could not be written into it")


def merge_json(text, wanted):
    """The new text of a JSON file holding ``text`` (empty: none yet), or None when it holds
    ``wanted`` already."""
    try:
        data = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise LeftAsIs("it is not valid JSON: %s" % exc) from None
    if not isinstance(data, dict):
        raise LeftAsIs("it holds a JSON %s, not an object" % type(data).__name__)
    goal = merged(data, wanted)
    if same(goal, data):
        return None
    return json.dumps(goal, indent=2, ensure_ascii=False) + "\n"


MERGERS = {".toml": merge_toml, ".json": merge_json}


def open_folder(home, parts):
    """A descriptor of the folder ``parts`` beneath HOME, each step opened without following a
    link and made (0700) when missing."""
    fd = os.open(home, DIR_FLAGS)
    try:
        for n, part in enumerate(parts):
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise LeftAsIs("~/%s is a link or not a folder (%s)"
                               % ("/".join(parts[: n + 1]), exc.strerror)) from None  # fmt: skip
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(folder, name):
    """The file's text and mode, or ("", None) when there is none."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=folder)
    except FileNotFoundError:
        return "", None
    except OSError as exc:
        raise LeftAsIs("it is a link or cannot be opened (%s)" % exc.strerror) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LeftAsIs("it is not a regular file")
        if info.st_size > MAX_BYTES:
            raise LeftAsIs("it is over %d KiB" % (MAX_BYTES >> 10))
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise LeftAsIs("it is over %d KiB" % (MAX_BYTES >> 10))
    try:
        return data.decode("utf-8"), stat.S_IMODE(info.st_mode)
    except UnicodeDecodeError:
        raise LeftAsIs("it is not UTF-8") from None


def write_file(folder, name, text, mode):
    """Replace the file ``name`` in ``folder`` by one holding ``text``, atomically."""
    tmp = ".%s.hangar-%d-%s" % (name, os.getpid(), os.urandom(4).hex())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=folder)  # fmt: skip
    try:
        try:
            os.fchmod(fd, mode)
            data = text.encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=folder)
        except OSError:
            pass
        raise


def merge_file(home, path, wanted):
    """Merge ``wanted`` into the file at ``path`` under ``home``; LeftAsIs says why not."""
    parts = path.split("/")
    merge = MERGERS.get(os.path.splitext(path)[1])
    if merge is None or any(p in ("", ".", "..") for p in parts) or not isinstance(wanted, dict):
        raise LeftAsIs("hangar cannot merge settings into such a file")
    folder = open_folder(home, parts[:-1])
    try:
        text, mode = read_file(folder, parts[-1])
        new = merge(text, wanted)
        if new is not None:
            write_file(folder, parts[-1], new, 0o600 if mode is None else mode)
    finally:
        os.close(folder)


def main():
    try:
        home = sys.argv[1]
        files = json.loads(sys.stdin.buffer.read())["files"]
        if not os.path.isabs(home) or not isinstance(files, dict):
            raise ValueError(home)
    except (IndexError, KeyError, TypeError, ValueError) as exc:
        sys.stderr.write("usage: homeconfig HOME < {\"files\": {...}} (%s)\n" % exc)
        sys.exit(2)
    warnings = []
    for path, wanted in files.items():
        try:
            merge_file(home, path, wanted)
        except LeftAsIs as exc:
            warnings.append("~/%s was left as it is (%s): hangar's settings are not in it"
                            % (path, exc))  # fmt: skip
        except OSError as exc:
            warnings.append("~/%s could not be written (%s): hangar's settings are not in it"
                            % (path, exc.strerror or exc))  # fmt: skip
        except (RecursionError, ValueError) as exc:  # nested past what can be compared
            warnings.append("~/%s was left as it is (%s): hangar's settings are not in it"
                            % (path, type(exc).__name__))  # fmt: skip
    json.dump({"warnings": warnings}, sys.stdout)


if __name__ == "__main__":
    main()
