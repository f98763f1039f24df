// The Environments page (/environments): the list, and a form to add one or change one, over
// the same REST calls as `hangar env add|update` (the API makes every check, with the CLI's
// messages). Secrets are write-only: the API answers their names, so the page shows that one
// is set, and a value typed here is sent once and never shown again.

import { call } from "./api.js";
import { FieldError, clearFieldErrors, field, formError, pairs, showFieldError } from "./forms.js";
import { h, repoCell, repoText } from "./ui.js";

const envPath = (name) => `/api/envs/${encodeURIComponent(name)}`;
const words = (text) => text.split(/[\s,]+/).filter(Boolean);
const lines = (map) => Object.entries(map || {}).map(([k, v]) => `${k}=${v}`).join("\n");

function ports(text) {
  return words(text).map((word) => {
    if (!/^\d+$/.test(word)) {
      throw new FieldError("host_ports", "invalid_input", `host ports must be whole numbers from 1 to 65535, not '${word.slice(0, 30)}'`);
    }
    return Number(word);
  });
}

export function renderEnvironments(main, ctx) {
  let stopped = false;
  const rows = h("tbody");
  const status = h("p", { class: "muted", "aria-live": "polite" });
  const add = h("button", { type: "button", class: "primary" }, "Add environment");
  const editor = h("section", { id: "environment-editor", "aria-label": "Environment" });

  main.append(
    h("div", { class: "title-row" }, h("h1", {}, "Environments"), add),
    h("p", { class: "muted" }, "Where sessions come from: a repo and branch, a setup script, variables and secrets for every turn."),
    status,
    h("div", { class: "table-wrap" }, h("table", { id: "environments", class: "cards" },
      h("thead", {}, h("tr", {},
        ["Name", "Repo and branch", "Variables", "Secrets", "Host ports", ""].map((t) => h("th", { scope: "col" }, t)))),
      rows)),
    editor,
  );

  function row(env) {
    const secrets = env.secrets.length
      ? env.secrets.map((s) => h("span", { class: "tag", title: "set; its value is never shown" }, `${s} · set`))
      : h("span", { class: "muted" }, "none");
    return h("tr", { "data-environment": env.name },
      h("td", { "data-label": "Name" }, env.name),
      h("td", { "data-label": "Repo" }, repoCell(env.repo, env.branch || "default branch")),
      h("td", { "data-label": "Variables" }, env.vars.join(", ") || h("span", { class: "muted" }, "none")),
      h("td", { "data-label": "Secrets" }, secrets),
      h("td", { "data-label": "Host ports" }, env.host_ports.join(", ")),
      h("td", { class: "actions-cell" },
        h("button", { type: "button", onclick: () => edit(env), "aria-label": `Edit ${env.name}` }, "Edit"),
        " ",
        h("a", { href: `/new?env=${encodeURIComponent(env.name)}` }, "New session")));
  }

  async function refresh() {
    try {
      const envs = await call("GET", "/api/envs");
      if (stopped) return;
      rows.replaceChildren(...envs.map(row));
      status.textContent = envs.length
        ? `${envs.length} environment${envs.length === 1 ? "" : "s"}.`
        : "No environments yet: add one to start sessions.";
      return envs;
    } catch (err) {
      if (!stopped) ctx.fail(err);
      return [];
    }
  }

  // The form, empty to add one, or holding `env` (its API view) to change it.
  function open(env) {
    const editing = Boolean(env);
    const c = {
      name: h("input", { type: "text", required: true, autocomplete: "off", spellcheck: "false", readonly: editing }),
      // A repo cannot be changed: editing shows it as text, the whole of it in the tooltip.
      repo: editing ? h("output", { class: "readonly-value", title: env.repo }, repoText(env.repo))
        : h("input", { type: "text", required: true, autocomplete: "off", spellcheck: "false", placeholder: "https://github.com/you/app.git or /srv/git/app.git" }),
      branch: h("input", { type: "text", autocomplete: "off", placeholder: "the repo's default branch" }),
      setup: h("textarea", { rows: 3, spellcheck: "false", placeholder: "run with bash in every new sandbox" }),
      vars: h("textarea", { rows: 3, spellcheck: "false", placeholder: "NAME=VALUE, one a line" }),
      secrets: h("textarea", { rows: 2, spellcheck: "false", autocomplete: "off", class: "secret", placeholder: "NAME=VALUE, one a line" }),
      host_ports: h("input", { type: "text", autocomplete: "off", placeholder: "e.g. 5432 6379" }),
      turn_timeout_minutes: h("input", { type: "number", min: 0, step: "any", placeholder: "the server's default" }),
      image: h("input", { type: "text", autocomplete: "off", spellcheck: "false", placeholder: "none" }),
      allowed_hosts: h("input", { type: "text", autocomplete: "off", spellcheck: "false", placeholder: "e.g. pypi.org github.com" }),
      deny_rules: h("textarea", { rows: 2, spellcheck: "false", placeholder: "NAME=REGEX, one a line" }),
      notify_url: h("input", { type: "text", autocomplete: "off", spellcheck: "false", placeholder: "HANGAR_NOTIFY_URL's" }),
    };
    const unset = new Set();
    const setNames = (names, what) => (names.length ? h("ul", { class: "set-names" }, names.map((n) => {
      const box = h("input", { type: "checkbox", id: `unset-${what}-${n}`, onchange: (e) => (e.target.checked ? unset.add(n) : unset.delete(n)) });
      return h("li", {}, box, h("label", { for: box.id, class: "plain" }, `remove ${n}`));
    })) : null);
    const fields = {
      name: field("env-name", "Name", c.name, editing ? null : "Lowercase letters, digits and dashes."),
      repo: field("env-repo", "Repo", c.repo, editing ? "It cannot be changed: another repo is another environment."
        : "A git URL, or an absolute path on the server; it must answer git ls-remote."),
      branch: field("env-branch", "Branch", c.branch),
      setup: field("env-setup", "Setup", c.setup),
      vars: field("env-vars", "Variables", c.vars, editing
        ? `Set now: ${env.vars.join(", ") || "none"}. Lines here are added or replace a value.` : null),
      secrets: field("env-secrets", "Secrets", c.secrets, editing
        ? `Set now: ${env.secrets.join(", ") || "none"} (values are never shown). Lines here are added or replace one.`
        : "Stored encrypted; never shown again."),
      host_ports: field("env-ports", "Host ports", c.host_ports, "Loopback ports on the host its sandboxes may reach."),
      turn_timeout_minutes: field("env-timeout", "Turn time limit (minutes)", c.turn_timeout_minutes),
      image: field("env-image", "Image", c.image),
      allowed_hosts: field("env-hosts", "Allowed hosts", c.allowed_hosts, "For the deny-risky permission mode."),
      deny_rules: field("env-rules", "Deny rules", c.deny_rules),
      notify_url: field("env-notify", "Notify URL", c.notify_url),
    };
    if (editing) {
      c.name.value = env.name;
      c.branch.value = env.branch || "";
      c.setup.value = env.setup || "";
      c.host_ports.value = env.host_ports.join(" ");
      c.turn_timeout_minutes.value = env.turn_timeout_minutes ?? "";
      c.image.value = env.image || "";
      c.allowed_hosts.value = env.allowed_hosts.join(" ");
      c.deny_rules.value = lines(env.deny_rules);
      c.notify_url.value = env.notify_url || "";
      const v = setNames(env.vars, "var");
      const s = setNames(env.secrets, "secret");
      if (v) fields.vars.row.append(v);
      if (s) fields.secrets.row.append(s);
    }
    const general = formError();
    const save = h("button", { type: "submit", class: "primary" }, editing ? "Save changes" : "Add environment");
    const cancel = h("button", { type: "button" }, "Cancel");
    const form = h("form", { class: "stack card", id: "environment-form", novalidate: true },
      h("h2", {}, editing ? `Change ${env.name}` : "Add an environment"),
      ...Object.values(fields).map((f) => f.row), general, h("div", { class: "row" }, save, cancel));
    editor.replaceChildren(form);
    cancel.addEventListener("click", () => editor.replaceChildren());

    const optional = (text) => (text.trim() ? text.trim() : null);
    const timeout = () => (c.turn_timeout_minutes.value === "" ? null : Number(c.turn_timeout_minutes.value));

    function addBody() {
      return {
        name: c.name.value.trim(), repo: c.repo.value.trim(), branch: optional(c.branch.value),
        setup: optional(c.setup.value), vars: pairs(c.vars.value, "vars", "a variable"),
        secrets: pairs(c.secrets.value, "secrets", "a secret"), host_ports: ports(c.host_ports.value),
        turn_timeout_minutes: timeout(), image: optional(c.image.value),
        allowed_hosts: words(c.allowed_hosts.value), deny_rules: pairs(c.deny_rules.value, "deny_rules", "a deny rule"),
        notify_url: optional(c.notify_url.value),
      };
    }

    // Only what changed, as `env update` sends it.
    function patchBody() {
      const out = {};
      const changed = (key, now, was) => {
        if (JSON.stringify(now) !== JSON.stringify(was)) out[key] = now;
      };
      changed("branch", optional(c.branch.value), env.branch);
      changed("setup", optional(c.setup.value), env.setup);
      changed("host_ports", ports(c.host_ports.value), env.host_ports);
      changed("turn_timeout_minutes", timeout(), env.turn_timeout_minutes);
      changed("image", optional(c.image.value), env.image);
      changed("allowed_hosts", words(c.allowed_hosts.value), env.allowed_hosts);
      changed("deny_rules", pairs(c.deny_rules.value, "deny_rules", "a deny rule"), env.deny_rules);
      changed("notify_url", optional(c.notify_url.value), env.notify_url);
      const vars = pairs(c.vars.value, "vars", "a variable");
      const secrets = pairs(c.secrets.value, "secrets", "a secret");
      if (Object.keys(vars).length) out.vars = vars;
      if (Object.keys(secrets).length) out.secrets = secrets;
      if (unset.size) out.unset = [...unset];
      if (!Object.keys(out).length) throw new FieldError(null, "invalid_input", "nothing to change");
      return out;
    }

    function locate(err) {
      const data = err.data || {};
      if (["invalid_name", "already_exists", "name_taken"].includes(err.code)) return "name";
      if ("branch" in data) return "branch";
      if ("ports" in data) return "host_ports";
      if (Array.isArray(data.names)) {
        const secretNames = Object.keys(pairs(c.secrets.value, "secrets", "a secret"));
        return data.names.some((n) => secretNames.includes(n)) ? "secrets" : "vars";
      }
      return null;
    }

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearFieldErrors(fields, general);
      save.disabled = true;
      try {
        const saved = editing
          ? await call("PATCH", envPath(env.name), patchBody())
          : await call("POST", "/api/envs", addBody());
        if (stopped) return;
        // The form goes, and with it every secret value typed in it.
        editor.replaceChildren(h("p", { class: "notice", role: "status" },
          `${editing ? "Saved" : "Added"} ${saved.name}.`, ...(saved.warnings || []).map((w) => [h("br"), `Warning: ${w}`])));
        await refresh();
      } catch (err) {
        if (stopped) return;
        if (err.status === 401) ctx.fail(err);
        else showFieldError(err, fields, general, locate);
      } finally {
        save.disabled = false;
      }
    });
    (editing ? c.branch : c.name).focus();
  }

  function edit(env) {
    open(env);
  }
  add.addEventListener("click", () => open(null));

  refresh();
  return {
    stop() {
      stopped = true;
    },
  };
}
