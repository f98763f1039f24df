"""The control plane's side of a live turn's command channel (:mod:`hangar.agent.commands`):
commands signed here and landed in the run's control folder by one exec as hangar's user, and
the driver's signed answers read back from a byte offset. The key never enters the sandbox
through here: only signed commands do (the driver got its copy when it started)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from hangar.agent import commands
from hangar.errors import SandboxError, TurnEnded
from hangar.processes import run_dir
from hangar.sandboxes import Sandboxes, SandboxUser

Kind = Literal["steer", "interrupt", "decide"]
_CLOSED, _TAKEN = 3, 5
_LAND = f"""
umask 077
cd "$1/ctl" 2>/dev/null || exit {_CLOSED}
cat > "tmp/$2.json" || {{ rm -f "tmp/$2.json"; exit 1; }}
ln "tmp/$2.json" "in/$3.json" 2>/dev/null
code=$?
rm -f "tmp/$2.json"
[ $code -eq 0 ] && exit 0
[ -d in ] || exit {_CLOSED}
[ -e "in/$3.json" ] && exit {_TAKEN}
exit 1
"""
_READ = 'tail -c +"$(($2 + 1))" "$1/ctl/acks" 2>/dev/null | head -c "$3"; exit 0'


@dataclass(frozen=True)
class Answer:
    """The driver's signed answer to command ``seq``: ``delivered``, ``refused`` or
    ``turn_ended`` (the command did not reach the agent: the turn was over), and why."""

    seq: int | None
    id: str | None
    status: str
    detail: str


def land(sandboxes: Sandboxes, sandbox_id: str, run_id: str, key: bytes, seq: int,
         kind: Kind, body: dict[str, Any]) -> str:  # fmt: skip
    """Land command ``seq`` in run ``run_id``'s control folder; its id (its answer names it).
    TurnEnded when the run's inbox is closed (its turn is over: the command changed nothing);
    SandboxError when it could not be landed for another reason, ``seq`` there already
    included."""
    command_id, data = commands.command_bytes(key, run_id, seq, kind, body)
    result = sandboxes.exec(sandbox_id, ["sh", "-c", _LAND, "sh", run_dir(run_id), command_id,
                                         str(seq)], stdin=data, user=SandboxUser.HANGAR)  # fmt: skip
    if result.exit_code == _CLOSED:
        raise TurnEnded("the turn ended before the command reached it", run_id=run_id)
    if not result.ok:
        why = "taken already" if result.exit_code == _TAKEN else "could not be written"
        raise SandboxError(f"command {seq} of run {run_id} {why}", run_id=run_id, seq=seq)
    return command_id


def answers(sandboxes: Sandboxes, sandbox_id: str, run_id: str, key: bytes,
            offset: int = 0) -> tuple[list[Answer], int]:  # fmt: skip
    """The driver's answers in the run's ``acks`` from byte ``offset`` on, and the offset
    after them; lines not signed with ``key`` for this run are skipped (the agent cannot
    answer for the driver)."""
    result = sandboxes.exec(sandbox_id, ["sh", "-c", _READ, "sh", run_dir(run_id), str(offset),
                                         str(commands.MAX_ACK_READ)],
                            user=SandboxUser.HANGAR)  # fmt: skip
    found = commands.parse_acks(key, run_id, result.stdout, offset)
    return [Answer(**a) for a in found.answers], found.offset
