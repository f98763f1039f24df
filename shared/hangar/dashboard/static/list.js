// The Sessions page: the most recently active first (the API's order=activity), paged,
// filtered by state and name prefix, refreshing by itself (every 2 s while a session starts,
// runs a turn or suspends; every 15 s otherwise). A row says what needs you (a question, an
// approval), whether a turn runs and its latest progress line, and the size of the change.
// Under 600 px wide the table's rows become cards (app.css), so nothing runs off the screen.

import { call } from "./api.js";
import { changeSize, h, repoCell, stateBadge, when } from "./ui.js";

const STATES = ["starting", "active", "idle", "suspending", "suspended", "failed", "archived"];
const BUSY = new Set(["starting", "active", "suspending"]);
const PAGE = 50;
const COLUMNS = ["Name", "Title", "Harness", "Repo and branch", "State", "Change", "Last activity", "Last summary"];
const CLASSES = ["name", "title", "harness", "repo", "state-cell", "change", "activity", "summary"];

// The state, what needs the person (a question, approvals), and while a turn runs a live dot
// and the turn's latest progress line.
function stateCell(s) {
  const parts = [];
  if (s.state === "active") parts.push(h("span", { class: "live", role: "img", "aria-label": "a turn is running", title: "a turn is running" }), " ");
  parts.push(...stateBadge(s));
  const approvals = s.pending_approvals || [];
  if (approvals.length) {
    parts.push(" ", h("span", { class: "state needs-approval", title: approvals.map((a) => a.summary).join("\n") },
      approvals.length === 1 ? "needs approval" : `needs approval (${approvals.length})`));
  }
  if (s.state === "active" && s.progress) parts.push(h("div", { class: "progress-line" }, s.progress));
  return parts;
}

export function renderList(main, ctx) {
  const params = new URLSearchParams(location.search);
  let stopped = false;
  let timer = null;
  let shown = PAGE;
  let cursor = null;

  const state = h("select", { id: "state-filter" },
    h("option", { value: "" }, "every state"),
    STATES.map((s) => h("option", { value: s }, s)));
  state.value = params.get("state") || "";
  const prefix = h("input", { id: "prefix-filter", type: "search", placeholder: "name starts with", value: params.get("prefix") || "" });
  const rows = h("tbody");
  const more = h("button", { type: "button", hidden: true }, "More");
  const status = h("p", { class: "muted", "aria-live": "polite" });
  const table = h("table", { id: "sessions", class: "cards" },
    h("thead", {}, h("tr", {}, COLUMNS.map((t) => h("th", { scope: "col" }, t)))),
    rows);

  main.append(
    h("div", { class: "title-row" }, h("h1", {}, "Sessions"),
      h("a", { href: "/new", class: "button primary" }, "New session")),
    h("form", { class: "inline", role: "search" },
      h("span", { class: "pair" }, h("label", { for: "state-filter" }, "State"), state),
      h("span", { class: "pair" }, h("label", { for: "prefix-filter" }, "Name prefix"), prefix)),
    status,
    table,
    h("div", { class: "pager" }, more),
  );

  function query(limit, after) {
    const q = new URLSearchParams({ order: "activity", limit: String(limit) });
    if (state.value) q.set("state", state.value);
    if (prefix.value) q.set("prefix", prefix.value);
    if (after) q.set("cursor", after);
    return `/api/sessions?${q}`;
  }

  function row(s) {
    const cells = [
      h("a", { href: `/sessions/${encodeURIComponent(s.name)}` }, s.name),
      s.title,
      s.harness,
      repoCell(s.repo, s.branch),
      stateCell(s),
      s.change && s.change.files === 0 ? h("span", { class: "muted" }, "no change") : changeSize(s.change),
      when(s.last_active_at),
      s.summary || "",
    ];
    return h("tr", { "data-session": s.name },
      cells.map((cell, i) => h("td", { "data-label": COLUMNS[i], class: CLASSES[i] }, cell)));
  }

  // What the list holds, in words; an empty list shows no table, only this.
  function describe(count) {
    const filtered = state.value || prefix.value;
    table.hidden = count === 0;
    if (count === 0) {
      return filtered ? ["No session matches."]
        : ["No sessions yet: start one with New session (or ", h("code", {}, "hangar session new NAME MESSAGE --env ENV"), ")."];
    }
    return [`${count} session${count === 1 ? "" : "s"} shown, most recently active first.`];
  }

  function schedule(sessions) {
    clearTimeout(timer);
    if (stopped) return;
    const busy = sessions.some((s) => BUSY.has(s.state));
    timer = setTimeout(refresh, busy ? 2000 : 15000);
  }

  // The first `shown` sessions again (the pages loaded so far), replacing the table.
  async function refresh() {
    try {
      const page = await call("GET", query(Math.min(shown, 500)));
      if (stopped) return;
      rows.replaceChildren(...page.sessions.map(row));
      cursor = page.next_cursor;
      more.hidden = !cursor;
      status.replaceChildren(...describe(page.sessions.length));
      schedule(page.sessions);
    } catch (err) {
      if (stopped) return;
      ctx.fail(err);
      schedule([]);
    }
  }

  more.addEventListener("click", async () => {
    more.disabled = true;
    try {
      const page = await call("GET", query(PAGE, cursor));
      rows.append(...page.sessions.map(row));
      shown += page.sessions.length;
      cursor = page.next_cursor;
      more.hidden = !cursor;
      status.replaceChildren(...describe(rows.children.length));
    } catch (err) {
      ctx.fail(err);
    } finally {
      more.disabled = false;
    }
  });

  function filtersChanged() {
    cursor = null;
    more.hidden = true;
    const q = new URLSearchParams();
    if (state.value) q.set("state", state.value);
    if (prefix.value) q.set("prefix", prefix.value);
    history.replaceState({}, "", q.size ? `/?${q}` : "/");
    shown = PAGE;
    refresh();
  }
  state.addEventListener("change", filtersChanged);
  let typing = null;
  prefix.addEventListener("input", () => {
    clearTimeout(typing);
    more.hidden = true; // the cursor is the old filters' until the list is read again
    typing = setTimeout(filtersChanged, 250);
  });
  main.querySelector("form").addEventListener("submit", (e) => {
    e.preventDefault();
    filtersChanged();
  });

  refresh();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      clearTimeout(typing);
    },
  };
}
