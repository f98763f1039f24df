"""The ``hangar`` command line: a thin surface over the REST API (``HANGAR_URL``, default
``http://127.0.0.1:8080``; token from ``HANGAR_TOKEN`` or ``DATA_DIR/admin-token``), so it works
the same against a remote server. ``serve`` and the local checks of ``doctor`` are the only parts
that run here.

Exit status 0 on success; otherwise one line on stderr (``hangar: MESSAGE (CODE)``) and 1, or
2 for a usage error. Every read takes ``--json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from hangar import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hangar", description="A control plane for cloud "
                                     "coding agents whose work survives the sandbox.")  # fmt: skip
    parser.add_argument("--version", action="version", version=f"hangar {__version__}")
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = top.add_parser("serve", help="run the control plane on this machine")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--data-dir", help="where the embedded backends keep their data")

    env = top.add_parser("env", help="environments: repo, branch, setup, vars, secrets")
    env_cmd = env.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = env_cmd.add_parser("add", help="add an environment (its repo must be reachable)")
    add.add_argument("name")
    add.add_argument("--repo", required=True, help="a git URL or an absolute local path")
    add.add_argument("--branch")
    add.add_argument("--setup", help="a command run in every new sandbox before the restore")
    add.add_argument("--var", action="append", metavar="K=V")
    add.add_argument("--secret", action="append", metavar="K=V")
    env_list = env_cmd.add_parser("list", help="list environments (never secret values)")
    env_list.add_argument("--json", action="store_true")
    env_del = env_cmd.add_parser("delete", help="delete an environment")
    env_del.add_argument("name")

    ses = top.add_parser("session", help="sessions: resumable streams of work")
    cmd = ses.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = cmd.add_parser("new", help="create a session and start its first turn")
    new.add_argument("name")
    new.add_argument("message")
    new.add_argument("--env", required=True)
    new.add_argument("--harness", default="claude",
                     choices=["claude", "codex", "pi", "antigravity"])  # fmt: skip
    new.add_argument("--model")
    new.add_argument("--title")
    new.add_argument("--idle", type=float, metavar="MIN", help="idle minutes (0: never)")
    new.add_argument("-w", "--wait", action="store_true", help="wait for the turn")
    for name, help_ in (("list", "list sessions"), ("get", "show a session")):
        p = cmd.add_parser(name, help=help_)
        if name == "get":
            p.add_argument("name")
        p.add_argument("--json", action="store_true")
    send = cmd.add_parser("send", help="start the next turn (resuming if suspended)")
    send.add_argument("name")
    send.add_argument("message")
    send.add_argument("-w", "--wait", action="store_true", help="wait for the turn")
    for name, help_ in (("open", "resume into a sandbox"), ("suspend", "checkpoint and "
                        "release the sandbox"), ("archive", "drop sandbox and checkpoints"),
                        ("delete", "delete the session"), ("patch", "print the session's "
                        "patch (base to working tree, untracked files included)")):  # fmt: skip
        p = cmd.add_parser(name, help=help_)
        p.add_argument("name")
        if name in ("open", "suspend", "archive"):
            p.add_argument("--json", action="store_true")
    keep = cmd.add_parser("keep", help="set the idle timeout")
    keep.add_argument("name")
    keep.add_argument("--idle", type=float, required=True, metavar="MIN", help="0: never")
    fork = cmd.add_parser("fork", help="restore one checkpoint into N new sessions")
    fork.add_argument("name")
    fork.add_argument("n", type=int)
    fork.add_argument("--json", action="store_true")
    shell = cmd.add_parser("shell", help="run a command (or a terminal) in the session's repo")
    shell.add_argument("name")
    shell.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD")
    log = cmd.add_parser("log", help="a turn's run log (default: the latest)")
    log.add_argument("name")
    log.add_argument("turn", nargs="?", type=int)

    sbx = top.add_parser("sandbox", help="sandboxes")
    sbx_cmd = sbx.add_subparsers(dest="action", required=True, metavar="ACTION")
    sbx_list = sbx_cmd.add_parser("list")
    sbx_list.add_argument("--json", action="store_true")
    destroy = sbx_cmd.add_parser("destroy", help="destroy a sandbox (its session is "
                                 "checkpointed and suspended first)")  # fmt: skip
    destroy.add_argument("id")

    top.add_parser("doctor", help="check the configuration")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    from hangar.cli import commands
    from hangar.cli.client import ApiError
    from hangar.config import Settings
    from hangar.errors import HangarError

    try:
        env = dict(os.environ)
        if getattr(args, "data_dir", None):
            env["HANGAR_DATA_DIR"] = args.data_dir
        settings = Settings.from_env(env)
        return commands.run(args, settings)
    except ApiError as exc:
        print(f"hangar: {exc.message} ({exc.code})", file=sys.stderr)
        return 1
    except HangarError as exc:
        print(f"hangar: {exc.message} ({exc.code})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hangar: interrupted", file=sys.stderr)
        return 130
