"""Anthropic Messages (``POST /v1/messages``), as Claude Code and pi's anthropic-messages use it.

Streaming replies follow the documented event order: ``message_start``, then per content block
``content_block_start`` / ``content_block_delta`` (``text_delta`` or ``input_json_delta``) /
``content_block_stop``, then ``message_delta`` (``stop_reason`` ``tool_use`` or ``end_turn``,
with usage) and ``message_stop``.
"""

from __future__ import annotations

import json
from typing import Any

from .scenario import JSON, Entry, ToolCall, user_entries
from .wire import Reply, SseEvent, Wire, chunks, estimate_tokens, model_of, new_id, text_of


def entries(body: JSON) -> list[Entry]:
    """The conversation in ``body["messages"]``; a user message carrying any ``tool_result``
    block is a tool-result message, whose other text is read as any user text is (system
    reminders are context; the rest is a prompt: a steer, which Claude Code sends beside the
    results of the tool calls it interrupted)."""
    out: list[Entry] = []
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        blocks: list[Any] = content if isinstance(content, list) else [content]
        if message.get("role") == "assistant":
            for block in blocks:
                if isinstance(block, str):
                    out.append(Entry("assistant", block))
                elif isinstance(block, dict) and block.get("type") == "text":
                    out.append(Entry("assistant", str(block.get("text", ""))))
                elif isinstance(block, dict) and block.get("type") == "tool_use":
                    call = json.dumps(block.get("input", {}), sort_keys=True)
                    out.append(Entry("tool_call", f"{block.get('name')} {call}"))
            continue
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            for block in results:
                out.append(Entry("tool_result", "\n".join(text_of(block.get("content")))))
            out.extend(user_entries(text_of([b for b in blocks if b not in results])))
        else:
            out.extend(user_entries(text_of(content)))
    return out


def tools(body: JSON) -> dict[str, JSON]:
    """Offered tools by name (server tools without a schema map to ``{}``)."""
    offered: dict[str, JSON] = {}
    listed = body.get("tools")
    for tool in listed if isinstance(listed, list) else []:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            schema = tool.get("input_schema")
            offered[tool["name"]] = schema if isinstance(schema, dict) else {}
    return offered


def _blocks(reply: Reply) -> list[JSON]:
    if isinstance(reply, ToolCall):
        return [
            {
                "type": "tool_use",
                "id": new_id("toolu_"),
                "name": reply.name,
                "input": reply.arguments,
            }
        ]
    return [{"type": "text", "text": reply}]


def _usage(body: JSON, output: int) -> JSON:
    return {
        "input_tokens": estimate_tokens(body.get("messages", [])),
        "output_tokens": output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def complete(body: JSON, reply: Reply) -> JSON:
    """The non-streaming Message object."""
    content = _blocks(reply)
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model_of(body),
        "content": content,
        "stop_reason": "tool_use" if isinstance(reply, ToolCall) else "end_turn",
        "stop_sequence": None,
        "usage": _usage(body, estimate_tokens(content)),
    }


def stream(body: JSON, reply: Reply) -> list[SseEvent]:
    """The Message as SSE events; tool input arrives as ``input_json_delta`` fragments."""
    message = complete(body, reply)
    start = {**message, "content": [], "stop_reason": None, "usage": _usage(body, 1)}
    events = [
        SseEvent("message_start", {"type": "message_start", "message": start}),
        SseEvent("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            opening: JSON = {**block, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": part}
                for part in chunks(json.dumps(block["input"]))
            ]
        else:
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": part} for part in chunks(block["text"])]
        events.append(
            SseEvent(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            )
        )
        events.extend(
            SseEvent(
                "content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}
            )
            for d in deltas
        )
        events.append(
            SseEvent("content_block_stop", {"type": "content_block_stop", "index": index})
        )
    events.append(
        SseEvent(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        )
    )
    events.append(SseEvent("message_stop", {"type": "message_stop"}))
    return events


def count_tokens(body: JSON) -> JSON:
    """``POST /v1/messages/count_tokens``: a rough estimate of the request's input."""
    return {"input_tokens": estimate_tokens([body.get("system"), body.get("messages")])}


WIRE = Wire("anthropic", entries, tools, stream, complete)
