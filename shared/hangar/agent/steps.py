"""The steps of a turn that may change the working tree, read from the run log's lines as the
driver writes them (:mod:`hangar.agent.driver`). Standard library only; pure.

A step is the result of an edit or shell tool: Claude Code's ``Write``, ``Edit``,
``MultiEdit``, ``NotebookEdit``, ``Bash`` and ``BashOutput`` (a ``tool_result`` block in a
``user`` line, named by the ``tool_use`` of an earlier ``assistant`` line), and Codex's
``file_change`` and ``command_execution`` items (``item.completed`` lines, as
:mod:`hangar.agent.codexlive` writes them). :meth:`Steps.see` answers each line with the steps
it ends: ``(tool, paths)``, ``paths`` the files an edit names (None: look at the whole tree).
"""

import json

EDITS = {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path",
         "NotebookEdit": "notebook_path"}  # fmt: skip
SHELLS = ("Bash", "BashOutput")
CODEX = {"file_change": "fileChange", "command_execution": "commandExecution"}
_OPENINGS = (b'{"type":"assistant"', b'{"type":"user"', b'{"type":"item.completed"')
MAX_LINE = 4 << 20
"""A longer line is not read for steps (a step missed is one tree fewer, never a wrong one)."""


class Steps:
    """The tool calls seen so far (Claude Code's ``tool_use`` ids), to name their results."""

    def __init__(self):
        self.calls = {}  # tool_use id -> (name, paths)

    def see(self, line):
        """The steps ``line`` ends: a list of ``(tool, paths or None)``."""
        if not line.startswith(_OPENINGS) or len(line) > MAX_LINE:
            return []
        try:
            event = json.loads(line)
        except ValueError:
            return []
        if not isinstance(event, dict):
            return []
        kind = event.get("type")
        if kind == "item.completed":
            item = event.get("item") if isinstance(event.get("item"), dict) else {}
            tool = CODEX.get(item.get("type"))
            if tool is None:
                return []
            changes = item.get("changes") if isinstance(item.get("changes"), list) else []
            paths = [c["path"] for c in changes if isinstance(c, dict)
                     and isinstance(c.get("path"), str)] or None  # fmt: skip
            return [(tool, paths if tool == "fileChange" else None)]
        message = event.get("message") if isinstance(event.get("message"), dict) else {}
        blocks = message.get("content") if isinstance(message.get("content"), list) else []
        found = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if kind == "assistant" and block.get("type") == "tool_use":
                name, given = block.get("name"), block.get("input")
                if name in EDITS or name in SHELLS:
                    path = given.get(EDITS.get(name, "")) if isinstance(given, dict) else None
                    self.calls[block.get("id")] = (name, [path] if isinstance(path, str) else None)
            elif kind == "user" and block.get("type") == "tool_result":
                call = self.calls.pop(block.get("tool_use_id"), None)
                if call is not None:
                    found.append(call)
        return found
