"""Scenarios and the stateless choice of the next model response.

A scenario is JSON::

    {"rules": [{"when": "commit", "delay": 0,
                "steps": [{"shell": "echo hi > a.txt"}, {"text": "Wrote a.txt."}]},
               {"when": "hand it over",
                "steps": [{"tool": "mcp__hangar__list_sessions", "arguments": {"limit": 5}},
                          {"text": "Listed."}]}],
     "default": [{"text": "ok"}],
     "models": ["stub-model"],
     "side": "ok"}

Each step is one model response: ``{"shell": CMD}`` (one call of whichever shell tool the
request offers), ``{"tool": NAME, "arguments": {...}}`` (one call of the offered tool of that
name, MCP tools included: :func:`named_call`) or ``{"text": STR}`` (a final answer; ``{prompt}``
in it, and in a tool call's string arguments, is replaced by the prompt). ``delay`` (seconds,
on a step or on a rule as the default for its steps) holds the response back. ``models`` names
what ``GET /v1/models`` lists; ``side`` is the reply to side requests (requests that offer no
tools, such as title generation).

The choice is a pure function of the request (:func:`choose`), so resumes, retries and restarts
of the stub behave the same: the latest genuine user prompt picks the rule (first ``when`` that
is a substring of it; else, when the CLI added prompts of its own after the person's with no
model response between, the first rule matching one of those, newest first; else ``default``),
and the number of assistant tool-call rounds after that prompt is the step index. Past the
last step, a final text step repeats; a final shell or tool step is followed by the text
``done``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

JSON = dict[str, Any]

DEFAULT_MODELS: tuple[str, ...] = ("stub-model",)

EntryKind = Literal["prompt", "context", "assistant", "tool_call", "tool_result"]


class ScenarioError(ValueError):
    """A scenario document does not have the documented shape."""


@dataclass(frozen=True)
class Step:
    """One model response: exactly one of ``shell``, ``tool`` and ``text`` is set;
    ``arguments`` goes with ``tool``."""

    shell: str | None = None
    text: str | None = None
    delay: float = 0.0
    tool: str | None = None
    arguments: JSON = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    """Steps played when ``when`` occurs in the latest prompt."""

    when: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Scenario:
    """A parsed scenario; build it with :meth:`parse`."""

    rules: tuple[Rule, ...] = ()
    default: tuple[Step, ...] = (Step(text="ok"),)
    models: tuple[str, ...] = DEFAULT_MODELS
    side: str = "ok"
    source: JSON = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, doc: Mapping[str, Any] | None) -> Scenario:
        """Validate a scenario document; raise :class:`ScenarioError` naming the bad field."""
        if doc is None:
            doc = {}
        if not isinstance(doc, Mapping):
            raise ScenarioError("a scenario must be a JSON object")
        unknown = set(doc) - {"rules", "default", "models", "side"}
        if unknown:
            raise ScenarioError(f"unknown scenario keys: {sorted(unknown)}")
        rules_doc = doc.get("rules", [])
        if not isinstance(rules_doc, list):
            raise ScenarioError("rules must be a list")
        rules = []
        for i, rule in enumerate(rules_doc):
            if not isinstance(rule, Mapping):
                raise ScenarioError(f"rules[{i}] must be an object")
            when = rule.get("when")
            if not isinstance(when, str):
                raise ScenarioError(f"rules[{i}].when must be a string")
            extra = set(rule) - {"when", "steps", "delay"}
            if extra:
                raise ScenarioError(f"rules[{i}] has unknown keys: {sorted(extra)}")
            rule_delay = _delay(rule.get("delay", 0), f"rules[{i}].delay")
            steps = _steps(rule.get("steps"), f"rules[{i}].steps", rule_delay)
            rules.append(Rule(when=when, steps=steps))
        default = _steps(doc.get("default", [{"text": "ok"}]), "default", 0.0)
        models_doc = doc.get("models", list(DEFAULT_MODELS))
        if not (
            isinstance(models_doc, list)
            and models_doc
            and all(isinstance(m, str) and m for m in models_doc)
        ):
            raise ScenarioError("models must be a non-empty list of names")
        side = doc.get("side", "ok")
        if not isinstance(side, str):
            raise ScenarioError("side must be a string")
        return cls(
            rules=tuple(rules),
            default=default,
            models=tuple(models_doc),
            side=side,
            source=dict(doc),
        )


def _delay(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ScenarioError(f"{where} must be a number of seconds >= 0")
    return float(value)


def _steps(doc: Any, where: str, default_delay: float) -> tuple[Step, ...]:
    if not isinstance(doc, list) or not doc:
        raise ScenarioError(f"{where} must be a non-empty list of steps")
    steps = []
    for i, step in enumerate(doc):
        at = f"{where}[{i}]"
        if not isinstance(step, Mapping):
            raise ScenarioError(f"{at} must be an object")
        extra = set(step) - {"shell", "text", "tool", "arguments", "delay"}
        if extra:
            raise ScenarioError(f"{at} has unknown keys: {sorted(extra)}")
        kinds = [k for k in ("shell", "text", "tool") if step.get(k) is not None]
        if len(kinds) != 1:
            raise ScenarioError(f"{at} needs exactly one of shell, text and tool")
        if not isinstance(step[kinds[0]], str) or (kinds[0] == "tool" and not step["tool"]):
            raise ScenarioError(f"{at}: shell, text and tool must be strings (a tool's not empty)")
        arguments = step.get("arguments", {})
        if "arguments" in step and kinds[0] != "tool":
            raise ScenarioError(f"{at}: arguments go with a tool step only")
        if not isinstance(arguments, Mapping):
            raise ScenarioError(f"{at}.arguments must be an object")
        delay = _delay(step.get("delay", default_delay), f"{at}.delay")
        steps.append(
            Step(
                shell=step.get("shell"),
                text=step.get("text"),
                delay=delay,
                tool=step.get("tool"),
                arguments=dict(arguments),
            )
        )
    return tuple(steps)


# -- conversations, normalised across the three APIs -------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One piece of a conversation, in order.

    ``prompt`` is a genuine user message (system reminders stripped); ``context`` is user-role
    text the CLI injected (system reminders, environment context, instructions);
    ``assistant`` is model text; ``tool_call`` is ``name arguments-json``; ``tool_result`` is
    the tool's output as text.
    """

    kind: EntryKind
    text: str


# System reminders (Claude Code's) and hangar's note on $HANGAR_IO are context the harness or
# hangar added to the person's prompt, wherever they are in it.
_REMINDER = re.compile(r"<(system-reminder|hangar-exchange)>.*?</\1>", re.DOTALL)
# A user text that is entirely one XML-ish element (Codex's <environment_context>, <user_
# instructions>, Claude Code's <local-command-...>) is injected context, not a prompt.
_WRAPPED = re.compile(r"\A\s*<([A-Za-z][\w-]*)(\s[^>]*)?>.*</\1>\s*\Z", re.DOTALL)
_CONTEXT_PREFIXES = ("# AGENTS.md instructions", "<INSTRUCTIONS>", "Caveat: The messages below")


def user_entries(texts: Sequence[str]) -> list[Entry]:
    """Split the text blocks of one user message into context and (at most one) prompt entry.

    System reminders, hangar's exchange note and whole-block wrappers are context; the remaining blocks, joined by
    newlines, are the message's prompt.
    """
    entries: list[Entry] = []
    prompt: list[str] = []
    for text in texts:
        entries.extend(Entry("context", m.group(0)) for m in _REMINDER.finditer(text))
        rest = _REMINDER.sub("", text).strip()
        if not rest:
            continue
        if _WRAPPED.match(rest) or rest.startswith(_CONTEXT_PREFIXES):
            entries.append(Entry("context", rest))
        else:
            prompt.append(rest)
    if prompt:
        entries.append(Entry("prompt", "\n".join(prompt)))
    return entries


def latest_prompt(entries: Sequence[Entry]) -> tuple[str, int]:
    """The latest genuine prompt and its index (``("", -1)`` when there is none)."""
    for i in range(len(entries) - 1, -1, -1):
        if entries[i].kind == "prompt":
            return entries[i].text, i
    return "", -1


def latest_prompts(entries: Sequence[Entry]) -> tuple[list[str], int]:
    """The prompts of the latest user turn, newest first, and the latest prompt's index
    (``([], -1)`` when there is none).

    A user turn is the run of prompts and context before the latest prompt with no model
    response (text, tool call) or tool result between: a person's prompt and whatever user text
    the CLI sent after it as a message of its own.
    """
    prompt, at = latest_prompt(entries)
    if at < 0:
        return [], -1
    prompts = [prompt]
    for entry in reversed(entries[:at]):
        if entry.kind not in ("prompt", "context"):
            break
        if entry.kind == "prompt":
            prompts.append(entry.text)
    return prompts, at


def tool_rounds_after(entries: Sequence[Entry], index: int) -> int:
    """How many assistant tool-call rounds follow ``entries[index]``.

    A round is a maximal run of ``tool_call`` entries (parallel calls in one response), so
    results and other entries separate rounds.
    """
    rounds = 0
    previous: EntryKind | None = None
    for entry in entries[index + 1 :]:
        if entry.kind == "tool_call" and previous != "tool_call":
            rounds += 1
        previous = entry.kind
    return rounds


def choose(scenario: Scenario, entries: Sequence[Entry], offers_tools: bool) -> Step:
    """The step answering a request whose conversation is ``entries``.

    A request that offers no tools is a side request and gets ``scenario.side`` without
    consuming a step. The latest prompt is matched against every rule first; when none matches,
    the earlier prompts of the same user turn are (so a rule still matches when the CLI sends
    text of its own after the person's prompt). Text, and a tool call's string arguments, are
    returned with ``{prompt}`` (the prompt that matched, else the latest) already replaced.
    """
    prompts, at = latest_prompts(entries)
    if not offers_tools:
        return Step(text=scenario.side)
    steps, prompt = scenario.default, prompts[0] if prompts else ""
    matched = (
        (rule, text) for text in prompts for rule in scenario.rules if rule.when in text
    )
    rule_and_text = next(matched, None)
    if rule_and_text is not None:
        steps, prompt = rule_and_text[0].steps, rule_and_text[1]
    index = tool_rounds_after(entries, at) if at >= 0 else 0
    if index < len(steps):
        step = steps[index]
    elif steps[-1].text is not None:
        step = steps[-1]
    else:
        step = Step(text="done")
    if step.text is not None:
        return Step(text=step.text.replace("{prompt}", prompt), delay=step.delay)
    if step.tool is not None:
        return Step(tool=step.tool, arguments=_filled(step.arguments, prompt), delay=step.delay)
    return step


def _filled(value: Any, prompt: str) -> Any:
    """``value`` with ``{prompt}`` replaced in every string inside it."""
    if isinstance(value, str):
        return value.replace("{prompt}", prompt)
    if isinstance(value, list):
        return [_filled(item, prompt) for item in value]
    if isinstance(value, dict):
        return {key: _filled(item, prompt) for key, item in value.items()}
    return value


def render_transcript(entries: Sequence[Entry]) -> str:
    """The conversation as plain text, one ``kind: text`` paragraph per entry."""
    return "\n".join(f"{e.kind}: {e.text}" for e in entries)


# -- shell tools --------------------------------------------------------------------------------

_SHELL_NAMES = ("Bash", "bash", "exec_command", "shell", "shell_command")


@dataclass(frozen=True)
class ToolCall:
    """A call to make: the tool's name and its arguments object."""

    name: str
    arguments: JSON


def shell_call(tools: Mapping[str, JSON], command: str, cwd: str | None) -> ToolCall | None:
    """Map ``command`` onto the shell tool among ``tools`` (name → JSON schema), if any.

    Known names are preferred (Claude Code ``Bash``, pi ``bash``, Codex ``exec_command`` or
    ``shell``); else any tool whose name mentions bash, shell or exec. The argument key is
    ``cmd`` or ``command`` (whichever the schema has); an array-typed command becomes
    ``["bash", "-lc", command]``. ``workdir`` is filled with ``cwd`` when the schema has it and
    the request revealed the working directory.
    """
    name = next((n for n in _SHELL_NAMES if n in tools), None)
    if name is None:
        name = next(
            (n for n in tools if any(w in n.lower() for w in ("bash", "shell", "exec"))), None
        )
    if name is None:
        return None
    schema = tools[name] if isinstance(tools[name], dict) else {}
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = schema.get("required")
    required = required if isinstance(required, list) else []
    key = next((k for k in ("cmd", "command") if k in props), None)
    if key is None:
        key = next((k for k in required if isinstance(k, str)), "command")
    prop = props.get(key)
    is_array = isinstance(prop, dict) and prop.get("type") == "array"
    arguments: JSON = {key: ["bash", "-lc", command] if is_array else command}
    if cwd and "workdir" in props:
        arguments["workdir"] = cwd
    return ToolCall(name=name, arguments=arguments)


def named_call(tools: Mapping[str, JSON], name: str, arguments: JSON) -> ToolCall | None:
    """A call of the offered tool ``name`` with ``arguments``, or None when none is offered.

    An exact name wins. Otherwise the tool is found by its last ``__``-separated part, so one
    scenario serves every CLI's naming of an MCP tool: Claude Code offers a server's tools as
    ``mcp__SERVER__TOOL``, Codex in a namespace (listed as ``NAMESPACE__TOOL``: see the
    Responses wire). When several offered tools share that part, the one whose full name ends
    in the scenario's (or that the scenario's ends in) is taken; if that is not exactly one,
    none is.
    """
    if name in tools:
        return ToolCall(name=name, arguments=dict(arguments))
    base = name.rsplit("__", 1)[-1]
    found = [n for n in tools if n.rsplit("__", 1)[-1] == base]
    if len(found) > 1:  # several servers offer it: the scenario's server part decides
        found = [n for n in found if n.endswith(name) or name.endswith(n)]
    if len(found) != 1:
        return None
    return ToolCall(name=found[0], arguments=dict(arguments))


_CWD = re.compile(r"<cwd>(.*?)</cwd>", re.DOTALL)


def cwd_of(entries: Sequence[Entry]) -> str | None:
    """The working directory a CLI announced in injected context (Codex's ``<cwd>``), if any."""
    for entry in reversed(entries):
        if entry.kind == "context":
            match = _CWD.search(entry.text)
            if match:
                return match.group(1).strip()
    return None
