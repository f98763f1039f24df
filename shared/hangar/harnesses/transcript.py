"""A turn's run log as a transcript: each line of Claude Code's, Codex's (``codex exec --json``,
which a live turn's driver writes too), pi's and Antigravity's JSON events said as the same few
events, whatever the harness (``GET .../log?format=events``, ``session log --format events``,
MCP ``get_transcript``).

:func:`line_events` is a pure function of one line: a line's events never depend on the lines
before it, so a reader can go on from any line's start. What the line does not say (the
person's message, the turn's usage and outcome) comes from the turn's record
(:mod:`hangar.operations.transcripts`). The run log is written by the agent's CLI, in a sandbox
the agent controls: every field is checked for its type, and a line that is not one of the
known events says nothing. Hangar's own lines (``hangar.*``, the driver's command answers) and
the CLIs' echoes of the prompt (which carries hangar's note) are never shown.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from hangar.exchange.note import without_note
from hangar.harnesses.events import model_api_trouble, one_line

OUTPUT_MAX = 8 << 10
"""A tool result's output is cut to this many bytes of UTF-8 (``cut`` says so)."""


class MessageEvent(BaseModel):
    kind: Literal["message"] = "message"
    role: Literal["user", "assistant"]
    text: str
    context: list[str] = Field(default_factory=list, description="the names of the context "
                               "items that came with a user's message")  # fmt: skip
    steer: bool = Field(default=False, description="a person's message that steered the "
                        "turn while it ran (left out when false)")  # fmt: skip

    @model_serializer(mode="wrap")
    def _without_false_steer(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """Every other message keeps the shape it had before steers were shown. (Unannotated:
        pydantic then keeps the model's own schema for its output.)"""
        out = handler(self)
        if not self.steer and isinstance(out, dict):
            out.pop("steer", None)
        return out


class ToolCallEvent(BaseModel):
    kind: Literal["tool_call"] = "tool_call"
    id: str = Field(description="pairs it with its tool_result")
    name: str
    input: dict[str, Any]


class ToolResultEvent(BaseModel):
    kind: Literal["tool_result"] = "tool_result"
    id: str = Field(description="the tool_call's id")
    output: str = Field(description=f"cut to {OUTPUT_MAX >> 10} KiB of UTF-8 (cut: true)")
    error: bool = Field(description="the tool failed (a command's non-zero exit among others)")
    cut: bool


class UsageEvent(BaseModel):
    kind: Literal["usage"] = "usage"
    input_tokens: int = Field(description="every input token, the cached ones included")
    output_tokens: int
    cached_tokens: int = Field(description="input tokens read from the model API's cache")


class NoticeEvent(BaseModel):
    kind: Literal["notice"] = "notice"
    text: str = Field(description="a line for people: a model API retry or error, a warning, "
                      "the agent's plan")  # fmt: skip


class OutcomeEvent(BaseModel):
    kind: Literal["outcome"] = "outcome"
    outcome: str = Field(description="exited, failed, interrupted, timed_out or needs_input")
    reason: str | None = Field(description="why, in words (None: it ended as asked)")
    duration_seconds: float | None = Field(description="from the harness's start to the end")


Event = Annotated[
    MessageEvent | ToolCallEvent | ToolResultEvent | UsageEvent | NoticeEvent | OutcomeEvent,
    Field(discriminator="kind"),
]

def result_of(id_: object, output: str, error: bool) -> ToolResultEvent:
    """A tool result, its output cut to :data:`OUTPUT_MAX` bytes."""
    data = output.encode("utf-8", "replace")
    cut = len(data) > OUTPUT_MAX
    if cut:
        output = data[:OUTPUT_MAX].decode("utf-8", "ignore")
    return ToolResultEvent(id=_str(id_), output=output, error=error, cut=cut)


def line_events(line: bytes) -> list[Event]:
    """The events one run-log line says: none for the rest (set-up, streaming deltas, hangar's
    own lines, JSON that is not a known event); a line that is not JSON is a notice."""
    try:
        event = json.loads(line)
    except ValueError:  # a CLI's plain words (a warning, a crash), as `session log` shows them
        text = one_line(line.decode(errors="replace"), 300)
        return [NoticeEvent(text=text)] if text else []
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return []
    retry = model_api_trouble(event)  # retries and errors, as `session log` says them
    if retry:
        return [NoticeEvent(text=retry)]
    kind: str = event["type"]
    if kind in ("assistant", "user"):
        return _claude(event)
    if kind == "result":  # Claude Code, Antigravity: the end of a run
        if event.get("is_error") is True:
            why = without_note(_str(event.get("result")) or _str(event.get("subtype")))
            return [NoticeEvent(text=f"the agent's run failed: {one_line(why, 300)}")]
        return []
    if kind.startswith("item."):
        return _codex(kind, _dict(event.get("item")))
    if kind == "message_end":
        return _pi(_dict(event.get("message")))
    if kind == "response" and event.get("success") is False:  # pi refused a driver's command
        return [NoticeEvent(text=f"pi refused {_str(event.get('command'))}: "
                            f"{one_line(_str(event.get('error')), 300)}")]  # fmt: skip
    if kind == "message" and event.get("role") == "assistant":  # Antigravity
        return _said(event.get("content"))
    return []


def _claude(event: dict[str, Any]) -> list[Event]:
    """Claude Code's ``assistant`` (text and tool calls) and ``user`` lines (tool results; the
    prompt and steers are not written back)."""
    out: list[Event] = []
    for block in _list(_dict(event.get("message")).get("content")):
        block = _dict(block)
        if event["type"] == "assistant" and block.get("type") == "text":
            out += _said(block.get("text"))
        elif event["type"] == "assistant" and block.get("type") == "tool_use":
            out.append(ToolCallEvent(id=_str(block.get("id")), name=_str(block.get("name")),
                                     input=_input(block.get("input"))))  # fmt: skip
        elif event["type"] == "user" and block.get("type") == "tool_result":
            out.append(result_of(block.get("tool_use_id"), _text(block.get("content")),
                                 block.get("is_error") is True))  # fmt: skip
    return out


def _codex(kind: str, item: dict[str, Any]) -> list[Event]:
    """Codex's items: a command or MCP call is called as it starts and answered as it ends; a
    file change or web search, both at its end (``item.started`` is not always written)."""
    type_, id_, done = item.get("type"), _str(item.get("id")), kind == "item.completed"
    failed = item.get("status") in ("failed", "declined")
    if type_ == "command_execution":
        if not done:
            return [ToolCallEvent(id=id_, name="shell", input={"command": _str(item.get("command"))})]
        code = item.get("exit_code")
        error = failed or (isinstance(code, int) and code != 0)
        return [result_of(id_, _str(item.get("aggregated_output")), error)]
    if type_ == "mcp_tool_call":
        if not done:
            name = f"mcp__{_str(item.get('server'))}__{_str(item.get('tool'))}"
            return [ToolCallEvent(id=id_, name=name, input=_input(item.get("arguments")))]
        problem = _dict(item.get("error"))
        output = _str(problem.get("message")) or _text(_dict(item.get("result")).get("content"))
        return [result_of(id_, output, failed or bool(problem))]
    if type_ == "file_change" and done:
        changes = [_dict(c) for c in _list(item.get("changes"))]
        said = "\n".join(f"{_str(c.get('kind'))} {_str(c.get('path'))}" for c in changes)
        return [ToolCallEvent(id=id_, name="apply_patch", input={"changes": changes}),
                result_of(id_, said, failed)]  # fmt: skip
    if type_ == "web_search" and done:
        return [ToolCallEvent(id=id_, name="web_search", input={"query": _str(item.get("query"))}),
                result_of(id_, "", failed)]  # fmt: skip
    if type_ == "agent_message" and done:
        return _said(item.get("text"))
    if type_ == "error" and done:  # Codex's warnings
        return [NoticeEvent(text=one_line(_str(item.get("message")), 300))]
    if type_ == "todo_list" and done:
        steps = [_dict(t) for t in _list(item.get("items"))]
        plan = "; ".join(f"[{'x' if t.get('completed') else ' '}] {_str(t.get('text'))}"
                         for t in steps)  # fmt: skip
        return [NoticeEvent(text=one_line(f"plan: {plan}", 300))]
    return []


def _pi(message: dict[str, Any]) -> list[Event]:
    """pi's finished messages: the assistant's (text and tool calls) and tool results; the
    user's are the prompt (with hangar's note) or a steer, and are not shown."""
    role = message.get("role")
    if role == "toolResult":
        return [result_of(message.get("toolCallId"), _text(message.get("content")),
                          message.get("isError") is True)]  # fmt: skip
    if role != "assistant":
        return []
    out: list[Event] = []
    for block in _list(message.get("content")):
        block = _dict(block)
        if block.get("type") == "text":
            out += _said(block.get("text"))
        elif block.get("type") == "toolCall":
            out.append(ToolCallEvent(id=_str(block.get("id")), name=_str(block.get("name")),
                                     input=_input(block.get("arguments"))))  # fmt: skip
    return out


def usage_event(usage: dict[str, int], harness: str | None) -> UsageEvent | None:
    """A turn's usage record (each harness's own keys) as tokens in, out and cached; None when
    it has none. Codex counts cached input among its input tokens; Claude Code, Antigravity
    and pi count it apart."""
    if not usage:
        return None
    get = usage.get
    if harness == "codex":
        return UsageEvent(input_tokens=get("input_tokens", 0), cached_tokens=get(
            "cached_input_tokens", 0), output_tokens=get("output_tokens", 0))  # fmt: skip
    if "input" in usage or "output" in usage:  # pi
        cached = get("cacheRead", 0)
        return UsageEvent(input_tokens=get("input", 0) + cached + get("cacheWrite", 0),
                          cached_tokens=cached, output_tokens=get("output", 0))  # fmt: skip
    cached = get("cache_read_input_tokens", 0)
    return UsageEvent(input_tokens=get("input_tokens", 0) + cached
                      + get("cache_creation_input_tokens", 0),
                      cached_tokens=cached, output_tokens=get("output_tokens", 0))  # fmt: skip


def _said(text: object) -> list[Event]:
    said = without_note(_str(text)).strip()
    return [MessageEvent(role="assistant", text=said)] if said else []


def _text(content: object) -> str:
    """A tool result's content: a string, or the text of its blocks."""
    if isinstance(content, str):
        return content
    parts = [_str(_dict(b).get("text")) for b in _list(content)]
    return "\n".join(p for p in parts if p)


def _input(value: object) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):  # some APIs give a call's arguments as JSON text
        try:
            decoded = json.loads(value)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            return decoded
    return {} if value is None else {"value": value}


def _str(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
