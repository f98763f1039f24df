"""Codex's live turns: a pure adapter between the steering driver and ``codex app-server``.

Standard library only (imported inside the sandbox by the driver). It does no I/O: the driver
writes what :meth:`CodexLive.begin` returns to the app-server's standard input, passes every line
the app-server writes to :meth:`CodexLive.output`, appends the first list it returns to the run
log and writes the second back to the app-server.

The app-server speaks JSON-RPC, one object a line (no ``jsonrpc`` member). The conversation::

    -> initialize {clientInfo, capabilities}   -> initialized (a notification)
    -> thread/start | thread/resume | thread/fork   {cwd, model, approvalPolicy: "never",
                                                     sandbox: "danger-full-access"}
    <- its answer: result.thread.id             -> turn/start {threadId, input: [text]}
    <- answer: result.turn.id; turn/started, item/*, thread/tokenUsage/updated, turn/completed
    -> turn/steer {threadId, input, expectedTurnId}    -> turn/interrupt {threadId, turnId}

What Codex 0.171.0 does (checked against the real CLI): ``turn/steer`` with no turn running is
refused (``no active turn to steer``), so a steer needs the running turn's id, which the
``turn/start`` answer gives (before ``turn/started``; a steer sent then is taken); an accepted
steer lands in the turn's next model request, and one taken after the turn's last answer but
before its end makes the turn go on with another request. ``turn/interrupt`` is answered ``{}``
and the turn ends (in about 0.2 s) with ``turn/completed`` whose status is ``interrupted``. On
``thread/resume`` and ``thread/fork`` the app-server replays the thread's stored token totals (a
``thread/tokenUsage/updated`` naming an old turn) before any turn of this process.

The run log gets the lines ``codex exec --json`` writes for the same notifications
(``thread.started`` once the thread's id is known, ``turn.started``, ``item.started`` /
``item.completed`` with ``item_N`` ids, ``turn.completed`` with usage, ``turn.failed``,
``error``), so the control plane parses a live turn as it parses a one-shot one. Deviations,
on purpose: each ``turn.completed`` carries the token totals of this process's turns only (the
stored totals a resume or fork replays are subtracted; ``codex exec resume`` prints the
thread's totals since its start), and a refusal that ends the run (``failure``) is logged as an
``error`` line. An interrupted turn, like in ``codex exec``, writes no ``turn.completed``.

A steer is never lost: one the app-server refuses is sent again, to the running turn if that
is another than it named, else (the turn ended as it came, or refused it) as the text of the
next ``turn/start``, right away or once the running turn ends (texts waiting together go in one
``turn/start``, blank-line separated); ``idle`` stays False while a steer awaits its answer or a
text waits, so the driver does not end the hangar turn under it.

Requests from the app-server (approvals, questions to a person, client tools) are answered at
once: declined, or with an error, so the app-server never waits on this client.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

JSON = Dict[str, Any]

# Streaming deltas hangar's log does not keep: the app-server need not write them at all.
QUIET = [
    "item/agentMessage/delta",
    "item/plan/delta",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/summaryPartAdded",
    "item/reasoning/textDelta",
    "item/commandExecution/outputDelta",
    "item/fileChange/outputDelta",
    "account/rateLimits/updated",
]

# Answers to requests the app-server may make of its client: a refusal in each one's own terms.
ANSWERS: Dict[str, JSON] = {
    "item/commandExecution/requestApproval": {"decision": "decline"},
    "item/fileChange/requestApproval": {"decision": "decline"},
    "execCommandApproval": {"decision": "denied"},
    "applyPatchApproval": {"decision": "denied"},
    "mcpServer/elicitation/request": {"action": "decline"},
    "item/tool/requestUserInput": {"answers": {}},
    "item/tool/call": {"contentItems": [], "success": False},
}

# exec's usage fields, in its order, from the app-server's TokenUsageBreakdown.
USAGE = (
    ("input_tokens", "inputTokens"),
    ("cached_input_tokens", "cachedInputTokens"),
    ("cache_write_input_tokens", "cacheWriteInputTokens"),
    ("output_tokens", "outputTokens"),
    ("reasoning_output_tokens", "reasoningOutputTokens"),
)

STATUS = {"inProgress": "in_progress", "completed": "completed", "failed": "failed",
          "declined": "declined"}  # fmt: skip


APPROVALS = {"item/commandExecution/requestApproval": "commandExecution",
             "item/fileChange/requestApproval": "fileChange"}
"""The app-server's approval requests, by the tool each names (asked when the turn asks)."""


def line(message: JSON) -> bytes:
    """One JSON line, as the app-server and the run log both take it."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def text_input(text: str) -> List[JSON]:
    return [{"type": "text", "text": text, "text_elements": []}]


def _dict(value: Any) -> JSON:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> List[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _error_message(error: Any, default: str) -> str:
    """``message (additionalDetails)`` of an app-server error, as exec words it."""
    error = _dict(error)
    message = _str(error.get("message")) or default
    details = _str(error.get("additionalDetails"))
    return f"{message} ({details})" if details else message


def exec_item(item: JSON) -> Optional[JSON]:
    """The ``codex exec`` form of an app-server thread item, without its id; None for kinds exec
    does not write (the user's own messages among them)."""
    kind = item.get("type")
    status = STATUS.get(str(item.get("status")), "in_progress")
    if kind == "agentMessage":
        return {"type": "agent_message", "text": _str(item.get("text")) or ""}
    if kind == "reasoning":
        text = "\n".join(p for p in _list(item.get("summary")) if isinstance(p, str))
        return {"type": "reasoning", "text": text} if text.strip() else None
    if kind == "commandExecution":
        code = item.get("exitCode")
        return {"type": "command_execution", "command": _str(item.get("command")) or "",
                "aggregated_output": _str(item.get("aggregatedOutput")) or "",
                "exit_code": code if isinstance(code, int) else None,
                "status": status}  # fmt: skip
    if kind == "fileChange":
        changes = _list(item.get("changes"))
        return {"type": "file_change",
                "changes": [{"path": _str(_dict(c).get("path")) or "",
                             "kind": _str(_dict(_dict(c).get("kind")).get("type")) or "update"}
                            for c in changes],
                "status": "failed" if status == "declined" else status}  # fmt: skip
    if kind == "mcpToolCall":
        result, error = item.get("result"), item.get("error")
        return {"type": "mcp_tool_call", "server": _str(item.get("server")) or "",
                "tool": _str(item.get("tool")) or "", "arguments": item.get("arguments"),
                "result": None if not isinstance(result, dict) else {
                    "content": result.get("content") or [],
                    "structured_content": result.get("structuredContent")},
                "error": None if not isinstance(error, dict) else {
                    "message": _str(error.get("message")) or ""},
                "status": status}  # fmt: skip
    if kind == "webSearch":
        return {"type": "web_search", "id": _str(item.get("id")) or "",
                "query": _str(item.get("query")) or "",
                "action": item.get("action") or "other"}  # fmt: skip
    return None


class CodexLive:
    """One ``codex app-server`` process's conversation, for one hangar turn (which may span
    several app-server turns: a steer that comes as a turn ends continues in a new one).

    ``options``: ``cwd`` (the thread's folder), ``model`` (None: Codex's own default),
    ``conversation_id`` (resume that thread) or ``fork_from`` (fork it); neither starts a new
    thread. Every method returns whole lines, each ending in a newline; none raises on what the
    app-server writes (a line that is not a JSON object is ignored).

    State, read by the driver: ``idle`` (a turn was started, none runs now, none is being
    started, no steer awaits its answer and no text waits to start one), ``unsent`` (texts of
    steers and follow-ups taken but not written to the app-server yet: they wait for the running
    turn to end; if the app-server exits first they were not passed on), ``failure`` (why the
    app-server cannot go on: it refused the handshake, the thread or a turn) and
    ``interrupted`` (the last turn ended because of an interrupt).
    """

    def __init__(self, options: Dict[str, Any]) -> None:
        self.options = options
        self.failure: Optional[str] = None
        self.interrupted = False
        self.thread_id: Optional[str] = None
        self._message = ""
        self._next_id = 0
        # request id -> (method, the text it carries, the turn a steer named)
        self._pending: Dict[int, Tuple[str, str, str]] = {}
        self._turn: Optional[str] = None  # the running turn's id, once known
        self._starting = False  # a turn/start awaits its answer
        self._ended: List[str] = []  # ids of turns that ended
        self._ours: List[str] = []  # ids of turns this process started
        self._queued: List[str] = []  # texts to start a turn with once the running one ends
        self._began = False
        self._items: Dict[str, str] = {}  # the app-server's item id -> exec's, while started
        self._next_item = 0
        self._plan: Optional[Tuple[str, List[JSON]]] = None  # the running todo list
        self._baseline: Dict[str, int] = {}
        self._total: Dict[str, int] = {}
        self.asks: List[JSON] = []  # approvals asked for, not yet published by the driver
        self._approvals: Dict[str, Any] = {}  # approval id -> the request's JSON-RPC id

    @property
    def idle(self) -> bool:
        steering = any(request[0] == "turn/steer" for request in self._pending.values())
        running = self._turn is not None or self._starting or bool(self._queued)
        return self._began and not running and not steering

    @property
    def unsent(self) -> List[str]:
        return list(self._queued)

    # The driver's calls.

    def begin(self, message: str) -> List[bytes]:
        """The handshake and the thread's request; the turn with ``message`` is started once
        the thread's id comes back (from :meth:`output`)."""
        self._message = message
        hello = {"clientInfo": {"name": "hangar", "title": None, "version": "1"},
                 "capabilities": {"optOutNotificationMethods": QUIET}}  # fmt: skip
        # "untrusted" is the policy that asks most in 0.171.0, yet Codex still runs the
        # commands it deems safe (ls, cat, ...) without asking.
        policy = "untrusted" if self.options.get("asks") else "never"
        params: JSON = {"cwd": self.options.get("cwd"), "model": self.options.get("model"),
                        "approvalPolicy": policy, "sandbox": "danger-full-access"}  # fmt: skip
        if self.options.get("conversation_id"):
            method = "thread/resume"
            params.update(threadId=self.options["conversation_id"], excludeTurns=True)
        elif self.options.get("fork_from"):
            method = "thread/fork"
            params.update(threadId=self.options["fork_from"], excludeTurns=True)
        else:
            method = "thread/start"
        return [self._request("initialize", hello), line({"method": "initialized"}),
                self._request(method, params)]  # fmt: skip

    def steer(self, text: str) -> Optional[List[bytes]]:
        """``turn/steer`` into the running turn; None while a turn is being started and its id
        is not known yet (ask again after the next output line). When idle it is exactly
        :meth:`follow_up`."""
        if self.idle:
            return self.follow_up(text)
        if self._turn is None or self.failure is not None:
            return None
        return [self._steer(text, self._turn)]

    def interrupt(self) -> Optional[List[bytes]]:
        """``turn/interrupt`` of the running turn; None while its id is not known yet; no lines
        when no turn runs. Queued follow-ups are kept: they are messages that came."""
        if self._turn is None:
            return [] if self.idle or self.failure else None
        params = {"threadId": self.thread_id, "turnId": self._turn}
        return [self._request("turn/interrupt", params)]

    def follow_up(self, text: str) -> List[bytes]:
        """A new ``turn/start`` with ``text`` in the same thread. Meant for when ``idle``; while
        a turn runs or starts, ``text`` waits for it to end instead (no lines now)."""
        if self.thread_id is None or self._turn is not None or self._starting:
            self._queued.append(text)
            return []
        return [self._start(text)]

    def output(self, raw: bytes) -> Tuple[List[bytes], List[bytes]]:
        """One line of the app-server's output -> (run log lines, lines to write to it)."""
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            return [], []
        if not isinstance(message, dict):
            return [], []
        log: List[bytes] = []
        writes: List[bytes] = []
        method = _str(message.get("method"))
        if method in APPROVALS and "id" in message and self.options.get("asks"):
            self._ask(message["id"], method, _dict(message.get("params")))
        elif method is not None and "id" in message:
            writes.append(self._answer(message["id"], method))
        elif method is not None:
            self._notification(method, _dict(message.get("params")), log, writes)
        elif isinstance(message.get("id"), int) and message["id"] in self._pending:
            self._response(message, log, writes)
        return log, writes

    def decide(self, approval_id: str, allow: bool, message: str = "") -> Optional[List[bytes]]:
        """The answer to approval ``approval_id`` (None: no such approval waits). Codex's
        approval answer carries no message: a denial is ``decline``."""
        request_id = self._approvals.pop(approval_id, None)
        if request_id is None:
            return None
        return [line({"id": request_id, "result": {"decision": "accept" if allow else "decline"}})]

    def _ask(self, request_id: Any, method: str, params: JSON) -> None:
        approval_id = "codex-%s" % (request_id,)
        self._approvals[approval_id] = request_id
        shown = {k: v for k, v in params.items() if k not in ("threadId", "turnId")}
        self.asks.append({"id": approval_id, "tool": APPROVALS[method], "input": shown})

    # Requests and their answers.

    def _request(self, method: str, params: JSON, text: str = "", turn: str = "") -> bytes:
        self._next_id += 1
        self._pending[self._next_id] = (method, text, turn)
        return line({"id": self._next_id, "method": method, "params": params})

    def _start(self, text: str) -> bytes:
        self._starting = True
        self.interrupted = False
        params = {"threadId": self.thread_id, "input": text_input(text)}
        return self._request("turn/start", params, text)

    def _steer(self, text: str, turn: str) -> bytes:
        params = {"threadId": self.thread_id, "input": text_input(text), "expectedTurnId": turn}
        return self._request("turn/steer", params, text, turn)

    def _answer(self, request_id: Any, method: str) -> bytes:
        result = ANSWERS.get(method)
        if result is not None:
            return line({"id": request_id, "result": result})
        error = {"code": -32601, "message": f"hangar does not handle {method}"}
        return line({"id": request_id, "error": error})

    def _response(self, message: JSON, log: List[bytes], writes: List[bytes]) -> None:
        method, text, named = self._pending.pop(message["id"])
        error = message.get("error")
        result = _dict(message.get("result"))
        if method == "turn/steer":
            if error is not None:
                writes.extend(self._resend(text, named))
        elif method == "turn/start":
            self._starting = False
            turn = _str(_dict(result.get("turn")).get("id"))
            if error is not None or turn is None:
                self._fail(_error_message(error, "the app-server refused turn/start"), log)
            else:
                self._ours.append(turn)
                if turn not in self._ended:
                    self._turn = turn
        elif method in ("initialize", "thread/start", "thread/resume", "thread/fork"):
            thread = _str(_dict(result.get("thread")).get("id"))
            if error is not None or (method != "initialize" and thread is None):
                self._fail(_error_message(error, f"the app-server refused {method}"), log)
            elif thread is not None:
                self.thread_id = thread
                log.append(line({"type": "thread.started", "thread_id": thread}))
                self._began = True
                writes.append(self._start(self._message))
        # turn/interrupt: refused only when the turn is over already, which turn/completed says.

    def _resend(self, text: str, named: str) -> List[bytes]:
        """A refused steer: into the turn running now if that is another one than it named;
        else (refused by the turn it named, or no turn runs) it starts the next turn."""
        if self._turn is not None and self._turn != named:
            return [self._steer(text, self._turn)]
        return self.follow_up(text)

    def _fail(self, why: str, log: List[bytes]) -> None:
        if self.failure is None:
            self.failure = why
            log.append(line({"type": "error", "message": why}))

    # Notifications.

    def _notification(self, method: str, params: JSON, log: List[bytes], out: List[bytes]) -> None:
        thread = _str(params.get("threadId"))
        if thread is not None and self.thread_id is not None and thread != self.thread_id:
            return  # another thread's (a sub-agent's): not this turn's
        if method == "turn/started":
            turn = _str(_dict(params.get("turn")).get("id"))
            if turn is not None and turn not in self._ended:
                self._turn = turn
                if turn not in self._ours:
                    self._ours.append(turn)
            log.append(line({"type": "turn.started"}))
        elif method == "turn/completed":
            self._turn_completed(_dict(params.get("turn")), log, out)
        elif method in ("item/started", "item/completed"):
            self._item(method == "item/started", _dict(params.get("item")), log)
        elif method == "thread/tokenUsage/updated":
            self._usage(params)
        elif method == "turn/plan/updated":
            self._todo(params, log)
        elif method == "error":
            log.append(line({"type": "error",
                             "message": _error_message(params.get("error"), "error")}))  # fmt: skip
        elif method in ("warning", "configWarning", "deprecationNotice", "model/rerouted"):
            self._warning(method, params, log)

    def _turn_completed(self, turn: JSON, log: List[bytes], out: List[bytes]) -> None:
        turn_id = _str(turn.get("id"))
        if turn_id is not None:
            self._ended.append(turn_id)
        if turn_id is not None and turn_id != self._turn and self._turn is not None:
            return  # an older turn's late word
        self._turn = None
        if self._plan is not None:
            plan_id, todo = self._plan
            self._plan = None
            log.append(self._event("item.completed", plan_id, {"type": "todo_list", "items": todo}))
        for item in _list(turn.get("items")):
            if isinstance(item, dict) and item.get("id") in self._items:
                self._item(False, item, log)
        status = turn.get("status")
        self.interrupted = status == "interrupted"
        if status == "completed":
            log.append(line({"type": "turn.completed", "usage": self._usage_totals()}))
        elif status == "failed":
            message = _error_message(turn.get("error"), "turn failed")
            log.append(line({"type": "turn.failed", "error": {"message": message}}))
        if self._queued and self.failure is None:
            texts, self._queued = self._queued, []
            out.append(self._start("\n\n".join(texts)))

    def _item(self, started: bool, item: JSON, log: List[bytes]) -> None:
        mapped = exec_item(item)
        if mapped is None or (started and item.get("type") in ("agentMessage", "reasoning")):
            return
        raw = _str(item.get("id")) or ""
        if started:
            item_id = self._items.setdefault(raw, self._new_item_id())
        else:
            item_id = self._items.pop(raw, "") or self._new_item_id()
        log.append(self._event("item.started" if started else "item.completed", item_id, mapped))

    def _todo(self, params: JSON, log: List[bytes]) -> None:
        plan = _list(params.get("plan"))
        todo = [{"text": _str(_dict(s).get("step")) or "",
                 "completed": _dict(s).get("status") == "completed"} for s in plan]  # fmt: skip
        kind = "item.updated" if self._plan is not None else "item.started"
        plan_id = self._plan[0] if self._plan is not None else self._new_item_id()
        self._plan = (plan_id, todo)
        log.append(self._event(kind, plan_id, {"type": "todo_list", "items": todo}))

    def _warning(self, method: str, params: JSON, log: List[bytes]) -> None:
        if method == "model/rerouted":
            message = "model rerouted: %s -> %s (%s)" % (
                params.get("fromModel"), params.get("toModel"), params.get("reason"))
        else:
            message = _str(params.get("message")) or _str(params.get("summary")) or method
            details = _str(params.get("details"))
            message = f"{message} ({details})" if details else message
        log.append(self._event("item.completed", self._new_item_id(),
                               {"type": "error", "message": message}))  # fmt: skip

    def _new_item_id(self) -> str:
        self._next_item += 1
        return f"item_{self._next_item - 1}"

    @staticmethod
    def _event(kind: str, item_id: str, item: JSON) -> bytes:
        return line({"type": kind, "item": {"id": item_id, **item}})

    # Usage.

    def _usage(self, params: JSON) -> None:
        total = _dict(_dict(params.get("tokenUsage")).get("total"))
        counts = {name: total[key] for name, key in USAGE if isinstance(total.get(key), int)}
        if params.get("turnId") in self._ours:
            self._total = counts
        else:  # stored totals a resume or fork replays: not this process's
            self._baseline, self._total = counts, counts

    def _usage_totals(self) -> Dict[str, int]:
        return {name: max(0, self._total.get(name, 0) - self._baseline.get(name, 0))
                for name, _ in USAGE}  # fmt: skip
