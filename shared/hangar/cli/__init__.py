"""The ``hangar`` command line: a thin surface over the REST API (``HANGAR_URL``, default
``http://127.0.0.1:8080``; the token from ``HANGAR_TOKEN`` or ``DATA_DIR/admin-token``), so it
works the same against a remote server. ``serve`` and the local checks of ``doctor`` are the
only parts that run here.

Exit status 0 on success; otherwise exactly one line on stderr, ``hangar: MESSAGE (CODE)``, and
2 for a usage error, 130 for Ctrl-C (which stops following, never the work), 124 for
``session wait --timeout`` running out, or 1 for anything else (``session shell -- CMD`` exits
with CMD's status).
Every read takes ``--json``. This module imports only the standard library: what a command
needs is imported when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from hangar import __version__

HARNESSES = ("claude", "codex", "pi", "antigravity")
STATES = ("starting", "active", "idle", "suspending", "suspended", "archived", "failed")
"""The values of ``hangar.models.SessionState`` (a test keeps them the same), spelled out: this
module imports only the standard library."""


class UsageError(Exception):
    """A command line argparse refused."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("hangar").strip()
        raise UsageError(f"{where}: {message}" if where else message)


def _count(low: int, high: int, what: str = "a whole number") -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high``."""

    def parse(raw: str) -> int:
        try:
            n = int(raw)
        except ValueError:
            n = low - 1
        if not low <= n <= high:
            raise argparse.ArgumentTypeError(f"{raw!r} is not {what} ({low}-{high})")
        return n

    return parse


_port = _count(1, 65535, "a port")


def _json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def _switch(p: argparse.ArgumentParser) -> None:
    p.add_argument("--harness", choices=HARNESSES, help="move the session to this harness: "
                   "its first turn there gets an account of the earlier ones (lossy)")  # fmt: skip
    p.add_argument("--model", help="the model from the next turn on (--harness clears it "
                   "unless given)")  # fmt: skip


def _message(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message", nargs="?",
                        help="what to ask (- reads it from standard input; after -- it may "
                        "start with a dash)")  # fmt: skip
    parser.add_argument("--message-file", metavar="PATH", help="read the message from PATH")


def _schema(p: argparse.ArgumentParser, default: str = "") -> None:
    p.add_argument("--schema", metavar="FILE", help="a JSON Schema file the turn's result must "
                   "match (the agent is asked for it; shown after the summary)" + default)


def _context(p: argparse.ArgumentParser) -> None:
    p.add_argument("--file", action="append", metavar="PATH", help="a file for the agent, in "
                   "$HANGAR_IO/in/<turn>/ (repeatable)")  # fmt: skip
    p.add_argument("--text", action="append", metavar="TEXT", help="a text for the agent, in "
                   "$HANGAR_IO/in/<turn>/ (repeatable)")  # fmt: skip
    p.add_argument("--from-local", action="store_true", help="send this checkout's unpushed "
                   "commits (a bundle) and its uncommitted changes with untracked files (a "
                   "patch); the agent's branch gets both before the turn")  # fmt: skip


TURN_TIMEOUT_HELP = ("stop the turn after MIN minutes (it ends timed_out; default: the "
                     "environment's, else HANGAR_TURN_TIMEOUT_MINUTES, 120)")


IMAGE_HELP = ("the container image its sandboxes run, such as registry.example/team/img:1.2 "
              "(needs a sandbox backend that runs images: gke://)")


WARM_POOL_HELP = ("keep N ready sandboxes for its sessions (within --warm-pool-hours), so a "
                  "start or resume does not wait for one; a GKE feature (gke://)")
WARM_HOURS_HELP = ("when the warm pool is kept, e.g. 'Mon-Fri 08:00-20:00; Sat 10:00-14:00 "
                   "America/New_York'; outside them it holds none (default: always)")


def _warm_pool(p: argparse.ArgumentParser, update: bool) -> None:
    p.add_argument("--warm-pool", type=int, metavar="N",
                   help=WARM_POOL_HELP + ("; 0: none" if update else ""))  # fmt: skip
    if not update:
        p.add_argument("--warm-pool-hours", metavar="SPEC", help=WARM_HOURS_HELP)
        return
    hours = p.add_mutually_exclusive_group()
    hours.add_argument("--warm-pool-hours", metavar="SPEC", help=WARM_HOURS_HELP)
    hours.add_argument("--no-warm-pool-hours", action="store_true",
                       help="keep the warm pool at all hours")  # fmt: skip


def _rules(p: argparse.ArgumentParser) -> None:
    p.add_argument("--notify-url", metavar="URL", help="POST its sessions' events here "
                   "instead of HANGAR_NOTIFY_URL (signed with HANGAR_NOTIFY_SECRET)" + (
                       "" if p.prog.endswith("add") else "; '' for none of its own"))  # fmt: skip
    p.add_argument("--allowed-host", action="append", metavar="HOST",
                   help="a host its agents' network tools may name under --permission-mode "
                   "deny-risky (covers its subdomains); repeatable" + (
                       "" if p.prog.endswith("add") else ", replaces the list"))  # fmt: skip
    p.add_argument("--deny-rule", action="append", metavar="NAME=REGEX",
                   help="a deny-risky rule of its own: what a tool would do that REGEX finds "
                   "is denied, naming NAME; repeatable" + (
                       "" if p.prog.endswith("add") else ", replaces its rules"))  # fmt: skip


def _permissions(p: argparse.ArgumentParser, default: str | None) -> None:
    p.add_argument("--permission-mode", choices=("auto", "ask", "deny-risky"), default=default,
                   help="who decides the turns' commands and edits: auto (nothing asked; the "
                   "sandbox is the boundary), ask (each waits for session approve or deny; "
                   "claude and codex)" + ("" if default else "; default: the session's"))  # fmt: skip


def _turn_timeout(p: argparse.ArgumentParser, help_: str) -> None:
    p.add_argument("--turn-timeout", type=float, metavar="MIN", help=help_)


def _wait(p: argparse.ArgumentParser) -> None:
    p.add_argument("-w", "--wait", action="store_true",
                   help="wait for the turn, showing its progress; then print its summary")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hangar", description="Sessions of coding agents whose work "
                     "survives the sandbox it was made in.")  # fmt: skip
    parser.add_argument("--version", action="version", version=f"hangar {__version__}")
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = top.add_parser("serve", help="run the control plane on this machine")
    serve.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1")
    serve.add_argument("--port", type=int, default=8080, help="default 8080 (0: any free port)")
    serve.add_argument("--data-dir", help="where the embedded backends keep their data "
                       "(default HANGAR_DATA_DIR, else ~/.hangar)")  # fmt: skip

    env = top.add_parser("env", help="environments: repo, branch, setup, vars, secrets")
    env_cmd = env.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = env_cmd.add_parser("add", help="add an environment (its repo must be reachable)")
    add.add_argument("name")
    add.add_argument("--repo", required=True, metavar="URL|PATH",
                     help="a git URL, or an absolute path on the server")  # fmt: skip
    add.add_argument("--branch", help="default: the remote's HEAD")
    add.add_argument("--setup", metavar="CMD", help="run in every new sandbox, before restore")
    add.add_argument("--var", action="append", metavar="K=V", help="repeatable")
    add.add_argument("--secret", action="append", metavar="K=V",
                     help="repeatable; stored encrypted, never shown again")  # fmt: skip
    add.add_argument("--host-port", action="append", type=_port, metavar="PORT", default=[],
                     help="repeatable; a port on the server's loopback (a local model server) "
                     "its sandboxes reach at their own 127.0.0.1:PORT")  # fmt: skip
    _turn_timeout(add, "stop a turn of its sessions after MIN minutes (it ends timed_out; "
                  "default HANGAR_TURN_TIMEOUT_MINUTES, 120)")
    add.add_argument("--image", help=IMAGE_HELP)
    _warm_pool(add, update=False)
    _rules(add)
    _json(add)
    _json(env_cmd.add_parser("list", help="list environments (never secret values)"))
    get_env = env_cmd.add_parser("get", help="show an environment (never secret values)")
    get_env.add_argument("name")
    _json(get_env)
    upd = env_cmd.add_parser("update", help="change the fields given: vars and secrets reach "
                             "the next turn, branch, setup, host ports and image the next "
                             "sandbox")  # fmt: skip
    upd.add_argument("name")
    upd.add_argument("--branch", help="'' for the remote's HEAD")
    upd.add_argument("--setup", metavar="CMD", help="'' for none")
    upd.add_argument("--var", action="append", metavar="K=V", help="add or replace; repeatable")
    upd.add_argument("--secret", action="append", metavar="K=V",
                     help="add or replace; repeatable; stored encrypted")  # fmt: skip
    upd.add_argument("--unset", action="append", metavar="K", default=[],
                     help="remove a variable or secret; repeatable")  # fmt: skip
    ports = upd.add_mutually_exclusive_group()
    ports.add_argument("--host-port", action="append", type=_port, metavar="PORT",
                       help="replaces the list; repeatable")  # fmt: skip
    ports.add_argument("--no-host-ports", action="store_true", help="allow no host port")
    _turn_timeout(upd, "its turns' time limit (0: HANGAR_TURN_TIMEOUT_MINUTES)")
    image = upd.add_mutually_exclusive_group()
    image.add_argument("--image", help=IMAGE_HELP)
    image.add_argument("--no-image", action="store_true", help="run no image (the sandbox "
                       "backend's own system)")  # fmt: skip
    _warm_pool(upd, update=True)
    _rules(upd)
    _json(upd)
    delete_env = env_cmd.add_parser("delete", help="delete an environment no session uses")
    delete_env.add_argument("name")
    delete_env.add_argument("--force", action="store_true", help="even if sessions use it "
                            "(they cannot start a sandbox again)")  # fmt: skip

    ses = top.add_parser("session", help="sessions: streams of work you can come back to")
    cmd = ses.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = cmd.add_parser("new", help="create a session and start its first turn")
    new.add_argument("name")
    _message(new)
    new.add_argument("--env", required=True)
    new.add_argument("--harness", default="claude", choices=HARNESSES, help="default claude")
    new.add_argument("--model")
    new.add_argument("--title")
    new.add_argument("--idle", type=float, metavar="MIN",
                     help="suspend after MIN minutes unused (0: never; default 30)")  # fmt: skip
    _schema(new)
    _context(new)
    _turn_timeout(new, TURN_TIMEOUT_HELP)
    _permissions(new, "auto")
    _wait(new)
    _json(new)
    listing = cmd.add_parser("list", help="list sessions, newest first (by creation, or "
                             "with --order activity by last activity)")
    listing.add_argument("--limit", type=_count(1, 500), default=50, metavar="N",
                         help="at most N (1-500, default 50)")  # fmt: skip
    listing.add_argument("--all", action="store_true", help="every session, page by page")
    listing.add_argument("--state", choices=STATES, help="only sessions in this state")
    listing.add_argument("--prefix", help="only sessions whose name starts with PREFIX "
                         "(case-sensitive)")  # fmt: skip
    listing.add_argument("--order", choices=("created", "activity"), default="created",
                         help="newest first by creation (the default) or by last activity")
    _json(listing)
    get = cmd.add_parser("get", help="show a session with its turns and checkpoints")
    get.add_argument("name")
    _json(get)
    send = cmd.add_parser("send", help="start the next turn (resuming a suspended session)")
    send.add_argument("name")
    _message(send)
    _switch(send)
    _schema(send, "; default: the session's")
    _context(send)
    _turn_timeout(send, TURN_TIMEOUT_HELP)
    _permissions(send, None)
    send.add_argument("--if-idle", action="store_true", help="start a turn only if none is "
                      "running (else session_busy); without it a plain message to a running "
                      "live turn steers it")  # fmt: skip
    _wait(send)
    _json(send)
    steer = cmd.add_parser("steer", help="tell the running turn's agent something, in the "
                           "same turn (with no turn running, it starts the next one)")  # fmt: skip
    steer.add_argument("name")
    _message(steer)
    steer.add_argument("--expected-turn", type=int, metavar="N", help="refuse (turn_ended) "
                       "when turn N is over instead of starting the next turn")  # fmt: skip
    _json(steer)
    tree = cmd.add_parser("tree", help="show one step of a turn: its tool, its git tree and "
                          "its patch against the turn's start")  # fmt: skip
    tree.add_argument("name")
    tree.add_argument("turn", type=int)
    tree.add_argument("step", type=int, help="0-based, as session get lists a turn's steps")
    _json(tree)
    for verb, what in (("approve", "allow what the running turn waits to do (it runs once)"),
                       ("deny", "deny what the running turn waits to do")):  # fmt: skip
        decide = cmd.add_parser(verb, help=what)
        decide.add_argument("name")
        decide.add_argument("approval", help="its id, from session get's pending approvals")
        if verb == "deny":
            decide.add_argument("--message", "-m", default="", help="why, for the agent")
        _json(decide)
    open_ = cmd.add_parser("open", help="resume the session into a sandbox")
    open_.add_argument("name")
    _switch(open_)
    _json(open_)
    for name, help_ in (
        ("suspend", "checkpoint and release the sandbox"),
        ("archive", "drop the sandbox and checkpoints, keep the record"),
    ):
        p = cmd.add_parser(name, help=help_)
        p.add_argument("name")
        _json(p)
    keep = cmd.add_parser("keep", help="set the idle timeout")
    keep.add_argument("name")
    keep.add_argument("--idle", type=float, required=True, metavar="MIN", help="0: never")
    _json(keep)
    delete = cmd.add_parser("delete", help="delete the session and all it stored")
    delete.add_argument("name")
    delete.add_argument("--force", action="store_true", help="even while a turn runs (its "
                        "work is lost)")  # fmt: skip
    delete.add_argument("--yes", action="store_true", help="do not ask (on a terminal, delete "
                        "asks first)")  # fmt: skip
    fork = cmd.add_parser("fork", help="restore the session into N new sessions")
    fork.add_argument("name")
    fork.add_argument("n", type=int, metavar="N")
    _json(fork)
    patch = cmd.add_parser("patch", help="print the patch: base to working tree, untracked "
                           "files included")  # fmt: skip
    patch.add_argument("name")
    pull = cmd.add_parser("pull", help="fetch the session's commits into local branch "
                          "hangar/NAME, even if never pushed (run in your checkout)")  # fmt: skip
    pull.add_argument("name")
    pull.add_argument("--checkout", action="store_true", help="switch to hangar/NAME and apply "
                      "the session's uncommitted changes (never over your untracked files)")
    pull.add_argument("--force", action="store_true", help="move hangar/NAME even if it has "
                      "commits of its own")  # fmt: skip
    arts = cmd.add_parser("artifacts", help="list the files the session's turns handed back, "
                          "or download one")  # fmt: skip
    arts.add_argument("name")
    arts.add_argument("--turn", type=_count(1, 1_000_000, "a turn number"),
                      help="only this turn's (with --get: the turn to take it from; default "
                      "the latest that has it)")  # fmt: skip
    arts.add_argument("--get", metavar="PATH", help="download this artifact")
    arts.add_argument("-o", "--output", metavar="FILE", help="with --get: write here (default: "
                      "its name in this folder; - for stdout)")  # fmt: skip
    _json(arts)
    shell = cmd.add_parser("shell", usage="hangar session shell NAME [--agent | -- CMD...]",
                           help="run CMD in the session's repo folder, or open a terminal there")
    shell.add_argument("--agent", action="store_true", help="the terminal runs the session's "
                       "agent, resuming its conversation, instead of a shell")  # fmt: skip
    shell.add_argument("name")
    shell.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD")
    log = cmd.add_parser("log", help="a turn's run log, one line per event (default: the "
                         "latest turn)")  # fmt: skip
    log.add_argument("name")
    log.add_argument("turn", nargs="?", type=_count(1, 1_000_000, "a turn number"))
    log.add_argument("--raw", action="store_true", help="the harness's JSON lines as they are "
                     "(to a terminal, control characters shown escaped)")  # fmt: skip
    log.add_argument("--turn", type=_count(1, 1_000_000, "a turn number"), dest="turn_option",
                     metavar="N", help="the turn (as TURN)")  # fmt: skip
    log.add_argument("--format", choices=("lines", "raw", "events"), help="lines (the "
                     "default), raw (as --raw) or events: the transcript, one JSON event a line "
                     "(message, tool_call, tool_result, usage, notice, outcome), the same for "
                     "every harness")  # fmt: skip
    wait = cmd.add_parser("wait", help="follow the latest turn (again) until it ends, then "
                          "print its summary")  # fmt: skip
    wait.add_argument("name")
    wait.add_argument("--timeout", type=float, metavar="S", help="give up after S seconds "
                      "(exit status 124; the turn goes on)")  # fmt: skip
    _json(wait)
    stop = cmd.add_parser("interrupt", help="stop the running turn (it ends interrupted, its "
                          "work checkpointed)")  # fmt: skip
    stop.add_argument("name")
    _json(stop)

    sbx = top.add_parser("sandbox", help="sandboxes")
    sbx_cmd = sbx.add_subparsers(dest="action", required=True, metavar="ACTION")
    _json(sbx_cmd.add_parser("list", help="list live sandboxes"))
    destroy = sbx_cmd.add_parser("destroy", help="destroy a sandbox (its session is "
                                 "checkpointed and suspended first)")  # fmt: skip
    destroy.add_argument("id")
    destroy.add_argument("--force", action="store_true", help="even if the checkpoint fails: "
                         "the work since the last good checkpoint is lost")  # fmt: skip

    top.add_parser("admin-token", help="make sure DATA_DIR/admin-token holds an admin token "
                   "the configured database knows (how a cloud deployment gets its first "
                   "token); never prints it")  # fmt: skip
    top.add_parser("migrate", help="bring the configured database's records up to this "
                   "version, directly (serve does it at start; run it after deploying)")  # fmt: skip
    top.add_parser("doctor", help="check the configuration, every backend, the deployed "
                   "functions and the server")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (never raises SystemExit)."""
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        return _fail(str(exc), "usage", 2)
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    from hangar.cli.client import ApiError
    from hangar.cli.commands import run
    from hangar.cli.follow import Detached
    from hangar.errors import HangarError

    try:
        return run(args, dict(os.environ))
    except UsageError as exc:
        return _fail(str(exc), "usage", 2)
    except ApiError as exc:
        return _fail(exc.message, exc.code, 1)
    except HangarError as exc:
        return _fail(exc.message, exc.code, 1)
    except Detached as exc:
        return _fail(exc.message, "detached", 130)
    except KeyboardInterrupt:
        return _fail("interrupted", "interrupted", 130)
    except BrokenPipeError:
        # The reader left (hangar ... | head): nothing more to say, and no complaint at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _fail(message: str, code: str, status: int) -> int:
    from hangar.inert import inert  # messages quote the agent's text: shown, never obeyed

    text = " ".join(message.split())  # one line, whatever the message held
    print(inert(f"hangar: {text} ({code})"), file=sys.stderr, flush=True)
    return status
