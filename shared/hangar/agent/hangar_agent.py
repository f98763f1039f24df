"""The ``hangar-agent`` command: how an agent hands the results of its turn back to hangar.

Installed in every sandbox as ``/hangar/bin/hangar-agent`` (the installer puts
``#!/usr/bin/python3 -IS`` before this text) and run by the agent, as the agent. Standard
library only; it imports nothing of hangar. It writes into the turn's exchange folder, named by
``$HANGAR_IO``::

    RESULT.md           done: the summary for the people who asked
    out/result.json     result: a structured result (any JSON value)
    out/QUESTION.md     ask, question: a question; the turn ends as needs_input
    out/QUESTION.json   question: {"question": ..., "options": [...]} (1 to 5 options)
    out/progress.jsonl  progress: {"ts", "message", "pct"} lines, appended
    out/artifacts/**    artifact: files and folders to hand back

Every file is written whole or not at all (a temporary file in the same folder, then
``os.replace``); a progress line is appended with one O_APPEND write. Each command prints one
line saying what it wrote. Exit status: 0 when it is written, 2 on bad input (why on stderr,
nothing written), 1 when writing failed.

Hangar reads the folder as untrusted data (:mod:`hangar.agent.exchange`) whatever is in it: the
limits here are for the agent's sake (a clear error now rather than an answer dropped later).
"""

import argparse
import json
import os
import shutil
import stat
import sys
from datetime import datetime, timezone

MAX_MESSAGE = 1000
MAX_OPTIONS = 5
MAX_OPTION = 80
TMP_PREFIX = ".hangar-tmp-"
CHUNK = 1 << 20

DESCRIPTION = """\
Hand the results of this turn back to the people who asked: a summary (done), a structured
result (result), files (artifact), progress notes (progress), or a question that ends the turn
waiting for their answer (ask, question). Everything goes into the turn's folder, $HANGAR_IO.
Run `hangar-agent COMMAND --help` for each command."""

EPILOG = """\
files written under $HANGAR_IO:
  RESULT.md            done
  out/result.json      result
  out/QUESTION.md      ask, question
  out/QUESTION.json    question
  out/progress.jsonl   progress
  out/artifacts/NAME   artifact

exit status: 0 written, 2 bad input (nothing written), 1 writing failed"""


class BadInput(Exception):
    """Input the command refuses: exit 2, nothing written."""


# Checks ---------------------------------------------------------------------------------------


def io_folder():
    """The turn's exchange folder, from $HANGAR_IO."""
    path = os.environ.get("HANGAR_IO")
    if not path:
        raise BadInput("HANGAR_IO is not set: run hangar-agent inside a hangar turn")
    if not os.path.isdir(path):
        raise BadInput("HANGAR_IO (%s) is not a folder" % path)
    return path


def utf8(text, what):
    """``text`` encoded as UTF-8; text that cannot be (bytes that were not UTF-8) is refused."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput("%s is not valid UTF-8" % what) from None


def decoded(data, what):
    """Bytes read from stdin or a file, as text."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput("%s is not valid UTF-8 (%s)" % (what, exc.reason)) from None


def not_blank(text, what):
    if not text.strip():
        raise BadInput("%s is empty" % what)
    return text


def ending_line(data):
    """``data`` (bytes) ending with a newline."""
    return data if data.endswith(b"\n") else data + b"\n"


def clean_name(name):
    """The normalised relative path, or None when ``name`` is not a safe relative path (the
    rule of hangar.agent.paths, which this command may not import)."""
    if name.startswith("/") or "\0" in name:
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def kind_of(mode):
    """What a file that is neither a regular file nor a folder is, for messages."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file or folder"


# Writing --------------------------------------------------------------------------------------


def temp_path(folder):
    """A fresh name in ``folder`` for a file or folder that is renamed into place."""
    return os.path.join(folder, "%s%d-%s" % (TMP_PREFIX, os.getpid(), os.urandom(4).hex()))


def remove_quietly(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except OSError:
        pass


def write_atomically(path, data):
    """Write ``data`` (bytes) to ``path``, making its folder as needed: a reader sees the old
    file or the new one, never a part."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = temp_path(folder)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def append_line(path, data):
    """Append one line (bytes ending with a newline) in one O_APPEND write."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        written = os.write(fd, data)
        while written < len(data):  # only on a full disk or a signal; the line stays whole
            written += os.write(fd, data[written:])
    finally:
        os.close(fd)


def copy_file(src, dst, follow):
    """Copy the regular file ``src`` to the new file ``dst`` with its permission bits; the
    byte count. ``src`` is opened without following a link unless ``follow``."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(src, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError("%s is %s" % (src, kind_of(st.st_mode)))
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            size = 0
            while True:
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
                size += len(chunk)
            os.fchmod(out, stat.S_IMODE(st.st_mode) & 0o777)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return size


def copy_tree(src, dst, shown, skip, warn):
    """Copy the folder ``src`` to the new folder ``dst``: folders and regular files only, each
    other entry (a link, FIFO, socket or device) named in a warning, as are entries that cannot
    be read and the folders in ``skip`` ((st_dev, st_ino) pairs), and ``dst`` itself (a copy
    of a folder that holds it would never end). (files, bytes) copied."""
    os.mkdir(dst, 0o755)
    made = os.stat(dst)
    skip = skip | {(made.st_dev, made.st_ino)}
    files = size = 0
    todo = [(src, dst, shown)]
    while todo:
        src_dir, dst_dir, shown_dir = todo.pop()
        try:
            with os.scandir(src_dir) as entries:
                names = sorted(entry.name for entry in entries)
        except OSError as exc:
            warn("%s: cannot be read (%s), left out" % (shown_dir, exc.strerror))
            continue
        for name in names:
            s, d = os.path.join(src_dir, name), os.path.join(dst_dir, name)
            label = shown_dir + "/" + name
            try:
                utf8(name, "the name")
            except BadInput:
                warn("%s: the name is not valid UTF-8, skipped" % label)
                continue
            try:
                st = os.lstat(s)
                if stat.S_ISDIR(st.st_mode):
                    if (st.st_dev, st.st_ino) in skip:
                        warn("%s: the artifacts folder or the copy itself, skipped" % label)
                        continue
                    os.mkdir(d, 0o755)
                    todo.append((s, d, label))
                elif stat.S_ISREG(st.st_mode):
                    size += copy_file(s, d, follow=False)
                    files += 1
                else:
                    warn("%s: %s, skipped" % (label, kind_of(st.st_mode)))
            except OSError as exc:
                warn("%s: cannot be copied (%s), skipped" % (label, exc.strerror or exc))
    return files, size


def put_in_place(tmp, dest):
    """Rename ``tmp`` to ``dest``, replacing whatever is there: a file replaces a file (or a
    link) in one rename; a folder, or anything over one, moves the old one aside first."""
    try:
        old = os.lstat(dest)
    except FileNotFoundError:
        old = None
    if old is None or not (stat.S_ISDIR(old.st_mode) or os.path.isdir(tmp)):
        os.replace(tmp, dest)
        return
    aside = temp_path(os.path.dirname(dest))
    os.rename(dest, aside)
    try:
        os.rename(tmp, dest)
    except OSError:
        os.rename(aside, dest)
        raise
    remove_quietly(aside)


# Commands -------------------------------------------------------------------------------------


def do_progress(io, args):
    message = args.message.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")
    not_blank(message, "the message")
    if len(message) > MAX_MESSAGE:
        raise BadInput("the message is %d characters, over %d" % (len(message), MAX_MESSAGE))
    if args.pct is not None and not 0 <= args.pct <= 100:
        raise BadInput("--pct must be from 0 to 100, not %d" % args.pct)
    ts = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    entry = {"ts": ts, "message": message}
    if args.pct is not None:
        entry["pct"] = args.pct
    line = utf8(json.dumps(entry, ensure_ascii=False) + "\n", "the message")
    append_line(os.path.join(io, "out", "progress.jsonl"), line)
    pct = " (%d%%)" % args.pct if args.pct is not None else ""
    return "appended a progress line%s to out/progress.jsonl" % pct


def do_ask(io, args):
    text = utf8(not_blank(args.question, "the question"), "the question")
    path = os.path.join(io, "out", "QUESTION.json")
    try:
        os.unlink(path)  # first: QUESTION.md never stands beside options of another question
    except FileNotFoundError:
        pass
    write_atomically(os.path.join(io, "out", "QUESTION.md"), ending_line(text))
    return "wrote out/QUESTION.md: now end your turn, so that the person can answer"


def do_question(io, args):
    text = utf8(not_blank(args.question, "the question"), "the question")
    options = args.option or []
    if not 1 <= len(options) <= MAX_OPTIONS:
        raise BadInput("give 1 to %d --option, not %d" % (MAX_OPTIONS, len(options)))
    for option in options:
        if "\n" in option or "\r" in option:
            raise BadInput("option %r holds a newline" % option)
        if not option.strip() or len(option) > MAX_OPTION:
            raise BadInput("option %r must be 1 to %d characters" % (option, MAX_OPTION))
        utf8(option, "option %r" % option)
    value = {"question": args.question, "options": options}
    data = (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    # QUESTION.json first: once QUESTION.md is there, so are its options.
    write_atomically(os.path.join(io, "out", "QUESTION.json"), data)
    write_atomically(os.path.join(io, "out", "QUESTION.md"), ending_line(text))
    counted = "1 option" if len(options) == 1 else "%d options" % len(options)
    return ("wrote out/QUESTION.md and out/QUESTION.json (%s): now end your turn, so that the "
            "person can choose" % counted)


def do_artifact(io, args):
    given = args.name if args.name is not None else os.path.basename(os.path.abspath(args.path))
    name = clean_name(given)
    if name is None:
        raise BadInput("NAME %r must be a relative path without '..'" % given)
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
        raise BadInput("NAME %r holds a control character: hangar would not keep it" % given)
    utf8(name, "NAME")
    try:
        st = os.stat(args.path)  # PATH itself may be a link, to a file or a folder
    except FileNotFoundError:
        raise BadInput("%s: no such file or folder" % args.path) from None
    except OSError as exc:
        raise BadInput("%s: %s" % (args.path, exc.strerror)) from None
    is_folder = stat.S_ISDIR(st.st_mode)
    if not (is_folder or stat.S_ISREG(st.st_mode)):
        what = kind_of(st.st_mode)
        raise BadInput("%s is %s: only files and folders can be handed back" % (args.path, what))
    artifacts = os.path.join(io, "out", "artifacts")
    dest = os.path.join(artifacts, name)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = temp_path(os.path.dirname(dest))
    try:
        if is_folder:
            held = os.stat(artifacts)
            shown = args.path.rstrip("/") or "/"
            files, size = copy_tree(args.path, tmp, shown, {(held.st_dev, held.st_ino)}, warn)
            what = "%d files, %d bytes" % (files, size)
        else:
            what = "%d bytes" % copy_file(args.path, tmp, follow=True)
        put_in_place(tmp, dest)
    except BaseException:
        remove_quietly(tmp)
        raise
    return "copied %s to out/artifacts/%s (%s)" % (args.path, name, what)


def warn(line):
    say(sys.stderr, "hangar-agent artifact: %s" % line)


def refuse_constant(name):
    raise ValueError("%s is not JSON" % name)


def do_result(io, args):
    given = args.value
    if given == "-":
        text = decoded(sys.stdin.buffer.read(), "standard input")
    elif given.startswith("@"):
        try:
            with open(given[1:], "rb") as f:
                data = f.read()
        except OSError as exc:
            raise BadInput("cannot read %s: %s" % (given[1:], exc.strerror)) from None
        text = decoded(data, given[1:])
    else:
        utf8(given, "the JSON")
        text = given
    try:
        value = json.loads(text, parse_constant=refuse_constant)
    except ValueError as exc:
        raise BadInput("not valid JSON: %s" % exc) from None
    except RecursionError:
        raise BadInput("not valid JSON: nested too deeply") from None
    try:
        data = (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput("the JSON holds a lone surrogate (a \\ud800-\\udfff escape)") from None
    write_atomically(os.path.join(io, "out", "result.json"), data)
    return "wrote out/result.json (%d bytes)" % len(data)


def do_done(io, args):
    if args.summary == "-":
        text = decoded(sys.stdin.buffer.read(), "standard input")
    else:
        text = args.summary
    data = ending_line(utf8(not_blank(text, "the summary"), "the summary"))
    write_atomically(os.path.join(io, "RESULT.md"), data)
    return "wrote RESULT.md (%d bytes)" % len(data)


# Command line ---------------------------------------------------------------------------------


HELP = {
    "progress": (
        "note progress that people can follow while you work",
        "Append a progress note to out/progress.jsonl: the people who asked see it while the\n"
        "turn runs. Newlines in MESSAGE become spaces.",
    ),
    "ask": (
        "ask an open question, then end your turn",
        "Write QUESTION to out/QUESTION.md (removing any out/QUESTION.json): the turn ends as\n"
        "needs_input. End your turn after this: the answer comes as the next turn.",
    ),
    "question": (
        "ask a question with options to choose from, then end your turn",
        "Write QUESTION to out/QUESTION.md, and it with its options to out/QUESTION.json: the\n"
        "turn ends as needs_input and the person picks an option. End your turn after this:\n"
        "the answer comes as the next turn.",
    ),
    "artifact": (
        "hand back a file or a folder",
        "Copy a file or a folder (recursively) to out/artifacts/NAME, replacing what was\n"
        "there. Only regular files and folders are copied: links, FIFOs, sockets and devices\n"
        "inside a folder are skipped, each named on stderr.",
    ),
    "result": (
        "give a structured result (JSON)",
        "Write a JSON value to out/result.json, for the programs that asked. It must parse\n"
        "as JSON, else nothing is written.",
    ),
    "done": (
        "write the summary of your turn",
        "Write SUMMARY to RESULT.md: what the people who asked read first when the turn ends.",
    ),
}
"""Each command's one-line summary (in the command list) and its --help description."""


def parser():
    top = argparse.ArgumentParser(prog="hangar-agent", description=DESCRIPTION, epilog=EPILOG,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sub = {}
    for name, run in (("progress", do_progress), ("ask", do_ask), ("question", do_question),
                      ("artifact", do_artifact), ("result", do_result), ("done", do_done)):
        summary, description = HELP[name]
        sub[name] = commands.add_parser(name, help=summary, description=description,
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
        sub[name].set_defaults(run=run)

    sub["progress"].add_argument("--pct", type=int, metavar="N",
                                 help="how far along you are, 0 to 100")
    sub["progress"].add_argument("message", metavar="MESSAGE",
                                 help="what you are doing, at most %d characters" % MAX_MESSAGE)
    sub["ask"].add_argument("question", metavar="QUESTION", help="the question (Markdown)")
    sub["question"].add_argument(
        "--option", action="append", metavar="TEXT",
        help="an answer to choose; repeat it: 1 to %d options of one line, each at most %d "
        "characters" % (MAX_OPTIONS, MAX_OPTION),
    )
    sub["question"].add_argument("question", metavar="QUESTION", help="the question (Markdown)")
    sub["artifact"].add_argument("path", metavar="PATH", help="the file or folder to hand back")
    sub["artifact"].add_argument(
        "name", metavar="NAME", nargs="?",
        help="its name under out/artifacts: a relative path without '..' (default: the last "
        "part of PATH)",
    )
    sub["result"].add_argument("value", metavar="JSON|-|@FILE",
                               help="the JSON text; - reads it from stdin, @FILE from FILE")
    sub["done"].add_argument("summary", metavar="SUMMARY|-",
                             help="the summary (Markdown); - reads it from stdin")
    return top


def say(stream, line):
    stream.buffer.write((line + "\n").encode("utf-8", "backslashreplace"))
    stream.buffer.flush()


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        line = args.run(io_folder(), args)
    except BadInput as exc:
        say(sys.stderr, "hangar-agent %s: %s" % (args.command, exc))
        sys.exit(2)
    except OSError as exc:
        say(sys.stderr, "hangar-agent %s: could not write: %s" % (args.command, exc))
        sys.exit(1)
    say(sys.stdout, line)


if __name__ == "__main__":
    main()
