"""A turn's trees (spec 002 "Trees"), as the two things that run a turn record them: the driver
of a live turn (:mod:`hangar.agent.driver`: the start, each edit or shell step, the end) and the
supervisor of a one-shot turn's run (:mod:`hangar.agent.run`: the start and the end only, the
harness's output being the agent's to write).

:func:`open_trees` makes the turn's :class:`~hangar.agent.trees.Trees` as the request asks;
:meth:`TurnTrees.record` hashes one step, never raising (a failure stops the trees, not the
turn); :meth:`TurnTrees.write_patches` writes ``steps.jsonl``, each step's patch against the
turn's first tree, which the control plane seals with the turn (:mod:`hangar.sessions.steps`).

Standard library only: shipped into sandboxes with the driver and the run supervisor.
"""

import base64
import json
import os
import sys

PATCH_BYTES = 1 << 20
"""The most of one step's patch kept (past it the step is marked cut)."""
PATCHES_BYTES = 16 << 20
"""The most of all a turn's patches kept."""


def open_trees(options, scratch):
    """The turn's :class:`~hangar.agent.trees.Trees` as ``options`` asks (``{"repo": DIR,
    "slow_ms": MS}``), its git folder in ``scratch`` (made here, mode 0700); None when not asked
    or the repo has none (said on standard error)."""
    if not isinstance(options, dict) or not isinstance(options.get("repo"), str):
        return None
    from hangar.agent.trees import Trees

    try:
        os.makedirs(scratch, 0o700, exist_ok=True)
        return Trees(options["repo"], scratch, float(options.get("slow_ms") or 2000.0))
    except Exception as exc:
        sys.stderr.write("hangar: no trees this turn: %s\n" % exc)
        return None


class TurnTrees:
    """The steps one turn recorded, over ``trees`` (None: this turn records none)."""

    def __init__(self, trees):
        self.trees = trees
        self.recorded = []
        self.stopped = trees is None

    def record(self, tool, paths=None):
        """Hash the working tree after step ``tool`` (``paths``: the files an edit names).
        Returns the ``hangar.tree`` line when one was recorded, else None. Anything going
        wrong stops the trees for the rest of the turn (said on standard error), never the
        turn."""
        if self.stopped:
            return None
        try:
            line = self.trees.record(tool, paths)
        except Exception as exc:  # hashing must never end the turn
            sys.stderr.write("hangar: trees stopped: %s\n" % exc)
            self.stopped = True
            return None
        if line is not None:
            self.recorded.append(line)
        return line

    def write_patches(self, path):
        """Each recorded step's patch against the turn's first tree, as JSON lines in ``path``
        (``{"step", "tool", "tree", "ms", "skipped", "cut", "patch": BASE64}``; the first
        step's patch is empty), at most :data:`PATCH_BYTES` a step and :data:`PATCHES_BYTES`
        in all (past that a step's patch is cut, saying so). Written whole (a temporary file
        renamed) or not at all; nothing when no tree was recorded. OSError if it cannot be
        written."""
        recorded = self.recorded
        if self.trees is None or not recorded or "tree" not in recorded[0]:
            return
        start, left, lines = recorded[0]["tree"], PATCHES_BYTES, []
        for line in recorded:
            patch, cut = b"", False
            if "tree" in line and line["tree"] != start:
                try:
                    patch, cut = self.trees.patch(start, line["tree"], min(PATCH_BYTES, left))
                except Exception as exc:  # one step without its patch, never the turn
                    sys.stderr.write("hangar: no patch for step %s: %s\n" % (line.get("step"),
                                                                             exc))
                    cut = True
            left -= len(patch)
            fields = {k: line.get(k) for k in ("step", "tool", "tree", "ms", "skipped")}
            fields.update(cut=cut, patch=base64.b64encode(patch).decode())
            lines.append(json.dumps(fields, separators=(",", ":")) + "\n")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join(lines))
        os.replace(tmp, path)
