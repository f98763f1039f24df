// A session's conversation, turn by turn, from the log's events contract:
//   GET /api/sessions/{ref}/log?turn=N&format=events[&cursor=C][&limit=L]
//   -> {turn, harness, finished, events, next_cursor, more}
// Events are told apart by "kind": message {role, text, context[], steer?} (steer: true, a
// person's message that steered the running turn, in its place), tool_call {id, name, input},
// tool_result {id, output, error, cut}, usage {input_tokens, output_tokens, cached_tokens},
// notice {text}, outcome {outcome, reason, duration_seconds}.
// A turn's events load when it is opened (the latest is open by default), on while `more`,
// and every 2 s while the turn is not finished. Text goes in as text, never as HTML.

import { call, sessionPath } from "./api.js";
import { bytes, h } from "./ui.js";

const POLL_MS = 2000;
const PAGE = 200;

const count = (n) => Number(n || 0).toLocaleString("en-US");

// Token usage in words ("1,234 tokens in, 56 out, 1,000 cached"; cached ones are among those
// in), from a usage event or a turn record's usage in its harness's own keys (as the server's
// transcript reads them: Codex counts cached input among its input, the others apart).
export function usageWords(usage) {
  const u = usage || {};
  let inTokens;
  let cached;
  if ("cached_tokens" in u) {  // a usage event
    [inTokens, cached] = [u.input_tokens || 0, u.cached_tokens || 0];
  } else if ("cached_input_tokens" in u) {  // Codex
    [inTokens, cached] = [u.input_tokens || 0, u.cached_input_tokens || 0];
  } else if ("input" in u || "output" in u) {  // pi
    cached = u.cacheRead || 0;
    inTokens = (u.input || 0) + cached + (u.cacheWrite || 0);
  } else {  // Claude Code, Antigravity
    cached = u.cache_read_input_tokens || 0;
    inTokens = (u.input_tokens || 0) + cached + (u.cache_creation_input_tokens || 0);
  }
  const outTokens = u.output_tokens ?? u.output ?? 0;
  if (!inTokens && !outTokens) return "";
  return `${count(inTokens)} tokens in, ${count(outTokens)} out${cached ? `, ${count(cached)} cached` : ""}`;
}

export function seconds(n) {
  if (n === null || n === undefined) return "";
  return n < 120 ? `${Number(n).toFixed(1)} s` : `${Math.round(n / 60)} min`;
}

export const outcomeWords = (outcome) => (outcome ? outcome.replaceAll("_", " ") : "");

function inputText(input) {
  if (input && typeof input === "object" && typeof input.command === "string" && Object.keys(input).length <= 2) {
    return input.command;  // a shell call reads best as its command line
  }
  return typeof input === "string" ? input : JSON.stringify(input, null, 2);
}

function contextName(item) {
  if (typeof item === "string") return item;
  return (item && (item.name || item.url || item.kind)) || "an item";
}

// One turn's transcript: a <details> that loads its events when opened.
class TurnView {
  constructor(name, n, { fail, footer }) {
    this.name = name;
    this.n = n;
    this.fail = fail;
    this.cursor = null;
    this.finished = false;
    this.loading = false;
    this.timer = null;
    this.stopped = false;
    this.touched = false; // opened or closed by the person (the page then leaves it so)
    this.state = "";
    this.seen = ""; // the turn's state at the last read (a change reads it again)
    this.calls = new Map(); // tool call id -> its result's <details>
    this.title = h("span", {}, `Turn ${n}`);
    this.events = h("div", { class: "events-list" });
    this.status = h("div", { class: "muted transcript-status", "aria-live": "polite" });
    this.footer = h("div", { class: "turn-footer" });
    const summary = h("summary", {}, this.title);
    summary.addEventListener("click", () => { this.touched = true; });
    this.element = h("details", { class: "turn", "data-transcript": String(n) },
      summary, this.events, this.status, this.footer);
    this.element.addEventListener("toggle", () => {
      if (this.element.open) this.load();
      else clearTimeout(this.timer);
    });
    this.renderFooter = footer;
  }

  update(turn) {
    const first = (turn.message || "").split("\n")[0];
    const outcome = turn.finished_at ? outcomeWords(turn.outcome) : (turn.started_at ? "running" : "starting");
    this.title.replaceChildren(h("strong", {}, `Turn ${turn.n}`), ` · ${outcome} · `, h("span", { class: "muted" }, first));
    this.footer.replaceChildren(...this.renderFooter(turn));
    // Read again when the turn started or ended since (a read that failed is not repeated
    // until then): an open turn's events that are not all in yet.
    this.state = `${turn.started_at || ""}|${turn.finished_at || ""}`;
    if (this.state !== this.seen && !this.finished && this.element.open && !this.loading && !this.timer) this.load();
  }

  async load() {
    if (this.loading || this.stopped) return;
    clearTimeout(this.timer);
    this.timer = null;
    this.loading = true;
    this.seen = this.state;
    try {
      for (;;) {
        const q = new URLSearchParams({ turn: String(this.n), format: "events", limit: String(PAGE) });
        if (this.cursor) q.set("cursor", this.cursor);
        const page = await call("GET", `${sessionPath(this.name, "log")}?${q}`);
        if (this.stopped) return;
        for (const event of page.events) this.add(event);
        if (page.next_cursor) this.cursor = page.next_cursor;
        this.finished = page.finished;
        if (!page.more) break;
      }
      this.status.replaceChildren(this.finished ? "" : "the turn is running…");
      if (!this.events.childElementCount && this.finished) this.status.replaceChildren("No events were recorded for this turn.");
    } catch (err) {
      this.status.replaceChildren(h("span", { class: "notice bad" }, `Its conversation could not be read: ${err.message} `, h("code", {}, `(${err.code || "error"})`)));
      this.loading = false;
      if (err.status && err.status < 500) return;  // asking again would answer the same
      this.later();
      return;
    }
    this.loading = false;
    if (!this.finished) this.later();
  }

  later() {
    if (this.stopped || !this.element.open) return;
    this.timer = setTimeout(() => { this.timer = null; this.load(); }, POLL_MS);
  }

  add(event) {
    const block = this.render(event);
    if (block) this.events.append(block);
  }

  render(e) {
    switch (e.kind) {
      case "message": {
        const who = e.role === "user" ? "You" : e.role === "assistant" ? "Agent" : e.role;
        const context = (e.context || []).length
          ? h("div", { class: "muted context" }, "With: ", (e.context || []).map(contextName).join(", ")) : null;
        const label = e.steer ? h("span", { class: "steer-label", title: "sent while the turn ran" }, "steer") : null;
        return h("div", { class: `msg ${e.role}${e.steer ? " steer" : ""}` },
          h("div", { class: "who" }, who, label), h("div", { class: "text" }, e.text || ""), context);
      }
      case "tool_call": {
        const result = h("details", { class: "tool-result" }, h("summary", {}, "Result"), h("p", { class: "muted" }, "no result yet"));
        if (e.id) this.calls.set(e.id, result);
        return h("div", { class: "tool", "data-tool": e.name },
          h("div", { class: "who" }, "Tool ", h("code", {}, e.name)),
          h("pre", { class: "tool-input" }, inputText(e.input)), result);
      }
      case "tool_result": {
        const output = typeof e.output === "string" ? e.output : JSON.stringify(e.output, null, 2);
        const label = `${e.error ? "Failed" : "Result"}${e.cut ? " (cut)" : ""}`;
        const body = [h("summary", {}, label), h("pre", { class: "tool-output" }, output || "(no output)")];
        const open = this.calls.get(e.id);
        if (open) {
          open.classList.toggle("error", Boolean(e.error));
          open.replaceChildren(...body);
          return null;
        }
        return h("details", { class: `tool-result${e.error ? " error" : ""}` }, ...body);
      }
      case "usage":
        return h("div", { class: "muted usage" }, usageWords(e));
      case "notice":
        return h("div", { class: "muted notice-line" }, e.text);
      case "outcome": {
        const bad = e.outcome && !["exited", "needs_input"].includes(e.outcome);
        return h("div", { class: `outcome${bad ? " bad" : ""}` },
          h("strong", {}, outcomeWords(e.outcome)), e.reason ? `: ${e.reason}` : "",
          e.duration_seconds !== null && e.duration_seconds !== undefined ? h("span", { class: "muted" }, ` · took ${seconds(e.duration_seconds)}`) : "");
      }
      default:
        return null;  // a kind this page does not know yet
    }
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

// The conversation section: one TurnView a turn. `download(artifact)` saves an artifact.
export function createTranscript(name, { fail, download }) {
  const empty = h("p", { class: "muted" }, "No turns yet.");
  const list = h("div", { id: "transcript" }, empty);
  const views = new Map();
  let latest = 0;

  function footer(turn) {
    const parts = [];  // its usage, outcome and duration are the transcript's last events
    if (turn.result !== null && turn.result !== undefined) {
      parts.push(h("div", { class: "who" }, "Result"), h("pre", { class: "result" }, JSON.stringify(turn.result, null, 2)));
    } else if (turn.result_error) {
      parts.push(h("p", { class: "notice bad" }, `No valid result: ${turn.result_error}`));
    }
    if ((turn.artifacts || []).length) {
      parts.push(h("div", { class: "who" }, "Artifacts"), h("ul", {}, turn.artifacts.map((a) => h("li", {},
        h("button", { type: "button", class: "link", onclick: () => download({ turn: turn.n, path: a.path }) }, a.path),
        h("span", { class: "muted" }, ` ${bytes(a.size)}`)))));
    }
    return parts;
  }

  return {
    element: list,
    update(session) {
      for (const turn of session.turns) {
        let view = views.get(turn.n);
        if (!view) {
          view = new TurnView(name, turn.n, { fail, footer });
          views.set(turn.n, view);
          list.prepend(view.element);  // newest first
        }
        view.update(turn);
      }
      const last = session.turns.length ? session.turns[session.turns.length - 1].n : 0;
      if (last > latest) {
        // The latest turn opens by itself (its toggle loads it); the one opened so before
        // closes, unless the person opened or closed it.
        const before = views.get(latest);
        if (before && !before.touched) before.element.open = false;
        latest = last;
        views.get(last).element.open = true;
      }
      empty.hidden = session.turns.length > 0;
    },
    stop() {
      for (const view of views.values()) view.stop();
    },
  };
}
