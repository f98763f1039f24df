// A terminal on the session's sandbox: xterm.js (its default DOM renderer, which screen readers
// and tests read) over the terminal websocket, opened with a single-use ticket.

import { call, sessionPath } from "./api.js";

let library = null;

async function load() {
  if (!library) {
    library = Promise.all([import("/static/vendor/xterm.js"), import("/static/vendor/addon-fit.js")])
      .catch(() => {
        library = null;
        throw Object.assign(new Error("the terminal's library is not on this server: build it with `make assets`"), { code: "assets_missing" });
      });
    if (!document.querySelector("link[data-xterm]")) {
      document.head.append(Object.assign(document.createElement("link"), { rel: "stylesheet", href: "/static/vendor/xterm.css" }));
      document.head.lastChild.setAttribute("data-xterm", "");
    }
  }
  const [{ Terminal }, { FitAddon }] = await library;
  return { Terminal, FitAddon };
}

// Open a terminal in `box` (mode "shell" or "agent"). onEnd(text) is told why it ended.
export async function openTerminal(box, name, mode, onEnd) {
  const { Terminal, FitAddon } = await load();
  const term = new Terminal({ cursorBlink: true, fontSize: 13, scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  let ws = null;
  const asked = { rows: 0, cols: 0 }; // the size the websocket was opened with
  try {
    // Asked with the mode, so what keeps the terminal closed is said here (a browser is told
    // nothing of a refused websocket).
    const { ticket } = await call("POST", sessionPath(name, "terminal-ticket"), { mode });
    const url = new URL(sessionPath(name, "terminal"), location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    Object.assign(asked, { rows: term.rows, cols: term.cols });
    url.search = new URLSearchParams({ ticket, mode, rows: String(asked.rows), cols: String(asked.cols) });
    ws = new WebSocket(url);
  } catch (err) {
    term.dispose();
    throw err;
  }
  ws.binaryType = "arraybuffer";
  const encoder = new TextEncoder();
  let opened = false;
  ws.addEventListener("open", () => {
    opened = true;
    term.focus();
    // Refitted while it connected (its stylesheet came late, or the window changed)?
    if (term.rows !== asked.rows || term.cols !== asked.cols) sendSize(term);
  });
  ws.addEventListener("message", (event) => {
    term.write(typeof event.data === "string" ? event.data : new Uint8Array(event.data));
  });
  ws.addEventListener("close", (event) => {
    if (!opened) onEnd(`the terminal was refused (${event.reason || `close code ${event.code}`})`, true);
    else onEnd(event.reason ? `the terminal ended: ${event.reason}` : "the terminal closed", event.code !== 1000);
  });
  const send = (data) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(typeof data === "string" ? encoder.encode(data) : data);
  };
  term.onData(send);
  term.onBinary((data) => send(Uint8Array.from(data, (c) => c.charCodeAt(0))));
  // A new size goes up as a text frame (keystrokes are binary), so the program redraws to fit;
  // the server takes more than 1,000 as 1,000.
  function sendSize({ rows, cols }) {
    if (ws.readyState !== WebSocket.OPEN || rows < 1 || cols < 1) return;
    ws.send(JSON.stringify({ type: "resize", rows, cols }));
  }
  term.onResize(sendSize);
  let pending = null;
  const refit = new ResizeObserver(() => {
    clearTimeout(pending);
    pending = setTimeout(() => fit.fit(), 100); // once a drag settles
  });
  refit.observe(box);
  return {
    close() {
      refit.disconnect();
      clearTimeout(pending);
      ws.close(1000, "closed");
      term.dispose();
    },
  };
}
