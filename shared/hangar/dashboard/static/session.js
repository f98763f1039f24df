// A session's page: its state and start-up phase, the running turn's progress lines (what
// `hangar-agent progress` wrote), what needs a person (the agent's question with its answers,
// pending approvals, Steer and Stop while a turn runs), actions, the conversation turn by turn
// (transcript.js), the message box, turns, checkpoints, patch, artifacts and a terminal. It re-reads the session by itself (every 2 s
// while it starts, runs a turn or suspends; every 10 s otherwise). An unknown session is a
// not-found page with no controls.

import { call, sessionPath } from "./api.js";
import { openTerminal } from "./terminal.js";
import { createTranscript, outcomeWords, usageWords } from "./transcript.js";
import { busy, bytes, clearError, duration, h, repoCell, saveAs, showError, when } from "./ui.js";

const BUSY = new Set(["starting", "active", "suspending"]);
const UP = new Set(["idle", "active"]);

const UNHAPPY = new Set(["failed", "timed_out", "interrupted"]);

// The page's own styles, next to app.css (loaded once).
function styles() {
  if (document.querySelector("link[data-session-css]")) return;
  const link = h("link", { rel: "stylesheet", href: "/static/session.css", "data-session-css": "" });
  document.head.append(link);
}

// The state as the badge says it: after a turn that failed, timed out or was stopped, the
// turn's outcome, not "idle" (the session is idle in words beside it).
function stateBadge(s) {
  const last = s.turns[s.turns.length - 1];
  const badges = [];
  if (s.state === "idle" && last && last.finished_at && UNHAPPY.has(last.outcome)) {
    const kind = last.outcome === "interrupted" ? "interrupted" : "failed";
    badges.push(h("span", { class: `state ${kind}`, id: "state-badge" }, `turn ${last.n} ${outcomeWords(last.outcome)}`),
      " ", h("span", { class: "muted" }, "the session is idle: a message starts the next turn"));
  } else {
    badges.push(h("span", { class: `state ${s.state}`, id: "state-badge" }, s.state));
  }
  if (s.needs_input) badges.push(" ", h("span", { class: "state needs-input" }, "needs input"));
  if ((s.pending_approvals || []).length) badges.push(" ", h("span", { class: "state needs-input" }, "needs approval"));
  return badges;
}

function diffView(text) {
  const pre = h("pre", { class: "diff", id: "patch-view" });
  for (const line of text.split("\n")) {
    let kind = "";
    if (line.startsWith("diff --git") || line.startsWith("+++") || line.startsWith("---")) kind = "file";
    else if (line.startsWith("@@")) kind = "hunk";
    else if (line.startsWith("+")) kind = "add";
    else if (line.startsWith("-")) kind = "del";
    pre.append(kind ? h("span", { class: kind }, line) : line, "\n");
  }
  return pre;
}

// Fill `box` with render()'s nodes when `key` (null: empty) differs from the last one it was
// filled for; otherwise leave it (and the focus in it) as it is.
const keys = new WeakMap();
function keyed(box, key, render) {
  const said = key === null ? "" : JSON.stringify(key);
  if (keys.get(box) === said) return;
  keys.set(box, said);
  box.replaceChildren(...(key === null ? [] : render()));
}

export function renderSession(main, name, ctx) {
  styles();
  let stopped = false;
  let timer = null;
  let session = null;
  let events = null; // the turn whose progress lines are read: {turn, controller}
  let artifactsFor = null;
  let terminal = null;
  let liveTurn = null; // the running turn Steer is meant for

  const fail = (err) => ctx.fail(err);
  const heading = h("h1", {}, name);
  const subtitle = h("p", { class: "muted" });
  const statusLines = h("div", { "aria-live": "polite" });
  const questionBox = h("div");
  const status = h("div", { id: "status" }, statusLines, questionBox);
  const facts = h("dl", { class: "facts" });

  const resume = h("button", { type: "button" }, "Resume");
  const suspend = h("button", { type: "button" }, "Suspend");
  const fork = h("button", { type: "button" }, "Fork");
  const archive = h("button", { type: "button" }, "Archive");
  const forked = h("div");

  const idle = h("input", { id: "idle-minutes", type: "number", step: "any", size: 8 }); // the API checks the range
  const saveIdle = h("button", { type: "submit" }, "Save");
  const idleForm = h("form", { class: "inline" },
    h("label", { for: "idle-minutes" }, "Idle minutes"), idle, saveIdle,
    h("span", { class: "muted" }, "0 keeps the session up"));

  const message = h("textarea", { id: "message", rows: 3 });
  const send = h("button", { type: "submit", class: "primary" }, "Send");
  const messageForm = h("form", {}, h("label", { for: "message" }, "Message"), message,
    h("div", { class: "actions" }, send));

  // What needs a person: pending approvals, and Steer and Stop while a turn runs.
  const approvals = h("div", { id: "approvals" });
  const steerText = h("textarea", { id: "steer", rows: 2 });
  const steer = h("button", { type: "submit", class: "primary" }, "Steer");
  const stop = h("button", { type: "button", class: "danger" }, "Stop");
  const steerForm = h("form", { id: "live-turn", hidden: true },
    h("label", { for: "steer" }, "Steer"),
    h("p", { class: "muted", id: "live-turn-note" }), steerText,
    h("div", { class: "actions" }, steer, stop));

  // The progress lines the agent wrote (`hangar-agent progress`): the latest in words, all of
  // them folded under it. They stay after the turn ends, until the next turn's come.
  const progressLatest = h("p", { "aria-live": "polite" });
  const progressAll = h("ol", { class: "progress-lines" });
  const progressSummary = h("summary", {});
  const progressMore = h("details", { hidden: true }, progressSummary, progressAll);
  const progressBox = h("section", { class: "notice progress-box", id: "progress", hidden: true },
    progressLatest, progressMore);

  const transcript = createTranscript(name, { fail, download: (a) => downloadArtifact(a) });
  const turns = h("tbody");
  const checkpoints = h("tbody");
  const turnsTable = h("table", { id: "turns", class: "cards" }, h("thead", {}, h("tr", {},
    ["#", "Message", "Outcome", "Summary", "Started", "Took", "Usage"].map((t) => h("th", { scope: "col" }, t)))), turns);
  const turnsEmpty = h("p", { class: "muted", hidden: true }, "No turns yet.");
  const checkpointsTable = h("table", { id: "checkpoints", class: "cards" }, h("thead", {}, h("tr", {},
    ["When", "Reason", "Size", "Restore", "Warnings"].map((t) => h("th", { scope: "col" }, t)))), checkpoints);
  const checkpointsEmpty = h("p", { class: "muted", hidden: true });
  const restoreNote = h("div");
  const viewPatch = h("button", { type: "button" }, "View patch");
  const downloadPatch = h("button", { type: "button" }, "Download patch");
  const patchBox = h("div");
  const artifacts = h("ul", { id: "artifacts" });

  const shell = h("button", { type: "button" }, "Shell");
  const agent = h("button", { type: "button" }, "Talk to the agent here");
  const closeTerminal = h("button", { type: "button", hidden: true }, "Close terminal");
  const terminalStatus = h("span", { class: "muted", id: "terminal-status", "aria-live": "polite" });
  const terminalBox = h("div", { class: "terminal-box", id: "terminal", hidden: true });

  main.classList.add("session-page");
  main.append(
    heading, subtitle, status, progressBox, approvals, steerForm, facts,
    h("div", { class: "actions" }, resume, suspend, fork, archive), forked,
    idleForm,
    h("h2", {}, "Conversation"), transcript.element,
    h("h2", {}, "Message the agent"), messageForm,
    h("h2", {}, "Turns"), turnsEmpty, turnsTable,
    h("h2", {}, "Checkpoints"), restoreNote, checkpointsEmpty, checkpointsTable,
    h("h2", {}, "Patch"), h("div", { class: "actions" }, viewPatch, downloadPatch), patchBox,
    h("h2", {}, "Artifacts"), artifacts,
    h("h2", {}, "Terminal"),
    h("div", { class: "terminal-bar" }, shell, agent, closeTerminal, terminalStatus),
    terminalBox,
  );

  function running(s) {
    const last = s.turns[s.turns.length - 1];
    return last && !last.finished_at ? last : null;
  }

  function renderStatus(s) {
    const parts = [h("p", {}, stateBadge(s))];
    if (s.phase) {
      parts.push(h("p", { class: "notice", id: "phase" },
        `Starting: ${s.phase.step.replaceAll("_", " ")}${s.phase.detail ? ` (${s.phase.detail})` : ""}, since `, when(s.phase.since)));
    }
    if (s.start_error) {
      parts.push(h("p", { class: "notice bad", id: "start-error" },
        `It failed to start (${s.start_error.step}): ${s.start_error.message} (${s.start_error.code}). Resume tries again.`));
    } else if (s.state === "failed" && s.error) {
      parts.push(h("p", { class: "notice bad" }, `${s.error} Resume tries again.`));
    }
    const last = s.turns[s.turns.length - 1];
    if (last && last.outcome === "timed_out") {  // hangar stopped it: its summary says which limit
      parts.push(h("p", { class: "notice bad", id: "timed-out" }, `Turn ${last.n} was stopped: ${last.summary}`));
    } else if (last && last.outcome === "failed") {
      parts.push(h("p", { class: "notice bad", id: "turn-failed" },
        `Turn ${last.n} failed: ${last.summary || "no reason given"}`, last.error_code ? ` (${last.error_code})` : "",
        ". A message starts the next turn."));
    }
    if (s.checkpoint_error) parts.push(h("p", { class: "notice bad" }, `The last checkpoint failed: ${s.checkpoint_error}`));
    statusLines.replaceChildren(...parts);
    // The question, each answer it offered a button that sends it as the next message; made
    // again only when it changes, so a button keeps its focus across the page's re-reads.
    const options = s.question_options || [];
    keyed(questionBox, s.needs_input ? [s.needs_input, options] : null, () => [h("div", { class: "notice", id: "question", role: "group", "aria-label": "The agent's question" },
      h("p", { "aria-live": "polite" }, `The agent asks: ${s.needs_input}`),
      options.length ? h("div", { class: "actions" }, options.map((o) => h("button", {
        type: "button", class: "answer", onclick: (event) => answer(event.currentTarget, o) }, o))) : "")]);
  }

  function renderFacts(s) {
    const rows = [
      ["Harness", `${s.harness}${s.model ? ` (${s.model})` : ""}`],
      ["Repo", repoCell(s.repo, s.branch)],
      ["Environment", s.environment],
      ["Last activity", when(s.last_active_at)],
      ["Created", when(s.created_at)],
      ["Idle minutes", s.idle_minutes === 0 ? "0 (kept up)" : String(s.idle_minutes)],
      ["Sandbox", s.sandbox_id || "none (suspended work is in its checkpoints)"],
      ["Open terminals", String(s.open_terminals)],
    ];
    if (s.resume_hint) rows.push(["In its terminal", h("code", {}, s.resume_hint)]);
    facts.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  }

  function renderTurns(s) {
    turnsEmpty.hidden = s.turns.length > 0;
    turnsTable.hidden = !s.turns.length;
    turns.replaceChildren(...s.turns.map((t) => h("tr", { "data-turn": String(t.n) },
      h("td", { "data-label": "Turn" }, String(t.n)),
      h("td", { "data-label": "Message", class: "message" }, t.message),
      h("td", { "data-label": "Outcome" }, t.outcome ? outcomeWords(t.outcome) : (t.started_at ? "running" : "starting"), t.error_code ? ` (${t.error_code})` : ""),
      h("td", { "data-label": "Summary", class: "summary" }, t.summary || "", t.question ? h("div", {}, `Asks: ${t.question}`) : ""),
      h("td", { "data-label": "Started" }, when(t.started_at || t.requested_at)),
      h("td", { "data-label": "Took" }, duration(t.started_at, t.finished_at)),
      h("td", { "data-label": "Usage" }, usageWords(t.usage)))));
  }

  // What restore did with a checkpoint is a property of that checkpoint: the one the sandbox
  // came from, and the newer ones it skipped (with why).
  function renderCheckpoints(s) {
    const used = s.restored_from;
    const skipped = new Map((s.restore_skipped || []).map((k) => [k.checkpoint_id, k]));
    const restore = (c) => {
      if (c.id === used) return h("span", { class: "tag good" }, "its sandbox was restored from this one");
      const k = skipped.get(c.id);
      return k ? h("span", { class: "tag bad" }, `skipped by restore: ${k.message} (${k.code})`) : "";
    };
    checkpointsEmpty.hidden = s.checkpoints.length > 0;
    checkpointsEmpty.textContent = s.state === "archived" ? "None: archiving the session dropped them."
      : "No checkpoints yet: one is made after each turn and before the sandbox is let go.";
    checkpointsTable.hidden = !s.checkpoints.length;
    checkpoints.replaceChildren(...[...s.checkpoints].reverse().map((c) => h("tr", { "data-checkpoint": c.id },
      h("td", { "data-label": "When" }, when(c.ts)),
      h("td", { "data-label": "Reason" }, c.reason),
      h("td", { "data-label": "Size" }, bytes(c.size)),
      h("td", { "data-label": "Restore" }, restore(c)),
      h("td", { "data-label": "Warnings" }, c.warnings.join("; ")))));
    const known = new Set(s.checkpoints.map((c) => c.id));
    restoreNote.replaceChildren(...(s.restore_skipped || []).filter((k) => !known.has(k.checkpoint_id)).map((k) =>
      h("p", { class: "notice" }, `Restore skipped ${k.checkpoint_id}: ${k.message} (${k.code})`)));
  }

  // Each approval the running turn waits for: its summary, Approve and Deny.
  function renderApprovals(s) {
    const pending = s.pending_approvals || [];
    keyed(approvals, pending.map((a) => a.id), () => pending.map((a) => {
      const approve = h("button", { type: "button", class: "primary" }, "Approve");
      const deny = h("button", { type: "submit" }, "Deny");
      // Deny is one click; a reason typed first goes with it (Enter in it denies too).
      const reason = h("input", { type: "text", class: "deny-reason", autocomplete: "off",
        placeholder: "why, if you deny (optional)", "aria-label": `Reason to deny ${a.tool} (optional; the agent reads it)` });
      approve.addEventListener("click", () => decide(approve, a, "approve"));
      const denyForm = h("form", { class: "inline deny" }, reason, deny);
      denyForm.addEventListener("submit", (event) => {
        event.preventDefault();
        decide(deny, a, "deny", reason.value.trim());
      });
      return h("div", { class: "notice approval", "data-approval": a.id },
        h("p", {}, h("strong", {}, `Turn ${a.turn} asks to use ${a.tool}: `), h("code", {}, a.summary)),
        h("div", { class: "actions" }, approve, denyForm, h("span", { class: "muted" }, `asked at ${new Date(a.asked_at).toLocaleTimeString()}`)));
    }));
  }

  // Steer and Stop while a turn runs (a one-shot turn answers them as busy: shown as said).
  function renderLive(s) {
    const turn = running(s);
    steerForm.hidden = !(turn && turn.started_at);
    if (!steerForm.hidden) {
      liveTurn = turn.n;
      steerForm.querySelector("#live-turn-note").textContent =
        `Turn ${turn.n} is running: tell the agent something in the same turn, or stop it.`;
    }
  }

  function decide(button, approval, decision, message = "") {
    const body = message ? { decision, message } : { decision };
    act(button, () => call("POST", sessionPath(name, `approvals/${encodeURIComponent(approval.id)}`), body));
  }

  function answer(button, text) {
    act(button, () => call("POST", sessionPath(name, "send"), { message: text }));
  }

  function notFound(err) {
    stopped = true;
    clearTimeout(timer);
    main.replaceChildren(
      h("h1", {}, "Session not found"),
      h("p", { id: "not-found" }, `There is no session called ${name}: ${err.message} `, h("code", {}, `(${err.code})`)),
      h("p", {}, h("a", { href: "/" }, "Back to the sessions")));
  }

  function renderButtons(s) {
    resume.disabled = UP.has(s.state) || s.state === "starting" || s.state === "suspending";
    suspend.disabled = !UP.has(s.state);
    archive.disabled = s.state === "archived";
    if (document.activeElement !== idle) idle.value = String(s.idle_minutes);
  }

  async function loadArtifacts(s) {
    const key = `${s.turns.length}:${s.turns.length ? s.turns[s.turns.length - 1].finished_at : ""}`;
    if (key === artifactsFor) return;
    artifactsFor = key;
    try {
      const listed = await call("GET", sessionPath(name, "artifacts"));
      artifacts.replaceChildren(...(listed.length ? listed.map((a) => h("li", {},
        h("button", { type: "button", class: "link", onclick: () => downloadArtifact(a) }, a.path),
        h("span", { class: "muted" }, ` turn ${a.turn}, ${bytes(a.size)}`))) : [h("li", { class: "muted" }, "none yet")]));
    } catch (err) {
      artifactsFor = null;
      fail(err);
    }
  }

  async function downloadArtifact(a) {
    try {
      const path = `${sessionPath(name, "artifacts")}/${a.turn}/${a.path.split("/").map(encodeURIComponent).join("/")}`;
      const response = await call("GET", path, undefined, { raw: true });
      saveAs(await response.blob(), a.path.split("/").pop());
    } catch (err) {
      fail(err);
    }
  }

  function showProgress(followed) {
    const { lines } = followed;
    if (!lines.length) return;
    const last = lines[lines.length - 1];
    progressLatest.replaceChildren(
      h("strong", {}, followed.ending ? `Turn ${followed.turn}'s last progress: ` : `Progress of turn ${followed.turn}: `),
      last.pct === null ? "" : h("span", { class: "pct" }, `${Math.round(last.pct)}% `), last.message);
    progressSummary.textContent = `All ${lines.length} progress lines of turn ${followed.turn}`;
    progressMore.hidden = lines.length < 2;
    progressBox.hidden = false;
  }

  // The running turn's progress lines, read every 2 s and once more after it ends; they stay
  // shown until the next turn's come.
  function follow(turn) {
    if (events && events.turn === turn.n) return;
    if (events) events.controller.abort();
    const controller = new AbortController();
    const followed = { turn: turn.n, controller, lines: [], ending: false };
    events = followed;
    progressBox.hidden = true;
    progressAll.replaceChildren();
    (async () => {
      let cursor = 0;
      for (;;) {
        const last = followed.ending;
        try {
          const said = await call("GET", `${sessionPath(name, "progress")}?cursor=${cursor}`, undefined, { signal: controller.signal });
          cursor = said.cursor;
          for (const line of said.lines) {
            followed.lines.push(line);
            progressAll.append(h("li", {}, line.pct === null ? "" : `${Math.round(line.pct)}% `, line.message));
          }
          if (said.lines.length || last) showProgress(followed);
        } catch (err) {
          if (err.name === "AbortError") return;
        }
        if (last) return;
        await new Promise((done) => setTimeout(done, 2000));
        if (controller.signal.aborted || stopped) return;
      }
    })();
  }

  function schedule(s) {
    clearTimeout(timer);
    if (stopped) return;
    timer = setTimeout(refresh, s && (BUSY.has(s.state) || running(s)) ? 2000 : 10000);
  }

  async function refresh() {
    try {
      const s = await call("GET", sessionPath(name));
      if (stopped) return;
      session = s;
      heading.textContent = s.name;
      subtitle.textContent = s.title;
      renderStatus(s);
      renderFacts(s);
      renderButtons(s);
      renderApprovals(s);
      renderLive(s);
      renderTurns(s);
      transcript.update(s);
      renderCheckpoints(s);
      const turn = running(s);
      if (turn && turn.started_at) follow(turn);
      else if (!turn && events) events.ending = true;  // one more read, then its lines stay
      loadArtifacts(s);
      schedule(s);
    } catch (err) {
      if (stopped) return;
      if (err.status === 404 && err.code !== "unauthorized") {
        notFound(err);
        return;
      }
      fail(err);
      schedule(session);
    }
  }

  async function act(button, fn) {
    await busy(button, async () => {
      await fn();
      await refresh();
    }, fail);
  }

  resume.addEventListener("click", () => act(resume, () => call("POST", sessionPath(name, "open"), {})));
  suspend.addEventListener("click", () => act(suspend, () => call("POST", sessionPath(name, "suspend"))));
  archive.addEventListener("click", () => {
    if (!confirm(`Archive ${name}? Its sandbox and checkpoints are dropped; its record and turns stay.`)) return;
    act(archive, () => call("POST", sessionPath(name, "archive")));
  });
  fork.addEventListener("click", () => {
    const answer = prompt("How many forks?", "1");
    if (answer === null) return;
    act(fork, async () => {
      const forks = await call("POST", sessionPath(name, "fork"), { n: Number(answer) });
      forked.replaceChildren(h("p", { class: "notice", id: "forks" }, "Forked into ",
        forks.flatMap((f, i) => [i ? ", " : "", h("a", { href: `/sessions/${encodeURIComponent(f.name)}` }, f.name)])));
    });
  });
  idleForm.addEventListener("submit", (event) => {
    event.preventDefault();
    act(saveIdle, async () => {
      await call("POST", sessionPath(name, "keep"), { idle_minutes: Number(idle.value) });
      idle.blur();
    });
  });
  messageForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!message.value.trim()) return;
    act(send, async () => {
      await call("POST", sessionPath(name, "send"), { message: message.value });
      message.value = "";
    });
  });
  steerForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!steerText.value.trim()) return;
    act(steer, async () => {
      await call("POST", sessionPath(name, "steer"), { message: steerText.value, expected_turn: liveTurn });
      steerText.value = "";
    });
  });
  stop.addEventListener("click", () => act(stop, () => call("POST", sessionPath(name, "interrupt"))));
  viewPatch.addEventListener("click", () => busy(viewPatch, async () => {
    const text = await (await call("GET", sessionPath(name, "patch"), undefined, { raw: true })).text();
    patchBox.replaceChildren(text ? diffView(text) : h("p", { class: "muted" }, "No changes against its base."));
  }, fail));
  downloadPatch.addEventListener("click", () => busy(downloadPatch, async () => {
    const response = await call("GET", sessionPath(name, "patch"), undefined, { raw: true });
    saveAs(await response.blob(), `${name}.patch`);
  }, fail));

  // A terminal needs a sandbox: resume the session first when it has none.
  async function ensureUp() {
    let s = await call("GET", sessionPath(name));
    if (UP.has(s.state) && s.sandbox_id) return;
    terminalStatus.textContent = "resuming the session first…";
    if (s.state !== "starting") await call("POST", sessionPath(name, "open"), {});
    const deadline = Date.now() + 10 * 60 * 1000;
    while (Date.now() < deadline && !stopped) {
      await new Promise((done) => setTimeout(done, 1000));
      s = await call("GET", sessionPath(name));
      if (UP.has(s.state) && s.sandbox_id) return;
      if (s.state === "failed" || s.start_error) throw Object.assign(new Error(s.start_error ? s.start_error.message : s.error || "it failed to start"), { code: s.start_error ? s.start_error.code : "start_failed" });
    }
    throw Object.assign(new Error("the session did not come up in 10 minutes"), { code: "timeout" });
  }

  async function open(mode, button) {
    if (terminal) terminal.close();
    terminal = null;
    await busy(button, async () => {
      await ensureUp();
      refresh();
      terminalBox.hidden = false;
      terminalBox.replaceChildren();
      terminalBox.scrollIntoView({ block: "nearest" });  // xterm.js draws only what is on screen
      terminalStatus.textContent = mode === "agent" ? "talking to the agent" : "shell in the repo";
      terminal = await openTerminal(terminalBox, name, mode, (why, bad) => {
        terminalStatus.textContent = why;
        closeTerminal.hidden = true;
        if (bad) showError({ message: why, code: "terminal" });
      });
      closeTerminal.hidden = false;
    }, (err) => {
      terminalStatus.textContent = "";
      fail(err);
    });
  }
  shell.addEventListener("click", () => open("shell", shell));
  agent.addEventListener("click", () => open("agent", agent));
  closeTerminal.addEventListener("click", () => {
    if (terminal) terminal.close();
    terminal = null;
    terminalBox.hidden = true;
    closeTerminal.hidden = true;
    terminalStatus.textContent = "";
    clearError();
  });

  refresh();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      if (events) events.controller.abort();
      if (terminal) terminal.close();
      transcript.stop();
      main.classList.remove("session-page");
    },
  };
}
