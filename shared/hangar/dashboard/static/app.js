// The dashboard's entry point: sign-in, and a page per address (/, /new, /environments and
// /sessions/NAME).

import { ApiError, call, token } from "./api.js";
import { renderEnvironments } from "./environments.js";
import { renderList } from "./list.js";
import { renderNewSession } from "./newsession.js";
import { renderSession } from "./session.js";
import { clearError, h, showError } from "./ui.js";

let view = null;

const ctx = {
  navigate(path) {
    history.pushState({}, "", path);
    route();
  },
  // Every failed call comes here: a refused token signs out; the rest is shown.
  fail(err) {
    if (err instanceof ApiError && err.status === 401) {
      token.clear();
      route();
    }
    showError(err);
  },
};

function signIn(main) {
  const input = h("input", { id: "token", type: "password", autocomplete: "off", size: 48, required: true });
  const button = h("button", { type: "submit", class: "primary" }, "Sign in");
  const form = h("form", { class: "inline card" },
    h("label", { for: "token" }, "Token"), input, button);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError();
    button.disabled = true;
    token.set(input.value.trim());
    try {
      await call("GET", "/api/sessions?limit=1");
      route();
    } catch (err) {
      token.clear();
      showError(err.status === 401 ? Object.assign(new Error(`That token was refused: ${err.message}`), { code: err.code }) : err);
    } finally {
      button.disabled = false;
    }
  });
  main.append(
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "With a hangar token: ", h("code", {}, "hangar serve"), "'s admin token is in its data folder (",
      h("code", {}, "~/.hangar/admin-token"), " by default). It is kept for this browser tab only."),
    form,
  );
  input.focus();
}

function route() {
  if (view) view.stop();
  view = null;
  const main = document.getElementById("main");
  main.replaceChildren();
  document.title = "hangar";
  const signedIn = Boolean(token.get());
  document.getElementById("sign-out").hidden = !signedIn;
  const nav = document.getElementById("nav");
  nav.replaceChildren();
  if (!signedIn) {
    signIn(main);
    return;
  }
  const match = location.pathname.match(/^\/sessions\/([^/]+)\/?$/);
  const sessions = h("a", { href: "/" }, "Sessions");
  const environments = h("a", { href: "/environments" }, "Environments");
  if (match) {
    nav.append(sessions, " / ", decodeURIComponent(match[1]));
    view = renderSession(main, decodeURIComponent(match[1]), ctx);
  } else if (location.pathname === "/new") {
    nav.append(sessions, " / New session");
    document.title = "New session · hangar";
    view = renderNewSession(main, ctx);
  } else if (location.pathname === "/environments") {
    nav.append(sessions, " · ", h("span", { "aria-current": "page" }, "Environments"));
    document.title = "Environments · hangar";
    view = renderEnvironments(main, ctx);
  } else {
    nav.append(h("span", { "aria-current": "page" }, "Sessions"), " · ", environments);
    view = renderList(main, ctx);
  }
}

document.addEventListener("click", (event) => {
  const link = event.target.closest("a[href^='/']");
  if (!link || link.hasAttribute("download") || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  clearError();
  ctx.navigate(link.getAttribute("href"));
});
window.addEventListener("popstate", route);
document.getElementById("sign-out").addEventListener("click", () => {
  token.clear();
  clearError();
  ctx.navigate("/");
});
route();
