"""Human output for the CLI: short tables and one-line event descriptions."""

from __future__ import annotations

import json
from typing import Any


def _ago(ts: str | None) -> str:
    return (ts or "")[:19].replace("T", " ")


def _line(text: str | None, width: int = 60) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 3] + "..."


def print_sessions(sessions: list[dict[str, Any]]) -> None:
    if not sessions:
        print("no sessions")
        return
    print(f"{'NAME':24} {'STATE':10} {'HARNESS':11} {'LAST ACTIVE':19}  SUMMARY")
    for s in sessions:
        print(f"{s['name'][:24]:24} {s['state']:10} {s['harness']:11} "
              f"{_ago(s['last_active_at']):19}  {_line(s.get('summary'))}")  # fmt: skip


def print_session(s: dict[str, Any]) -> None:
    print(f"{s['name']} ({s['id']}): {s['state']}")
    print(f"  title:    {s['title']}")
    print(f"  harness:  {s['harness']}{' / ' + s['model'] if s.get('model') else ''}")
    print(f"  repo:     {s['repo']} on {s['branch']}")
    print(f"  sandbox:  {s['sandbox_id'] or '(none)'}   idle after: {s['idle_minutes']:g} min")
    if s.get("resume_hint"):
        print(f"  resume:   {s['resume_hint']}")
    if s.get("error"):
        print(f"  error:    {s['error']}")
    for t in s.get("turns") or []:
        print(f"  turn {t['n']}: {t['outcome'] or 'running'}: {_line(t['message'], 40)}")
        if t.get("summary"):
            print(f"    -> {_line(t['summary'], 70)}")
    for c in s.get("checkpoints") or []:
        warn = f" ({len(c['warnings'])} warnings)" if c["warnings"] else ""
        print(f"  checkpoint {c['id']} {_ago(c['ts'])} {c['reason']}{warn}")


def print_envs(envs: list[dict[str, Any]]) -> None:
    if not envs:
        print("no environments")
    for e in envs:
        extra = [f"vars: {', '.join(e['vars'])}"] if e["vars"] else []
        extra += [f"secrets: {', '.join(e['secrets'])}"] if e["secrets"] else []
        print(f"{e['name']}: {e['repo']}{' @ ' + e['branch'] if e['branch'] else ''}"
              f"{'  (' + '; '.join(extra) + ')' if extra else ''}")  # fmt: skip


def print_sandboxes(boxes: list[dict[str, Any]]) -> None:
    if not boxes:
        print("no sandboxes")
    for b in boxes:
        print(f"{b['id']}  {_ago(b['created_at'])}  {b['labels'].get('hangar.session', '')}")


def describe_event(line: bytes) -> str | None:
    """A one-line description of a harness's JSON event (tool calls, assistant text), or None
    for events not worth showing."""
    try:
        event = json.loads(line)
    except ValueError:
        text = line.decode(errors="replace").strip()
        return _line(text, 100) if text else None
    if not isinstance(event, dict):
        return None
    kind = event.get("type")
    if kind == "assistant":  # Claude Code
        for block in event.get("message", {}).get("content") or []:
            if block.get("type") == "tool_use":
                return f"tool {block.get('name')}: {_line(json.dumps(block.get('input')), 80)}"
            if block.get("type") == "text" and block.get("text"):
                return _line(block["text"], 100)
    if kind == "item.completed":  # Codex
        item = event.get("item") or {}
        if item.get("type") == "command_execution":
            return f"ran: {_line(item.get('command'), 80)}"
        if item.get("type") == "agent_message":
            return _line(item.get("text"), 100)
    if kind == "tool_execution_start":  # pi
        return f"tool {event.get('toolName')}: {_line(json.dumps(event.get('args')), 80)}"
    if kind == "message" and event.get("role") == "assistant":  # Antigravity
        return _line(str(event.get("content")), 100)
    return None
