"""Human output for the CLI: short tables, and one line per notable event of a run log."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any


def ago(ts: str | None, now: datetime | None = None) -> str:
    """``ts`` (ISO 8601) as "just now", "5 min ago", "3 h ago" or "2 d ago"."""
    if not ts:
        return "-"
    try:
        then = datetime.fromisoformat(ts)
    except ValueError:
        return ts
    seconds = ((now or datetime.now(UTC)) - then).total_seconds()
    if seconds < 60:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return ts


def one_line(text: str | None, width: int = 60) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 3] + "..."


def table(headers: list[str], rows: list[list[str]]) -> None:
    """Columns as wide as their widest cell (the last one as it is)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers[:-1])]
    for row in [headers, *rows]:
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]).rstrip())


def print_sessions(sessions: list[dict[str, Any]]) -> None:
    if not sessions:
        print("no sessions")
        return
    table(["NAME", "STATE", "HARNESS", "TURNS", "LAST ACTIVE", "SUMMARY"], [
        [s["name"], s["state"], s["harness"], str(s.get("turn_count") or 0),
         ago(s["last_active_at"]), one_line(s.get("summary"))]
        for s in sessions
    ])  # fmt: skip


PHASES = {
    "creating_sandbox": "making a sandbox",
    "cloning": "cloning the repo",
    "running_setup": "running the environment's setup",
    "restoring": "restoring the newest checkpoint",
    "starting_turn": "starting the agent",
}


def describe_phase(phase: dict[str, Any]) -> str:
    """One line for a start's phase: ``making a sandbox``, ``cloning the repo (URL)``, ..."""
    text = PHASES.get(str(phase.get("step")), str(phase.get("step")))
    detail = one_line(phase.get("detail"), 70)
    return f"{text} ({detail})" if detail else text


def print_session(s: dict[str, Any]) -> None:
    print(f"{s['name']} ({s['id']}): {s['state']}, last active {ago(s['last_active_at'])}")
    print(f"  title:    {s['title']}")
    print(f"  harness:  {s['harness']}{' / ' + s['model'] if s.get('model') else ''}")
    print(f"  repo:     {s['repo']} (branch {s['branch']})")
    idle = f"{s['idle_minutes']:g} min" if s["idle_minutes"] else "never"
    print(f"  sandbox:  {s['sandbox_id'] or '(none)'}; suspends when unused for: {idle}")
    if s.get("resume_hint"):
        print(f"  resume:   {s['resume_hint']}")
    if s.get("phase"):
        print(f"  starting: {describe_phase(s['phase'])}, since {ago(s['phase']['since'])}")
    if s.get("start_error"):
        e = s["start_error"]
        print(f"  start failed while {e['what']} ({e['step']}): {one_line(e['message'], 100)}")
    elif s.get("error"):
        print(f"  error:    {one_line(s['error'], 100)}")
    if s.get("checkpoint_error"):
        print(f"  checkpoint failing: {one_line(s['checkpoint_error'], 100)} (the sandbox is "
              "kept until a checkpoint succeeds)")
    if s.get("restored_from"):
        skipped = s.get("restore_skipped") or []
        print(f"  restored from: {s['restored_from']}"
              + (f", after {len(skipped)} newer that did not restore:" if skipped else ""))
        for k in skipped:
            print(f"    {k['checkpoint_id']}: {one_line(k['message'], 90)} ({k['code']})")
    used = sorted(s.get("conversations") or {})
    if len(used) > 1 or (used and used != [s["harness"]]):
        print(f"  conversations: {', '.join(used)} (a switch back resumes its own)")
    switched = len(used) > 1
    for t in s.get("turns") or []:
        shown = t.get("harness") if switched else None
        how = ", ".join(x for x in (shown, "handoff" if t.get("handoff") else "") if x)
        print(f"  turn {t['n']}{f' ({how})' if how else ''}: {t['outcome'] or 'running'}: "
              f"{one_line(t['message'], 60)}")
        if t.get("summary"):
            print(f"    {one_line(t['summary'], 90)}")
    for c in s.get("checkpoints") or []:
        print(f"  checkpoint {c['id']}: {c['reason']}, {ago(c['ts'])}")
        for warning in c["warnings"]:
            print(f"    warning: {one_line(warning, 200)}")


def print_envs(envs: list[dict[str, Any]]) -> None:
    if not envs:
        print("no environments")
    for e in envs:
        extra = [f"vars: {', '.join(e['vars'])}"] if e["vars"] else []
        extra += [f"secrets: {', '.join(e['secrets'])}"] if e["secrets"] else []
        ports = e.get("host_ports") or []
        extra += [f"host ports: {', '.join(str(p) for p in ports)}"] if ports else []
        branch = f" @ {e['branch']}" if e["branch"] else ""
        print(f"{e['name']}: {e['repo']}{branch}{'  (' + '; '.join(extra) + ')' if extra else ''}")


def print_env(e: dict[str, Any]) -> None:
    """One environment in full (secrets by name only)."""
    print(f"{e['name']}: {e['repo']}")
    print(f"  branch:     {e['branch'] or '(the remote HEAD)'}")
    print(f"  setup:      {one_line(e['setup'], 100) if e['setup'] else '(none)'}")
    print(f"  vars:       {', '.join(e['vars']) or '(none)'}")
    print(f"  secrets:    {', '.join(e['secrets']) or '(none)'}")
    print(f"  host ports: {', '.join(str(p) for p in e.get('host_ports') or []) or '(none)'}")


def print_sandboxes(boxes: list[dict[str, Any]]) -> None:
    if not boxes:
        print("no sandboxes")
        return
    table(["ID", "CREATED", "SESSION"],
          [[b["id"], ago(b["created_at"]), b.get("session") or "-"] for b in boxes])


def describe_event(line: bytes) -> str | None:
    """A one-line description of a run-log line: for a harness's JSON events, the tool calls,
    the assistant's text and the model API's retries and errors, ``model API ...`` (None for
    the rest); other text as it is."""
    try:
        event = json.loads(line)
    except ValueError:
        text = line.decode(errors="replace").strip()
        return one_line(text, 100) if text else None
    if not isinstance(event, dict):
        return None
    kind = event.get("type")
    retry = _retry(event)
    if retry:
        return retry
    if kind == "assistant":  # Claude Code
        for block in (event.get("message") or {}).get("content") or []:
            if block.get("type") == "tool_use":
                return f"tool {block.get('name')}: {one_line(json.dumps(block.get('input')), 80)}"
            if block.get("type") == "text" and block.get("text"):
                return one_line(block["text"], 100)
    if kind == "item.completed":  # Codex
        item = event.get("item") or {}
        if item.get("type") == "command_execution":
            return f"ran: {one_line(item.get('command'), 80)}"
        if item.get("type") == "agent_message":
            return one_line(item.get("text"), 100)
    if kind == "tool_execution_start":  # pi
        return f"tool {event.get('toolName')}: {one_line(json.dumps(event.get('args')), 80)}"
    if kind == "message_end" and (event.get("message") or {}).get("role") == "assistant":  # pi
        content = event["message"].get("content") or []
        text = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
        return one_line(text, 100) if text.strip() else None
    if kind == "message" and event.get("role") == "assistant":  # Antigravity
        return one_line(str(event.get("content")), 100)
    return None


def _retry(event: dict[str, Any]) -> str | None:
    """A model API retry or error event, said as ``model API ...`` (None for other events)."""
    kind = event.get("type")
    if kind == "system" and event.get("subtype") == "api_retry":  # Claude Code
        status = f"HTTP {event['error_status']}: " if event.get("error_status") else ""
        return (f"model API retry {event.get('attempt')}/{event.get('max_retries')} in "
                f"{_seconds(event.get('retry_delay_ms'))}: {status}{event.get('error')}")
    if kind == "auto_retry_start":  # pi
        return (f"model API retry {event.get('attempt')}/{event.get('maxAttempts')} in "
                f"{_seconds(event.get('delayMs'))}: {event.get('errorMessage')}")
    if kind == "error" and isinstance(event.get("message"), str):  # Codex
        return f"model API: {one_line(event['message'], 100)}"
    if kind == "turn.failed":  # Codex
        error = event.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        return f"model API: the turn failed: {one_line(str(message or 'no reason given'), 100)}"
    message = event.get("message")
    if kind == "message_end" and isinstance(message, dict) and message.get("errorMessage"):  # pi
        return f"model API error: {one_line(str(message['errorMessage']), 100)}"
    return None


def _seconds(ms: object) -> str:
    return f"{float(ms) / 1000:.1f} s" if isinstance(ms, int | float) else "a moment"


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))
