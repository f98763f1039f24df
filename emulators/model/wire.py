"""What every API module shares: the reply type, SSE events and small JSON helpers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .scenario import JSON, Entry, ToolCall

Reply = str | ToolCall
"""A model response: final text, or one tool call."""


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event: ``event:`` line when ``name`` is set, then one ``data:`` line.

    ``data`` is a JSON object, or a raw string (Chat Completions' ``[DONE]``).
    """

    name: str | None
    data: JSON | str

    def encode(self) -> bytes:
        """The event's bytes, blank-line terminated."""
        payload = self.data if isinstance(self.data, str) else json.dumps(self.data)
        head = f"event: {self.name}\n" if self.name else ""
        return f"{head}data: {payload}\n\n".encode()


@dataclass(frozen=True)
class Wire:
    """One API's adapters: parse a request body, render a reply.

    ``entries`` normalises the conversation; ``tools`` maps each offered tool's name to its
    JSON schema; ``stream`` renders a reply as SSE events; ``complete`` as one JSON body.
    """

    name: str
    entries: Callable[[JSON], list[Entry]]
    tools: Callable[[JSON], dict[str, JSON]]
    stream: Callable[[JSON, Reply], list[SseEvent]]
    complete: Callable[[JSON, Reply], JSON]


def new_id(prefix: str) -> str:
    """A fresh identifier such as ``msg_3f2a...``."""
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def estimate_tokens(value: Any) -> int:
    """A rough token count (characters / 4) for usage fields; never below 1."""
    return max(1, len(json.dumps(value, default=str)) // 4)


def chunks(text: str, size: int = 24) -> Iterator[str]:
    """``text`` in pieces of ``size`` characters (one empty piece for empty text)."""
    if not text:
        yield ""
        return
    for start in range(0, len(text), size):
        yield text[start : start + size]


def text_of(content: Any) -> list[str]:
    """Texts inside a content value: a string, or a list of blocks carrying ``text``."""
    if isinstance(content, str):
        return [content]
    texts: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                texts.append(block["text"])
    return texts


def model_of(body: JSON) -> str:
    """The model the request named, or ``stub-model``."""
    model = body.get("model")
    return model if isinstance(model, str) and model else "stub-model"
