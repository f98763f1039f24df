"""The rules of the ``deny-risky`` permission mode: what an agent is never allowed to do unasked
and is denied outright, each rule with a name the denial's message shows. Everything a rule does
not name is asked, as in ``ask`` mode.

A rule reads what the tool would do as text: a shell command's words (Claude Code's ``Bash``,
Codex's ``commandExecution``), or the path a file tool names (``Read``, ``Write``, ``Edit``, ...).
The default rules (:data:`DEFAULT_RULES`) and the network rule (:func:`outside_hosts`) apply to
every environment; an environment adds its own (``deny_rules``: NAME -> a regular expression
searched in that text) and names the hosts its agents may reach (``allowed_hosts``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hangar.errors import InvalidInput

DEFAULT_RULES: dict[str, str] = {
    "force-push": r"\bgit\b[^\n;&|]*\bpush\b[^\n;&|]*(\s--force(-with-lease)?\b|\s-[a-zA-Z]*f\b|\s\+\S)",
    # rm with a recursive and a force option (together or apart, short or long) and a target
    # outside the repo's folder: the root, HOME, a parent folder
    "rm-outside-repo": r"\brm\b(?=[^\n;&|]*\s(-[a-zA-Z]*[rR]|--recursive\b))"
                       r"(?=[^\n;&|]*\s(-[a-zA-Z]*f|--force\b))"
                       r"[^\n;&|]*\s[\"']?(/(?!workspace/)|~|\$HOME|\$\{HOME\}|\.\.(/|\s|$))",
    "credential-files": r"(\.ssh/|\.aws/credentials|\.netrc\b|\.git-credentials|/etc/shadow|"
                        r"\bid_(rsa|ed25519|ecdsa)\b|\.config/gcloud|\.kube/config|"
                        r"\.docker/config\.json|\.npmrc\b|\.pypirc\b)",
}
"""Each default rule's name and the regular expression searched in what the tool would do."""
NETWORK_RULE = "network-outside-allowed-hosts"
_NETWORK_TOOLS = re.compile(r"\b(curl|wget|nc|ncat|ssh|scp|sftp|rsync|telnet|ftp|http)\b")
_HOSTS = re.compile(r"\b[a-z][a-z0-9+.-]*://(?:[^@/\s]*@)?([^/:\s\"'?#]+)|\b[\w.-]+@([\w.-]+\.\w+)")
_PATH_KEYS = ("file_path", "path", "notebook_path")
MAX_RULES = 50


@dataclass(frozen=True)
class Denial:
    """The rule that denies a request, and what the agent is told."""

    rule: str
    message: str


def check_rules(rules: Mapping[str, str]) -> dict[str, str]:
    """An environment's own rules, checked: NAME (a slug) -> a regular expression that
    compiles; InvalidInput naming the first bad one."""
    if len(rules) > MAX_RULES:
        raise InvalidInput(f"at most {MAX_RULES} deny rules", field="deny_rules")
    for name, pattern in rules.items():
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", name):
            raise InvalidInput(f"deny rule name {name!r} must be a lowercase slug",
                               field="deny_rules")  # fmt: skip
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidInput(f"deny rule {name}: {pattern!r} is not a regular expression: "
                               f"{exc}", field="deny_rules") from None  # fmt: skip
    return dict(rules)


def text_of(tool_input: Any) -> str:
    """What the tool would do, as the rules read it: a command's words, else the paths it
    names (one per line)."""
    if not isinstance(tool_input, dict):
        return ""
    command = tool_input.get("command")
    if isinstance(command, list):
        command = " ".join(str(c) for c in command)
    parts = [command] if isinstance(command, str) else []
    parts += [str(tool_input[k]) for k in _PATH_KEYS if isinstance(tool_input.get(k), str)]
    return "\n".join(parts)


def outside_hosts(text: str, allowed: Sequence[str]) -> list[str]:
    """The hosts a network tool in ``text`` names that ``allowed`` does not (a name matches
    itself and its subdomains)."""
    if not _NETWORK_TOOLS.search(text):
        return []
    hosts = {h.lower().rstrip(".") for pair in _HOSTS.findall(text) for h in pair if h}
    allow = [a.lower().rstrip(".") for a in allowed]
    return sorted(h for h in hosts if not any(h == a or h.endswith("." + a) for a in allow))


def denial(tool_input: Any, own_rules: Mapping[str, str] = {},
           allowed_hosts: Sequence[str] = ()) -> Denial | None:  # fmt: skip
    """The first rule that denies what ``tool_input`` would do (the defaults and the
    environment's own, then the network rule), or None: ask a person."""
    text = text_of(tool_input)
    if not text:
        return None
    for name, pattern in {**DEFAULT_RULES, **own_rules}.items():
        if re.search(pattern, text):
            return Denial(name, f"denied by hangar's rule {name} (permission mode deny-risky)")
    hosts = outside_hosts(text, allowed_hosts)
    if hosts:
        return Denial(NETWORK_RULE, f"denied by hangar's rule {NETWORK_RULE}: "
                      f"{', '.join(hosts)} not among the environment's allowed hosts")  # fmt: skip
    return None
