// Small DOM helpers. Text always goes in as text nodes, never as HTML.

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function ago(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 45) return `${Math.round(seconds)} s ago`;
  if (seconds < 45 * 60) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 36 * 3600) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} days ago`;
}

export function when(iso) {
  return iso ? h("time", { datetime: iso, title: new Date(iso).toLocaleString() }, ago(iso)) : "";
}

export function duration(fromIso, toIso) {
  if (!fromIso || !toIso) return "";
  const seconds = (Date.parse(toIso) - Date.parse(fromIso)) / 1000;
  return seconds < 120 ? `${seconds.toFixed(1)} s` : `${Math.round(seconds / 60)} min`;
}

export function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

const alertBox = () => document.getElementById("alert");

// The API's message and code in the page's role=alert element.
export function showError(err) {
  const box = alertBox();
  const code = err && err.code ? err.code : "error";
  const message = err && err.message ? err.message : String(err);
  box.replaceChildren(document.createTextNode(`${message} `), h("code", {}, `(${code})`));
  box.hidden = false;
}

export function clearError() {
  const box = alertBox();
  box.hidden = true;
  box.replaceChildren();
}

export function stateBadge(session) {
  const badges = [h("span", { class: `state ${session.state}` }, session.state)];
  if (session.needs_input) {
    badges.push(" ", h("span", { class: "state needs-input", title: session.needs_input }, "needs input"));
  }
  return badges;
}

export function saveAs(blob, filename) {
  const url = URL.createObjectURL(blob);
  const link = h("a", { href: url, download: filename });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// Run fn() with the button disabled; errors go to the alert (or to onError).
export async function busy(button, fn, onError = showError) {
  button.disabled = true;
  try {
    clearError();
    return await fn();
  } catch (err) {
    onError(err);
    return undefined;
  } finally {
    button.disabled = false;
  }
}

// A repo as a person reads it: host and path without the scheme and ".git", a local path by
// its last two folders (the whole of it belongs in a tooltip).
export function repoText(repo) {
  const short = repo.replace(/^[a-z+]+:\/\//, "").replace(/\.git$/, "");
  return repo.startsWith("/") ? short.split("/").slice(-2).join("/") : short;
}

// A repo and branch as a list shows them, the whole repo in the tooltip.
export function repoCell(repo, branch) {
  if (!repo) return branch;
  return h("span", { title: repo }, `${repoText(repo)} · ${branch}`);
}

// A change's size as "3 files +10 -2" ({files, added, removed}); "" when there is none known.
export function changeSize(change) {
  if (!change) return "";
  const files = `${change.files} file${change.files === 1 ? "" : "s"}`;
  return h("span", { class: "change-size" }, `${files} `,
    h("span", { class: "added" }, `+${change.added}`), " ",
    h("span", { class: "removed" }, `-${change.removed}`));
}
