"""What each ``hangar`` command does, over the REST client. Results go to stdout; progress
(``-w``) goes to stderr, so ``--json`` output stays clean.

A command imports what it uses when it runs: the commands that call the server need neither
the settings' model nor anything of the server (``session list`` is mostly start-up time)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import stat
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from typing import TYPE_CHECKING

from hangar.cli import UsageError
from hangar.cli.client import ApiError, Client, from_env, session_path
from hangar.cli.follow import ensure_running, follow_start, wait_turn
from hangar.cli.render import describe_event, print_env, print_envs, print_json
from hangar.cli.render import print_sandboxes, print_session, print_sessions, say, show_bytes

if TYPE_CHECKING:
    from hangar.config import Settings

INTERRUPT_WAIT = 120.0
"""Seconds ``session interrupt`` waits for the turn to end and its checkpoint to be taken."""


def run(args: argparse.Namespace, env: dict[str, str]) -> int:
    if args.command == "serve":
        from hangar.config import Settings
        from hangar.server.serve import serve

        if args.data_dir:
            env = {**env, "HANGAR_DATA_DIR": args.data_dir}
        return serve(Settings.from_env(env), args.host, args.port)
    if args.command in ("admin-token", "migrate"):
        from hangar.config import Settings

        settings = Settings.from_env(env)
        return _admin_token(settings) if args.command == "admin-token" else _migrate(settings)
    if args.command == "doctor":
        from hangar.cli.doctor import doctor

        return doctor(env)
    api = from_env(env)
    handlers: dict[str, Callable[[Client, argparse.Namespace], int]] = {
        "env": _env,
        "session": _session,
        "sandbox": _sandbox,
    }
    return handlers[args.command](api, args)


def _admin_token(settings: Settings) -> int:
    """Register the admin token of ``DATA_DIR/admin-token`` (made if missing, mode 0600) in the
    database the settings name, directly (no server needed). Idempotent."""
    from hangar.operations.auth import TOKEN_FILE, ensure_admin_token
    from hangar.db import open_db

    db = open_db(settings.db, settings)
    try:
        path = settings.data_dir / TOKEN_FILE
        made = ensure_admin_token(db, path)
    finally:
        db.close()
    state = "made a new admin token" if made else "the admin token is registered"
    print(f"{state}; it is in {path} (mode 0600); point HANGAR_URL at the server and the "
          "CLI uses it")  # fmt: skip
    return 0


def _migrate(settings: Settings) -> int:
    """Bring the records in the configured database up to this version, directly."""
    from hangar.db import open_db
    from hangar.db.migrations import migrate

    db = open_db(settings.db, settings)
    try:
        changed = migrate(db)
    finally:
        db.close()
    print(f"migrated {changed} session record(s)" if changed else "every record is up to date")
    return 0


def _pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} takes KEY=VALUE, not {item!r}")
        out[key] = value
    return out


def _env(api: Client, args: argparse.Namespace) -> int:
    if args.action == "add":
        body = {"name": args.name, "repo": args.repo, "branch": args.branch,
                "setup": args.setup, "vars": _pairs(args.var, "--var"),
                "secrets": _pairs(args.secret, "--secret"), "host_ports": args.host_port,
                "turn_timeout_minutes": args.turn_timeout, "image": args.image,
                "warm_pool": args.warm_pool or 0,
                "warm_pool_hours": args.warm_pool_hours,
                "allowed_hosts": args.allowed_host or [],
                "deny_rules": _pairs(args.deny_rule, "--deny-rule"),
                "notify_url": args.notify_url or None}  # fmt: skip
        env = api.call("POST", "/api/envs", body)
        if args.json:
            print_json(env)
        else:
            say(f"added environment {env['name']} ({env['repo']})")
        for warning in env.get("warnings") or []:
            say(f"hangar: warning: {warning}", err=True)
    elif args.action == "list":
        envs = api.call("GET", "/api/envs")
        print_json(envs) if args.json else print_envs(envs)
    elif args.action in ("get", "update"):
        path = f"/api/envs/{quote(args.name, safe='')}"
        env = api.call("GET", path) if args.action == "get" else api.call("PATCH", path,
                                                                          _env_change(args))
        print_json(env) if args.json else print_env(env)
        for warning in env.get("warnings") or []:
            say(f"hangar: warning: {warning}", err=True)
    else:
        force = "?force=true" if args.force else ""
        api.call("DELETE", f"/api/envs/{quote(args.name, safe='')}{force}")
        print(f"deleted environment {args.name}")
    return 0


def _env_change(args: argparse.Namespace) -> dict[str, Any]:
    """The PATCH body for ``env update``: only what was given."""
    body: dict[str, Any] = {}
    if args.branch is not None:
        body["branch"] = args.branch or None
    if args.setup is not None:
        body["setup"] = args.setup or None
    if args.var:
        body["vars"] = _pairs(args.var, "--var")
    if args.secret:
        body["secrets"] = _pairs(args.secret, "--secret")
    if args.unset:
        body["unset"] = args.unset
    if args.host_port or args.no_host_ports:
        body["host_ports"] = args.host_port or []
    if args.turn_timeout is not None:
        body["turn_timeout_minutes"] = args.turn_timeout or None
    if args.image is not None or args.no_image:
        body["image"] = args.image
    if args.warm_pool is not None:
        body["warm_pool"] = args.warm_pool
    if args.warm_pool_hours is not None or args.no_warm_pool_hours:
        body["warm_pool_hours"] = args.warm_pool_hours or None
    if args.allowed_host is not None:
        body["allowed_hosts"] = args.allowed_host
    if args.deny_rule is not None:
        body["deny_rules"] = _pairs(args.deny_rule, "--deny-rule")
    if args.notify_url is not None:
        body["notify_url"] = args.notify_url or None
    if not body:
        raise UsageError("env update: nothing to change (give --branch, --setup, --var, "
                         "--secret, --unset, --host-port, --turn-timeout, --image, "
                         "--warm-pool or --warm-pool-hours)")  # fmt: skip
    return body


def _session(api: Client, args: argparse.Namespace) -> int:
    a = args.action
    path = session_path(getattr(args, "name", ""))
    if a in ("new", "send", "pull"):
        from hangar.cli.exchange import context_items, pull
    if a == "new":
        body = {"name": args.name, "message": _message(args), "env": args.env,
                "harness": args.harness, "model": args.model, "title": args.title,
                "idle_minutes": args.idle, "output_schema": _schema(args.schema),
                "context": context_items(api, args),
                "turn_timeout_minutes": args.turn_timeout,
                "permission_mode": args.permission_mode}  # fmt: skip
        started = api.call("POST", "/api/sessions", body)
        return _started(api, args, args.name, started)
    if a == "send":
        body = {"message": _message(args), "harness": args.harness, "model": args.model,
                "output_schema": _schema(args.schema), "context": context_items(api, args),
                "turn_timeout_minutes": args.turn_timeout, "if_idle": args.if_idle,
                "permission_mode": args.permission_mode}  # fmt: skip
        started = api.call("POST", f"{path}/send", body)
        return _started(api, args, args.name, started)
    if a == "tree":
        shown = api.call("GET", f"{path}/turns/{args.turn}/trees/{args.step}")
        if args.json:
            print_json(shown)
            return 0
        say(f"step {shown['step']} of turn {args.turn} ({shown['tool'] or '?'}): tree "
            f"{shown['tree'] or shown['skipped']}" + (" (patch cut)" if shown["cut"] else ""))
        patch = shown["patch"]
        show_bytes(patch.encode() if shown["encoding"] == "utf-8" else base64.b64decode(patch))
        return 0
    if a in ("approve", "deny"):
        body = {"decision": a, "message": getattr(args, "message", "")}
        decided = api.call("POST", f"{path}/approvals/{quote(args.approval, safe='')}", body)
        if args.json:
            print_json(decided)
        else:
            done = "approved" if a == "approve" else "denied"
            say(f"{done} {args.approval} (turn {decided['turn']} of {args.name})")
        return 0
    if a == "steer":
        body = {"message": _message(args), "expected_turn": args.expected_turn}
        return _started(api, args, args.name, api.call("POST", f"{path}/steer", body))
    if a == "list":
        return _list_sessions(api, args)
    if a in ("get", "open"):
        switch = {"harness": args.harness, "model": args.model} if a == "open" else {}
        session = api.call("GET", path) if a == "get" else api.call("POST", f"{path}/open",
                                                                    switch)
        if a == "open" and session["state"] == "starting":
            session = follow_start(api, args.name)
        print_json(session) if args.json else print_session(session)
        return 0
    if a in ("suspend", "archive"):
        session = api.call("POST", f"{path}/{a}")
        if args.json:
            print_json(session)
        else:
            say(f"session {session['name']} is {session['state']}")
        return 0
    if a == "keep":
        session = api.call("POST", f"{path}/keep", {"idle_minutes": args.idle})
        if args.json:
            print_json(session)
        elif args.idle:
            print(f"session {args.name} suspends after {args.idle:g} minutes unused")
        else:
            print(f"session {args.name} never suspends for idleness")
        return 0
    if a == "delete":
        if not args.yes and not confirmed(f"delete session {args.name} and everything it "
                                          "stored?"):  # fmt: skip
            say("nothing deleted", err=True)
            return 1
        api.call("DELETE", path + ("?force=true" if args.force else ""))
        print(f"deleted session {args.name}")
        return 0
    if a == "fork":
        asked = api.call("POST", f"{path}/fork", {"n": args.n})
        forks = [follow_start(api, f["name"]) for f in asked]  # each restores in its sandbox
        print_json(forks) if args.json else say("\n".join(f["name"] for f in forks), lines=True)
        return 0
    if a == "patch":
        show_bytes(api.call("GET", f"{path}/patch"))
        return 0
    if a == "pull":
        return pull(api, args)
    if a == "log":
        turn = args.turn_option or args.turn
        if args.format == "events":
            return _transcript(api, path, turn)
        data = api.call("GET", f"{path}/log", params={"turn": turn} if turn else None)
        if args.raw or args.format == "raw":
            show_bytes(data)
            return 0
        for line in data.splitlines():
            text = describe_event(line)
            if text:
                say(text)
        return 0
    if a == "artifacts":
        return _artifacts(api, args)
    if a == "wait":
        return _wait_latest(api, args)
    if a == "interrupt":
        return _interrupt(api, args)
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv  # a == "shell"
    agent = args.agent or argv == ["--agent"]  # after NAME it lands among CMD's words
    if agent and argv not in ([], ["--agent"]):
        raise UsageError("session shell: --agent opens the agent's terminal; it takes no CMD")
    ensure_running(api, args.name)
    if argv and not agent:
        return _exec(api, args.name, argv)
    from hangar.cli.terminal import terminal

    return terminal(api, args.name, mode="agent" if agent else "shell")


def _transcript(api: Client, path: str, turn: int | None) -> int:
    """The turn's transcript as it is now, one JSON event a line, page after page."""
    params: dict[str, Any] = {"format": "events", "limit": 1000}
    if turn:
        params["turn"] = turn
    while True:
        page = api.call("GET", f"{path}/log", params=params)
        for event in page["events"]:
            say(json.dumps(event, ensure_ascii=True))
        if not page["more"]:
            return 0
        params["cursor"] = page["next_cursor"]


def confirmed(question: str) -> bool:
    """Whether the person at the terminal says yes to ``question``; True when nobody is there
    to ask (standard input is not a terminal: a script already chose)."""
    if not sys.stdin.isatty():
        return True
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _message(args: argparse.Namespace) -> str:
    """The message: the argument, standard input for ``-``, or ``--message-file``'s contents,
    as they are (the server checks its size); UsageError when none or two are given, or the
    file cannot be read as UTF-8."""
    if args.message_file is not None:
        if args.message is not None:
            raise UsageError("give the message or --message-file, not both")
        try:
            with open(args.message_file, encoding="utf-8", newline="") as f:
                return f.read()
        except OSError as exc:
            raise UsageError(f"--message-file: cannot read {args.message_file}: "
                             f"{exc.strerror}") from None  # fmt: skip
        except UnicodeDecodeError:
            raise UsageError(f"--message-file: {args.message_file} is not UTF-8 text") from None
    if args.message == "-":
        try:
            return sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError("the message on standard input is not UTF-8 text") from None
    if args.message is None:
        raise UsageError("a message is needed: the text, - for standard input, or "
                         "--message-file PATH")  # fmt: skip
    return str(args.message)


def _schema(path: str | None) -> Any:
    """The JSON Schema in file ``path`` (None: none given); UsageError when it cannot be read
    or is not JSON (the server checks it is a schema)."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise UsageError(f"--schema: cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"--schema: {path} is not JSON: {exc}") from None


def _artifacts(api: Client, args: argparse.Namespace) -> int:
    """List the session's artifacts, or download one (``--get``)."""
    path = session_path(args.name, "artifacts")
    params = {"turn": args.turn} if args.turn and not args.get else None
    listed = api.call("GET", path, params=params)
    if not args.get:
        if args.json:
            print_json(listed)
        elif not listed:
            say(f"session {args.name} has no artifacts")
        for a in [] if args.json else listed:
            say(f"turn {a['turn']}  {a['path']}  {a['size']} bytes")
        return 0
    versions = [a for a in listed if a["path"] == args.get and args.turn in (None, a["turn"])]
    if not versions:
        raise ApiError("artifact_not_found", f"session {args.name} has no artifact "
                       f"{args.get!r}" + (f" from turn {args.turn}" if args.turn else ""))  # fmt: skip
    newest = versions[-1]
    data = api.call("GET", f"{path}/{newest['turn']}/{quote(newest['path'])}")
    target = args.output or newest["path"].rsplit("/", 1)[-1]
    if target == "-":
        show_bytes(data)
        return 0
    if os.path.exists(target) and not args.output:
        raise UsageError(f"{target} exists here; choose where with -o FILE")
    with open(target, "wb") as f:
        f.write(data)
    say(f"wrote {target} ({len(data)} bytes, turn {newest['turn']})", err=True)
    return 0


def _wait_latest(api: Client, args: argparse.Namespace) -> int:
    """Follow the session's latest turn (its start first, if it is starting) to its end."""
    session = api.call("GET", session_path(args.name))
    if session["state"] == "starting":
        session = follow_start(api, args.name)
    if not session.get("turns"):
        session = api.call("GET", session_path(args.name))
    turns = session.get("turns") or []
    if not turns:
        raise ApiError("not_found", f"session {args.name} has no turns to wait for")
    return wait_turn(api, args.name, turns[-1]["n"], as_json=args.json, timeout=args.timeout)


def _interrupt(api: Client, args: argparse.Namespace) -> int:
    """Stop the running turn, then wait for its end (and its checkpoint)."""
    asked = api.call("POST", session_path(args.name, "interrupt"))
    n = asked["turn"]
    deadline = time.monotonic() + INTERRUPT_WAIT
    while True:
        turn = api.call("POST", session_path(args.name, "wait"), {"turn": n, "timeout": 10})
        if turn["finished_at"] or time.monotonic() > deadline:
            break
    if args.json:
        print_json(turn)
    elif turn["finished_at"]:
        say(f"turn {n} of {args.name} {turn['outcome']}; its work is checkpointed")
    else:
        print(f"turn {n} of {args.name} was asked to stop and is still ending")
    return 0


def _list_sessions(api: Client, args: argparse.Namespace) -> int:
    """One page (``--limit``), or every page (``--all``), newest first in ``--order``; only
    ``--state`` and names starting with ``--prefix`` when given (the server filters, every
    page alike)."""
    sessions: list[dict[str, Any]] = []
    cursor: str | None = None
    filters = {k: v for k, v in (("state", args.state), ("prefix", args.prefix),
                                 ("order", args.order)) if v}  # fmt: skip
    while True:
        limit = 500 if args.all else args.limit
        page = api.call("GET", "/api/sessions",
                        params={**filters, "limit": limit, "cursor": cursor or ""})  # fmt: skip
        sessions += page["sessions"]
        cursor = page["next_cursor"]
        if not (args.all and cursor):
            break
    if args.json:
        print_json({"sessions": sessions, "next_cursor": cursor})
        return 0
    print_sessions(sessions)
    if cursor:
        print(f"(the newest {len(sessions)}; --limit N for more, --all for every one)",
              file=sys.stderr)  # fmt: skip
    return 0


def _sandbox(api: Client, args: argparse.Namespace) -> int:
    if args.action == "list":
        boxes = api.call("GET", "/api/sandboxes")
        print_json(boxes) if args.json else print_sandboxes(boxes)
    else:
        force = "?force=true" if args.force else ""
        api.call("DELETE", f"/api/sandboxes/{quote(args.id, safe='')}{force}")
        print(f"destroyed sandbox {args.id}")
    return 0


def _write(data: bytes) -> None:
    """Raw bytes on stdout: ``session shell -- CMD`` is the sandbox's own output, by design."""
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _started(api: Client, args: argparse.Namespace, name: str, started: Any) -> int:
    n = started["turn"]
    if started.get("delivered") == "steer" and not args.json and not getattr(args, "wait", 0):
        print(f"session {name}: steered turn {n}, which goes on "
              f"(hangar session wait {name} to follow it)")  # fmt: skip
        return 0
    if getattr(args, "wait", False):
        if started["session"]["state"] == "starting":
            follow_start(api, name)
        return wait_turn(api, name, n, as_json=args.json)
    if args.json:
        print_json(started)
    else:
        print(f"session {name}: turn {n} asked for; it starts in the background "
              f"(hangar session wait {name} to follow it)")
    return 0


def _stdin() -> bytes | None:
    """Standard input when it is a pipe or a file (a terminal, or nothing, is no input)."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (AttributeError, OSError, ValueError):  # no stdin, or a stand-in without a file
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None
    return sys.stdin.buffer.read()


def _exec(api: Client, name: str, argv: list[str]) -> int:
    """Run ``argv`` in the session, streaming its output here; returns its exit status."""
    body: dict[str, Any] = {"argv": argv}
    stdin = _stdin()
    if stdin:
        body["stdin"] = base64.b64encode(stdin).decode()
    for frame in api.frames(session_path(name, "exec"), body):
        if "stdout" in frame:
            _write(base64.b64decode(frame["stdout"]))
        elif "stderr" in frame:
            sys.stderr.buffer.write(base64.b64decode(frame["stderr"]))
            sys.stderr.buffer.flush()
        elif "exit" in frame:
            return int(frame["exit"])
        elif "error" in frame:
            raise ApiError(str(frame["error"]["code"]), str(frame["error"]["message"]))
    raise ApiError("internal", "the command's output ended without an exit status")
