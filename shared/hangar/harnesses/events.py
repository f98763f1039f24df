"""What a line of a harness's run log says, in one line a person reads: tool calls, the
assistant's text, and the model API's retries and errors (Claude Code, Codex, pi and
Antigravity events). The CLI's ``-w`` and MCP's ``wait_for_turn`` show the same lines."""

from __future__ import annotations

import json
import re
from typing import Any


def one_line(text: str | None, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters with ``...``."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


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
    retry = model_api_trouble(event)
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


def model_api_trouble(event: dict[str, Any]) -> str | None:
    """A model API retry or error event, said as ``model API ...`` with its cause (None for
    other events)."""
    kind = event.get("type")
    if kind == "system" and event.get("subtype") == "api_retry":  # Claude Code
        return (f"model API retry {event.get('attempt')}/{event.get('max_retries')} in "
                f"{_seconds(event.get('retry_delay_ms'))}: {_claude_cause(event)}")
    if kind == "auto_retry_start":  # pi
        return (f"model API retry {event.get('attempt')}/{event.get('maxAttempts')} in "
                f"{_seconds(event.get('delayMs'))}: {_pi_cause(event.get('errorMessage'))}")
    if kind == "error" and isinstance(event.get("message"), str):  # Codex
        retry = _CODEX_RETRY.match(event["message"])
        if retry:
            cause = _CODEX_STATUS.sub(r"HTTP \1", retry["cause"], count=1)
            return (f"model API retry {retry['attempt']}/{retry['of']}: "
                    f"{one_line(_CODEX_URL.sub('', cause), 100)}")  # fmt: skip
        return f"model API: {one_line(event['message'], 100)}"
    if kind == "turn.failed":  # Codex
        error = event.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        return f"model API: the turn failed: {one_line(str(message or 'no reason given'), 100)}"
    message = event.get("message")
    if kind == "message_end" and isinstance(message, dict) and message.get("errorMessage"):  # pi
        return f"model API error: {one_line(str(message['errorMessage']), 100)}"
    return None


# Claude Code's category of a failed call that had an HTTP answer (its api_retry event's
# "error"), in words; "unknown" with no status is a call that had none.
_CLAUDE_CATEGORIES = {"overloaded": "overloaded", "rate_limit": "rate limited",
                      "authentication_failed": "authentication failed",
                      "server_error": "server error"}  # fmt: skip
# Codex 0.171's retry events: "Reconnecting... 1/5 (unexpected status 503 Service Unavailable:
# BODY, url: URL)"; the one that waits for the network has no count.
_CODEX_RETRY = re.compile(
    r"Reconnecting\.\.\. (?P<attempt>\d+)/(?P<of>\d+) \((?P<cause>.*)\)\Z", re.S)
_CODEX_STATUS = re.compile(r"\Aunexpected status (\d{3}\b)")
_CODEX_URL = re.compile(r", url: \S+\Z")
# pi's errorMessage of an answer with an error status: "503 BODY".
_PI_STATUS = re.compile(r"\A(\d{3}) ")


def _claude_cause(event: dict[str, Any]) -> str:
    """Why Claude Code retries. Its event carries the HTTP status and a category when the
    endpoint answered; when it did not (connection refused, a host not found or unreachable, a
    timeout), only ``"error": "unknown"`` and no status, and Claude Code names the cause in
    the text it ends the turn with, after its last retry."""
    status, category = event.get("error_status"), event.get("error")
    if isinstance(status, int):
        words = _CLAUDE_CATEGORIES.get(str(category))
        return f"HTTP {status}: {words}" if words else f"HTTP {status}"
    if category in (None, "unknown"):
        return ("no HTTP answer (connection refused, host unreachable or timed out: Claude "
                "Code says which after its last retry)")
    return str(category)


def _pi_cause(message: object) -> str:
    """Why pi retries: its error message, the status of an HTTP answer said as one."""
    text = one_line(str(message or "no reason given"), 100)
    if text == "Connection error.":  # the OpenAI SDK's: no HTTP answer, not a timeout
        return "Connection error. (no HTTP answer: refused, not found or unreachable)"
    return _PI_STATUS.sub(r"HTTP \1: ", text, count=1)


def _seconds(ms: object) -> str:
    return f"{float(ms) / 1000:.1f} s" if isinstance(ms, int | float) else "a moment"


class EventLines:
    """A run log rendered as it streams: feed it chunks cut anywhere, get back the
    :func:`describe_event` of each whole line that has something to say, one per output line
    (UTF-8). :meth:`close` renders a last line that had no newline."""

    def __init__(self) -> None:
        self._partial: list[bytes] = []  # the pieces of a line not ended yet, joined once

    def feed(self, chunk: bytes) -> bytes:
        head, *rest = chunk.split(b"\n")
        if not rest:
            self._partial.append(head)
            return b""
        whole = [b"".join([*self._partial, head]), *rest[:-1]]
        self._partial = [rest[-1]]
        return self._render(whole)

    def close(self) -> bytes:
        rest, self._partial = b"".join(self._partial), []
        return self._render([rest])

    @staticmethod
    def _render(lines: list[bytes]) -> bytes:
        said = [describe_event(line) for line in lines if line.strip()]
        return "".join(f"{text}\n" for text in said if text).encode()
