"""Human output for the CLI: short tables, and one line per notable event of a run log."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hangar.harnesses.events import describe_event, one_line

__all__ = [
    "ago", "describe_event", "describe_phase", "one_line", "print_env", "print_envs",
    "print_json", "print_sandboxes", "print_session", "print_sessions", "table",
]  # fmt: skip


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
        [s["name"], "needs input" if s.get("needs_input") else s["state"], s["harness"],
         str(s.get("turn_count") or 0), ago(s["last_active_at"]),
         one_line(s.get("needs_input") or s.get("summary"))]
        for s in sessions
    ])  # fmt: skip


def describe_phase(phase: dict[str, Any]) -> str:
    """One line for a start's phase (as the API shows it)."""
    from hangar.models import Phase

    try:
        return Phase.model_validate(phase).describe()
    except ValueError:
        return str(phase.get("step"))


def print_session(s: dict[str, Any]) -> None:
    print(f"{s['name']} ({s['id']}): {s['state']}, last active {ago(s['last_active_at'])}")
    print(f"  title:    {s['title']}")
    print(f"  harness:  {s['harness']}{' / ' + s['model'] if s.get('model') else ''}")
    print(f"  repo:     {s['repo']} (branch {s['branch']})")
    idle = f"{s['idle_minutes']:g} min" if s["idle_minutes"] else "never"
    print(f"  sandbox:  {s['sandbox_id'] or '(none)'}; suspends when unused for: {idle}")
    if s.get("resume_hint"):
        print(f"  resume:   {s['resume_hint']}")
    if s.get("needs_input"):
        options = s.get("question_options") or []
        print(f"  needs input: {one_line(s['needs_input'], 200)}"
              + (f" (options: {' | '.join(options)})" if options else "")
              + f"; answer with: hangar session send {s['name']} ANSWER")
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
        if t.get("result") is not None:
            print(f"    result: {one_line(json.dumps(t['result']), 90)}")
        if t.get("result_error"):
            print(f"    result error: {one_line(t['result_error'], 120)}")
        if t.get("artifacts"):
            print(f"    artifacts: {one_line(', '.join(a['path'] for a in t['artifacts']), 90)}")
        for warning in t.get("warnings") or []:
            print(f"    warning: {one_line(warning, 200)}")
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


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))
