"""What each ``hangar`` command does, over the REST client."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from hangar.cli.client import ApiError, Client
from hangar.cli.render import describe_event, print_envs, print_sandboxes, print_session
from hangar.cli.render import print_sessions
from hangar.config import Settings
from hangar.errors import InvalidInput

WAIT_SLICE = 10.0


def _pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(f"{flag} takes KEY=VALUE, not {item!r}")
        out[key] = value
    return out


def client(settings: Settings) -> Client:
    token = settings.token or os.environ.get("HANGAR_TOKEN")
    if not token:
        path = settings.data_dir / "admin-token"
        try:
            token = path.read_text().strip()
        except OSError:
            token = None
    return Client(settings.url, token)


def _out(data: Any) -> None:
    print(json.dumps(data, indent=2))


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "serve":
        from hangar.api.server import serve

        return serve(settings, args.host, args.port)
    if args.command == "doctor":
        from hangar.cli.doctor import doctor

        return doctor(settings, client(settings))
    api = client(settings)
    handlers: dict[str, Callable[[Client, argparse.Namespace], int]] = {
        "env": _env,
        "session": _session,
        "sandbox": _sandbox,
    }
    return handlers[args.command](api, args)


def _env(api: Client, args: argparse.Namespace) -> int:
    if args.action == "add":
        body = {"name": args.name, "repo": args.repo, "branch": args.branch, "setup": args.setup,
                "vars": _pairs(args.var, "--var"), "secrets": _pairs(args.secret, "--secret")}  # fmt: skip
        env = api.call("POST", "/api/envs", body)
        print(f"added environment {env['name']} ({env['repo']})")
    elif args.action == "list":
        envs = api.call("GET", "/api/envs")
        _out(envs) if args.json else print_envs(envs)
    else:
        api.call("DELETE", f"/api/envs/{args.name}")
        print(f"deleted environment {args.name}")
    return 0


def _session(api: Client, args: argparse.Namespace) -> int:
    a = args.action
    base = f"/api/sessions/{getattr(args, 'name', '')}"
    if a == "new":
        body = {"name": args.name, "message": args.message, "env": args.env,
                "harness": args.harness, "model": args.model, "title": args.title,
                "idle_minutes": args.idle}  # fmt: skip
        session = api.call("POST", "/api/sessions", body)
        print(f"session {session['name']} started turn 1 ({session['harness']}, {session['id']})",
              file=sys.stderr)  # fmt: skip
        return _wait(api, session["name"], 1) if args.wait else 0
    if a == "send":
        turn = api.call("POST", base + "/send", {"message": args.message})
        print(f"session {args.name} started turn {turn['n']}", file=sys.stderr)
        return _wait(api, args.name, turn["n"]) if args.wait else 0
    if a == "list":
        sessions = api.call("GET", "/api/sessions")
        if args.json:
            _out([{k: v for k, v in s.items() if k not in ("turns", "checkpoints")}
                  for s in sessions])  # fmt: skip
        else:
            print_sessions(sessions)
        return 0
    if a in ("get", "open", "suspend", "archive"):
        method, path = ("GET", base) if a == "get" else ("POST", f"{base}/{a}")
        session = api.call(method, path)
        _out(session) if args.json else print_session(session)
        return 0
    if a == "keep":
        api.call("POST", base + "/keep", {"idle_minutes": args.idle})
        print(f"session {args.name}: idle after {args.idle:g} minutes" if args.idle else
              f"session {args.name}: never suspended for idleness")  # fmt: skip
        return 0
    if a == "delete":
        api.call("DELETE", base)
        print(f"deleted session {args.name}")
        return 0
    if a == "fork":
        forks = api.call("POST", base + "/fork", {"n": args.n})
        _out(forks) if args.json else [print(f["name"]) for f in forks]
        return 0
    if a == "patch":
        sys.stdout.buffer.write(api.call("GET", base + "/patch"))
        return 0
    if a == "log":
        params = {"turn": args.turn} if args.turn else None
        sys.stdout.buffer.write(api.call("GET", base + "/log", params=params))
        return 0
    if a == "shell":
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if argv:
            return _exec(api, args.name, argv)
        from hangar.cli.terminal import terminal

        return terminal(api, args.name)
    raise InvalidInput(f"unknown action {a}")


def _sandbox(api: Client, args: argparse.Namespace) -> int:
    if args.action == "list":
        boxes = api.call("GET", "/api/sandboxes")
        _out(boxes) if args.json else print_sandboxes(boxes)
    else:
        api.call("DELETE", f"/api/sandboxes/{args.id}")
        print(f"destroyed sandbox {args.id}")
    return 0


def _exec(api: Client, name: str, argv: list[str]) -> int:
    import base64

    stdin = None if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    for frame in api.stream_exec(name, argv, stdin):
        if "stdout" in frame:
            sys.stdout.buffer.write(base64.b64decode(frame["stdout"]))
            sys.stdout.buffer.flush()
        elif "stderr" in frame:
            sys.stderr.buffer.write(base64.b64decode(frame["stderr"]))
            sys.stderr.buffer.flush()
        elif "exit" in frame:
            return int(frame["exit"])
        elif "error" in frame:
            raise ApiError(frame["error"]["code"], frame["error"]["message"])
    raise ApiError("internal", "the command's output ended without an exit status")


def _wait(api: Client, name: str, n: int) -> int:
    """Print the turn's progress until it ends, then its summary; 1 if it failed."""
    shown = 0
    while True:
        turn = api.call("POST", f"/api/sessions/{name}/wait", {"turn": n, "timeout": WAIT_SLICE})
        log = api.call("GET", f"/api/sessions/{name}/log", params={"turn": n})
        for line in log[shown:].splitlines(keepends=True):
            if not line.endswith(b"\n") and not turn["finished_at"]:
                break  # an unfinished line: show it whole next time
            shown += len(line)
            text = describe_event(line)
            if text:
                print(f"  {text}", file=sys.stderr, flush=True)
        if turn["finished_at"]:
            break
        time.sleep(0.2)
    if turn["outcome"] == "exited":
        print(turn["summary"] or "(no summary)")
        return 0
    code = turn.get("error_code") or turn["outcome"]
    print(f"hangar: turn {n} {turn['outcome']}: {turn['summary'] or ''} ({code})",
          file=sys.stderr)  # fmt: skip
    return 1
