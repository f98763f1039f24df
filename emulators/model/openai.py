"""OpenAI Responses (``POST /v1/responses``, Codex) and Chat Completions
(``POST /v1/chat/completions``, pi's ``openai-completions``).

Responses streams ``response.created``, ``response.in_progress``, then for the one output item
``response.output_item.added``, its content events (``response.content_part.added`` /
``response.output_text.delta`` / ``response.output_text.done`` / ``response.content_part.done``
for a message; ``response.function_call_arguments.delta`` / ``.done`` for a function call),
``response.output_item.done``, and finally ``response.completed`` with usage. Chat Completions
streams ``chat.completion.chunk`` objects (role, then content or ``tool_calls`` deltas, then a
``finish_reason`` of ``stop`` or ``tool_calls``), a usage chunk when ``stream_options.
include_usage`` asks for it, and ``data: [DONE]``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .scenario import JSON, Entry, ToolCall, user_entries
from .wire import Reply, SseEvent, Wire, chunks, estimate_tokens, model_of, new_id, text_of

# -- Responses ----------------------------------------------------------------------------------


def _output_text(value: Any) -> str:
    """A function_call_output's ``output``: a string, or content items with text."""
    if isinstance(value, str):
        return value
    return "\n".join(text_of(value))


def responses_entries(body: JSON) -> list[Entry]:
    """The conversation in ``body["input"]`` (a string or a list of items).

    ``developer`` and ``system`` messages and ``reasoning`` items are left out.
    """
    items = body.get("input")
    if isinstance(items, str):
        return user_entries([items])
    out: list[Entry] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            texts = text_of(item.get("content"))
            if role == "user":
                out.extend(user_entries(texts))
            elif role == "assistant":
                out.extend(Entry("assistant", t) for t in texts)
        elif kind in ("function_call", "custom_tool_call"):
            args = item.get("arguments", item.get("input", ""))
            name = item.get("name")
            if isinstance(item.get("namespace"), str):  # as responses_tools lists it
                name = f"{item['namespace']}__{name}"
            out.append(Entry("tool_call", f"{name} {args}"))
        elif kind == "local_shell_call":
            action = json.dumps(item.get("action", {}), sort_keys=True)
            out.append(Entry("tool_call", f"local_shell {action}"))
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            out.append(Entry("tool_result", _output_text(item.get("output"))))
    return out


def _namespaced(body: JSON) -> dict[str, tuple[str, str, JSON]]:
    """Function tools inside ``namespace`` tools (Codex's MCP servers: namespace
    ``mcp__SERVER``): ``NAMESPACE__NAME`` → (namespace, name, parameters schema)."""
    found: dict[str, tuple[str, str, JSON]] = {}
    listed = body.get("tools")
    for tool in listed if isinstance(listed, list) else []:
        if not (isinstance(tool, dict) and tool.get("type") == "namespace"):
            continue
        namespace, inner = tool.get("name"), tool.get("tools")
        if not (isinstance(namespace, str) and isinstance(inner, list)):
            continue
        for child in inner:
            if isinstance(child, dict) and isinstance(child.get("name"), str):
                params = child.get("parameters")
                schema = params if isinstance(params, dict) else {}
                found[f"{namespace}__{child['name']}"] = (namespace, child["name"], schema)
    return found


def responses_tools(body: JSON) -> dict[str, JSON]:
    """Offered function tools by name; a namespace's functions as ``NAMESPACE__NAME`` (so
    Codex's MCP tools carry the names Claude Code gives them); other tool types are listed
    under their ``type``."""
    offered: dict[str, JSON] = {n: schema for n, (_, _, schema) in _namespaced(body).items()}
    listed = body.get("tools")
    for tool in listed if isinstance(listed, list) else []:
        if not isinstance(tool, dict) or tool.get("type") == "namespace":
            continue
        if tool.get("type") == "function" and isinstance(tool.get("name"), str):
            params = tool.get("parameters")
            offered[tool["name"]] = params if isinstance(params, dict) else {}
        elif isinstance(tool.get("name"), str):
            offered[tool["name"]] = {"x-tool-type": tool.get("type")}
        elif isinstance(tool.get("type"), str):
            offered[tool["type"]] = {"x-tool-type": tool.get("type")}
    return offered


def _response_item(body: JSON, reply: Reply) -> JSON:
    if isinstance(reply, ToolCall):
        item: JSON = {
            "type": "function_call",
            "id": new_id("fc_"),
            "call_id": new_id("call_"),
            "name": reply.name,
            "arguments": json.dumps(reply.arguments),
            "status": "completed",
        }
        namespaced = _namespaced(body).get(reply.name)
        if namespaced is not None:  # a namespace's function: its own name, and the namespace
            item["namespace"], item["name"] = namespaced[0], namespaced[1]
        return item
    return {
        "type": "message",
        "id": new_id("msg_"),
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": reply, "annotations": []}],
    }


def _response(body: JSON, response_id: str, status: str, output: list[JSON]) -> JSON:
    inputs = estimate_tokens(body.get("input", []))
    outputs = estimate_tokens(output) if output else 0
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model_of(body),
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [],
        "usage": (
            {
                "input_tokens": inputs,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": outputs,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": inputs + outputs,
            }
            if status == "completed"
            else None
        ),
    }


def responses_complete(body: JSON, reply: Reply) -> JSON:
    """The non-streaming Response object."""
    return _response(body, new_id("resp_"), "completed", [_response_item(body, reply)])


def responses_stream(body: JSON, reply: Reply) -> list[SseEvent]:
    """The Response as SSE events, each carrying ``type`` and a ``sequence_number``."""
    response_id = new_id("resp_")
    item = _response_item(body, reply)
    item_id = item["id"]
    data: list[JSON] = [
        {"type": "response.created", "response": _response(body, response_id, "in_progress", [])},
        {
            "type": "response.in_progress",
            "response": _response(body, response_id, "in_progress", []),
        },
    ]
    if item["type"] == "function_call":
        data.append(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "arguments": "", "status": "in_progress"},
            }
        )
        data.extend(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item_id,
                "output_index": 0,
                "delta": part,
            }
            for part in chunks(item["arguments"])
        )
        data.append(
            {
                "type": "response.function_call_arguments.done",
                "item_id": item_id,
                "output_index": 0,
                "arguments": item["arguments"],
            }
        )
    else:
        text = item["content"][0]["text"]
        where = {"item_id": item_id, "output_index": 0, "content_index": 0}
        empty_part = {"type": "output_text", "text": "", "annotations": []}
        data.append(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "content": [], "status": "in_progress"},
            }
        )
        data.append({"type": "response.content_part.added", **where, "part": empty_part})
        data.extend(
            {"type": "response.output_text.delta", **where, "delta": part} for part in chunks(text)
        )
        data.append({"type": "response.output_text.done", **where, "text": text})
        data.append({"type": "response.content_part.done", **where, "part": item["content"][0]})
    data.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    data.append(
        {
            "type": "response.completed",
            "response": _response(body, response_id, "completed", [item]),
        }
    )
    return [
        SseEvent(str(event["type"]), {**event, "sequence_number": n})
        for n, event in enumerate(data)
    ]


RESPONSES = Wire(
    "responses", responses_entries, responses_tools, responses_stream, responses_complete
)


# -- Chat Completions ---------------------------------------------------------------------------


def chat_entries(body: JSON) -> list[Entry]:
    """The conversation in ``body["messages"]``; ``system`` and ``developer`` are left out."""
    out: list[Entry] = []
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        texts = text_of(message.get("content"))
        if role == "user":
            out.extend(user_entries(texts))
        elif role == "assistant":
            out.extend(Entry("assistant", t) for t in texts if t)
            calls = message.get("tool_calls")
            for call in calls if isinstance(calls, list) else []:
                function = call.get("function", {}) if isinstance(call, dict) else {}
                out.append(
                    Entry("tool_call", f"{function.get('name')} {function.get('arguments', '')}")
                )
        elif role in ("tool", "function"):
            out.append(Entry("tool_result", "\n".join(texts)))
    return out


def chat_tools(body: JSON) -> dict[str, JSON]:
    """Offered function tools by name."""
    offered: dict[str, JSON] = {}
    listed = body.get("tools")
    for tool in listed if isinstance(listed, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            params = function.get("parameters")
            offered[function["name"]] = params if isinstance(params, dict) else {}
    return offered


def _chat_usage(body: JSON, reply: Reply) -> JSON:
    prompt = estimate_tokens(body.get("messages", []))
    completion = estimate_tokens(reply if isinstance(reply, str) else reply.arguments)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def chat_complete(body: JSON, reply: Reply) -> JSON:
    """The non-streaming ``chat.completion`` object."""
    message: JSON = {"role": "assistant", "content": None}
    if isinstance(reply, ToolCall):
        message["tool_calls"] = [
            {
                "id": new_id("call_"),
                "type": "function",
                "function": {"name": reply.name, "arguments": json.dumps(reply.arguments)},
            }
        ]
    else:
        message["content"] = reply
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_of(body),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if isinstance(reply, ToolCall) else "stop",
            }
        ],
        "usage": _chat_usage(body, reply),
    }


def chat_stream(body: JSON, reply: Reply) -> list[SseEvent]:
    """``chat.completion.chunk`` events and the closing ``[DONE]``."""
    base: JSON = {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model_of(body),
    }

    def chunk(delta: JSON, finish: str | None = None) -> SseEvent:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return SseEvent(None, {**base, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": ""})]
    if isinstance(reply, ToolCall):
        arguments = json.dumps(reply.arguments)
        call_id = new_id("call_")
        for n, part in enumerate(chunks(arguments)):
            call: JSON = {"index": 0, "function": {"arguments": part}}
            if n == 0:
                call = {
                    "index": 0,
                    "id": call_id,
                    "type": "function",
                    "function": {"name": reply.name, "arguments": part},
                }
            events.append(chunk({"tool_calls": [call]}))
        events.append(chunk({}, "tool_calls"))
    else:
        events.extend(chunk({"content": part}) for part in chunks(reply))
        events.append(chunk({}, "stop"))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        events.append(SseEvent(None, {**base, "choices": [], "usage": _chat_usage(body, reply)}))
    events.append(SseEvent(None, "[DONE]"))
    return events


CHAT = Wire("chat", chat_entries, chat_tools, chat_stream, chat_complete)
