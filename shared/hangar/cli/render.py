"""Human output for the CLI: short tables, and one line per notable event of a run log.

Everything the CLI prints for people goes out through :func:`say`, which shows control
characters as visible escapes (:func:`hangar.inert.inert`: ``\x1b`` for ESC): summaries,
questions, options, results, file names, log lines, warnings and error messages come from the
agent or its sandbox, and a terminal must never act on them. ``--json`` output is JSON, whose
strings encode them already (``\u001b``). Raw bytes (a patch, ``log --raw``, an artifact to
``-o -``) go to a pipe or a file as they are, and to a terminal escaped (:func:`show_bytes`);
``session shell`` is a terminal by design and is left alone.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

from hangar.harnesses import events
from hangar.inert import inert

__all__ = [
    "ago", "describe_event", "describe_phase", "inert", "one_line", "print_env", "print_envs",
    "print_json", "print_sandboxes", "print_session", "print_sessions", "say", "show_bytes",
    "table",
]  # fmt: skip


def say(text: str, *, err: bool = False, lines: bool = False) -> None:
    """Print ``text`` (inert; ``lines`` keeps its newlines and tabs) on stdout, or stderr."""
    print(inert(text, lines=lines), file=sys.stderr if err else sys.stdout, flush=err)


def show_bytes(data: bytes) -> None:
    """``data`` on stdout: as it is to a pipe or a file; to a terminal as UTF-8 text with
    bytes that are not UTF-8 and control characters (but newline and tab) escaped."""
    if sys.stdout.isatty():
        sys.stdout.write(inert(data.decode("utf-8", "backslashreplace"), lines=True))
        sys.stdout.flush()
        return
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def one_line(text: str | None, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters with ``...``, inert."""
    return inert(events.one_line(text, width))


def describe_event(line: bytes) -> str | None:
    """:func:`hangar.harnesses.events.describe_event`, inert."""
    text = events.describe_event(line)
    return None if text is None else inert(text)


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
    """Columns as wide as their widest cell (the last one as it is); cells inert."""
    rows = [[inert(cell) for cell in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers[:-1])]
    for row in [headers, *rows]:
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=False)]
        say("  ".join([*cells, row[-1]]).rstrip())


def print_sessions(sessions: list[dict[str, Any]]) -> None:
    if not sessions:
        say("no sessions")
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
    say(f"{s['name']} ({s['id']}): {s['state']}, last active {ago(s['last_active_at'])}")
    say(f"  title:    {s['title']}")
    say(f"  harness:  {s['harness']}{' / ' + s['model'] if s.get('model') else ''}")
    say(f"  repo:     {s['repo']} (branch {s['branch']})")
    idle = f"{s['idle_minutes']:g} min" if s["idle_minutes"] else "never"
    say(f"  sandbox:  {s['sandbox_id'] or '(none)'}; suspends when unused for: {idle}")
    if s.get("resume_hint"):
        say(f"  resume:   {s['resume_hint']}")
    if s.get("needs_input"):
        options = s.get("question_options") or []
        say(f"  needs input: {one_line(s['needs_input'], 200)}"
            + (f" (options: {' | '.join(inert(o) for o in options)})" if options else "")
            + f"; answer with: hangar session send {s['name']} ANSWER")
    if s.get("permission_mode", "auto") != "auto":
        say(f"  permissions: {s['permission_mode']}")
    for a in s.get("pending_approvals") or []:
        say(f"  waits for approval {inert(a['id'])} (turn {a['turn']}, asked "
            f"{ago(a['asked_at'])}): {one_line(a['summary'], 120)}; hangar session approve "
            f"{s['name']} {inert(a['id'])} (or deny)")  # fmt: skip
    if s.get("phase"):
        say(f"  starting: {describe_phase(s['phase'])}, since {ago(s['phase']['since'])}")
    if s.get("start_error"):
        e = s["start_error"]
        say(f"  start failed while {e['what']} ({e['step']}): {one_line(e['message'], 100)}")
    elif s.get("error"):
        say(f"  error:    {one_line(s['error'], 100)}")
    if s.get("checkpoint_error"):
        say(f"  checkpoint failing: {one_line(s['checkpoint_error'], 100)} (the sandbox is "
            "kept until a checkpoint succeeds)")
    if s.get("restored_from"):
        skipped = s.get("restore_skipped") or []
        say(f"  restored from: {s['restored_from']}"
            + (f", after {len(skipped)} newer that did not restore:" if skipped else ""))
        for k in skipped:
            say(f"    {k['checkpoint_id']}: {one_line(k['message'], 90)} ({k['code']})")
        for warning in s.get("restore_warnings") or []:
            say(f"    warning: {one_line(warning, 200)}")
    used = sorted(s.get("conversations") or {})
    if len(used) > 1 or (used and used != [s["harness"]]):
        say(f"  conversations: {', '.join(used)} (a switch back resumes its own)")
    switched = len(used) > 1
    for t in s.get("turns") or []:
        shown = t.get("harness") if switched else None
        how = ", ".join(x for x in (shown, "handoff" if t.get("handoff") else "") if x)
        say(f"  turn {t['n']}{f' ({how})' if how else ''}: {t['outcome'] or 'running'}: "
            f"{one_line(t['message'], 60)}")
        if t.get("summary"):
            say(f"    {one_line(t['summary'], 90)}")
        if t.get("result") is not None:
            say(f"    result: {one_line(json.dumps(t['result']), 90)}")
        if t.get("result_error"):
            say(f"    result error: {one_line(t['result_error'], 120)}")
        if t.get("artifacts"):
            paths = ", ".join(inert(a["path"]) for a in t["artifacts"])
            say(f"    artifacts: {one_line(paths, 90)}")
        for warning in t.get("warnings") or []:
            say(f"    warning: {one_line(warning, 200)}")
        for step in t.get("steps") or []:
            tree = (step["tree"] or "")[:12] or f"skipped ({step['skipped']})"
            say(f"    step {step['step']}: {inert(step['tool'] or '?')} -> {tree}"
                f" (hangar session tree {s['name']} {t['n']} {step['step']})")
    for c in s.get("checkpoints") or []:
        good = ", the last known to restore" if c["id"] == s.get("good_checkpoint") else ""
        say(f"  checkpoint {c['id']}: {c['reason']}, {ago(c['ts'])}{good}")
        for warning in c["warnings"]:
            say(f"    warning: {one_line(warning, 200)}")


def print_envs(envs: list[dict[str, Any]]) -> None:
    if not envs:
        say("no environments")
    for e in envs:
        extra = [f"vars: {', '.join(e['vars'])}"] if e["vars"] else []
        extra += [f"secrets: {', '.join(e['secrets'])}"] if e["secrets"] else []
        ports = e.get("host_ports") or []
        extra += [f"host ports: {', '.join(str(p) for p in ports)}"] if ports else []
        extra += [f"image: {e['image']}"] if e.get("image") else []
        extra += [f"warm pool: {warm_pool(e)}"] if e.get("warm_pool") else []
        branch = f" @ {e['branch']}" if e["branch"] else ""
        say(f"{e['name']}: {e['repo']}{branch}{'  (' + '; '.join(extra) + ')' if extra else ''}")


def print_env(e: dict[str, Any]) -> None:
    """One environment in full (secrets by name only)."""
    say(f"{e['name']}: {e['repo']}")
    say(f"  branch:     {e['branch'] or '(the remote HEAD)'}")
    say(f"  setup:      {one_line(e['setup'], 100) if e['setup'] else '(none)'}")
    say(f"  vars:       {', '.join(e['vars']) or '(none)'}")
    say(f"  secrets:    {', '.join(e['secrets']) or '(none)'}")
    say(f"  host ports: {', '.join(str(p) for p in e.get('host_ports') or []) or '(none)'}")
    limit = e.get("turn_timeout_minutes")
    say(f"  turn limit: {f'{limit:g} minutes' if limit else '(HANGAR_TURN_TIMEOUT_MINUTES)'}")
    say(f"  image:      {e.get('image') or '(none)'}")
    say(f"  warm pool:  {warm_pool(e) if e.get('warm_pool') else '(none)'}")
    if e.get("notify_url"):
        say(f"  notify URL: {inert(e['notify_url'])}")
    if e.get("allowed_hosts"):
        say(f"  allowed hosts (deny-risky): {', '.join(inert(h) for h in e['allowed_hosts'])}")
    for name, pattern in (e.get("deny_rules") or {}).items():
        say(f"  deny rule {inert(name)}: {inert(pattern)}")


def warm_pool(e: dict[str, Any]) -> str:
    """An environment's warm pool in words: its size, and its hours or ``always``."""
    return f"{e['warm_pool']} ready, {e.get('warm_pool_hours') or 'at all hours'}"


def print_sandboxes(boxes: list[dict[str, Any]]) -> None:
    if not boxes:
        say("no sandboxes")
        return
    table(["ID", "CREATED", "SESSION"],
          [[b["id"], ago(b["created_at"]), b.get("session") or "-"] for b in boxes])


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))
