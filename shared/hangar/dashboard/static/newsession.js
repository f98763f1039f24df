// The New session page (/new): the same POST /api/sessions the CLI's `session new` makes.
// Files go up first through the uploads API and ride as context items; the output schema is
// checked to be a JSON object before anything is sent. An error the API answers is shown next
// to the field it names (its message and code), else above the button.

import { call } from "./api.js";
import { FieldError, clearFieldErrors, field, formError, showFieldError } from "./forms.js";
import { bytes, h, repoText } from "./ui.js";
import { uploadFile } from "./uploads.js";

const HARNESSES = [
  ["claude", "Claude Code"], ["codex", "Codex"], ["pi", "pi"], ["antigravity", "Antigravity"],
];
const NAME_MAX = 64;

// A session name from a message: its first words as a lowercase slug (what the API accepts:
// letters, digits and dashes, not starting or ending with one), at most 40 characters.
export function suggestName(message) {
  const words = message.toLowerCase().normalize("NFKD").replace(/[\u0300-\u036f]/g, "")
    .split(/[^a-z0-9]+/).filter(Boolean);
  let name = "";
  for (const word of words) {
    const next = name ? `${name}-${word}` : word;
    if (next.length > 40) break;
    name = next;
    if (name.split("-").length >= 5) break;
  }
  return (name || words.join("-").slice(0, 40)).replace(/^-+|-+$/g, "").slice(0, NAME_MAX);
}

// Codes that name a field without saying so in `field`.
function locate(err) {
  return {
    environment_not_found: "env",
    already_exists: "name",
    name_taken: "name",
    message_too_large: "message",
    invalid_name: "name",
    unknown_harness: "harness",
    invalid_schema: "output_schema",
    invalid_context: "context",
    upload_not_found: "context",
    payload_too_large: "context",
    too_many_uploads: "context",
  }[err.code] || null;
}

export function renderNewSession(main, ctx) {
  let stopped = false;
  let named = false; // the person typed a name: stop suggesting
  const message = h("textarea", { rows: 5, required: true });
  const name = h("input", { type: "text", required: true, maxlength: NAME_MAX, autocomplete: "off", spellcheck: "false" });
  const env = h("select", { required: true }, h("option", { value: "" }, "loading…"));
  const harness = h("select", {}, HARNESSES.map(([value, label]) => h("option", { value }, label)));
  const model = h("input", { type: "text", autocomplete: "off", placeholder: "the harness's default" });
  const idle = h("input", { type: "number", min: 0, max: 10080, step: "any", placeholder: "the server's default" });
  const files = h("input", { type: "file", multiple: true });
  const chosen = h("ul", { class: "files muted", "aria-live": "polite" });
  const schema = h("textarea", { rows: 4, spellcheck: "false", placeholder: '{"type": "object", "properties": {...}}' });
  const submit = h("button", { type: "submit", class: "primary" }, "Start session");
  const progress = h("p", { class: "muted", "aria-live": "polite" });
  const general = formError();

  const fields = {
    message: field("new-message", "Message", message, "The first turn's task. Ctrl+Enter starts the session."),
    name: field("new-name", "Name", name, "Suggested from the message; lowercase letters, digits and dashes."),
    env: field("new-env", "Environment", env),
    harness: field("new-harness", "Harness", harness),
    model: field("new-model", "Model", model),
    idle_minutes: field("new-idle", "Idle minutes", idle, "How long it may sit idle before it suspends itself; 0 keeps it up."),
    context: field("new-files", "Files", files, "Attached as context: the agent finds them in $HANGAR_IO/in/1/."),
    output_schema: field("new-schema", "Output schema (optional)", schema, "A JSON Schema the turn's result must match."),
  };
  fields.context.row.append(chosen);

  const form = h("form", { class: "stack card", id: "new-session", novalidate: true },
    ...Object.values(fields).map((f) => f.row), general,
    h("div", { class: "row" }, submit, progress));
  main.append(h("h1", {}, "New session"), form);

  message.addEventListener("input", () => {
    if (!named) name.value = suggestName(message.value);
  });
  name.addEventListener("input", () => {
    named = name.value !== "";
  });
  // Enter submits from every single-line field (the browser's own); Ctrl+Enter from the boxes.
  for (const box of [message, schema]) {
    box.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
  }
  files.addEventListener("change", () => {
    chosen.replaceChildren(...Array.from(files.files, (f) => h("li", {}, `${f.name} (${bytes(f.size)})`)));
  });

  async function loadEnvironments() {
    try {
      const envs = await call("GET", "/api/envs");
      if (stopped) return;
      if (!envs.length) {
        env.replaceChildren(h("option", { value: "" }, "no environments yet"));
        fields.env.row.append(h("p", { class: "hint" }, "Add one first: ",
          h("a", { href: "/environments" }, "Environments"), "."));
        return;
      }
      env.replaceChildren(...envs.map((e) => h("option", { value: e.name, title: e.repo }, `${e.name} · ${repoText(e.repo)}${e.branch ? ` · ${e.branch}` : ""}`)));
      const wanted = new URLSearchParams(location.search).get("env");
      if (wanted && envs.some((e) => e.name === wanted)) env.value = wanted;
    } catch (err) {
      if (!stopped) ctx.fail(err);
    }
  }

  // The body, or a FieldError for what the page checks itself.
  function body() {
    if (!message.value.trim()) throw new FieldError("message", "invalid_input", "a message is needed: the first turn's task");
    if (!name.value) throw new FieldError("name", "invalid_input", "a name is needed");
    if (!env.value) throw new FieldError("env", "invalid_input", "an environment is needed: add one on the Environments page");
    const out = { name: name.value, message: message.value, env: env.value, harness: harness.value };
    if (model.value.trim()) out.model = model.value.trim();
    if (idle.value !== "") {
      const minutes = Number(idle.value);
      if (!Number.isFinite(minutes)) throw new FieldError("idle_minutes", "invalid_input", "idle minutes must be a number");
      out.idle_minutes = minutes;
    }
    if (schema.value.trim()) {
      let parsed;
      try {
        parsed = JSON.parse(schema.value);
      } catch (err) {
        throw new FieldError("output_schema", "invalid_json", `the output schema is not JSON: ${err.message}`);
      }
      if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) {
        throw new FieldError("output_schema", "invalid_schema", "the output schema must be a JSON object (a JSON Schema)");
      }
      out.output_schema = parsed;
    }
    return out;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(fields, general);
    submit.disabled = true;
    try {
      const request = body();
      request.context = [];
      const list = Array.from(files.files);
      for (const [i, file] of list.entries()) {
        progress.textContent = `Uploading ${file.name} (${i + 1} of ${list.length})…`;
        try {
          request.context.push(await uploadFile(file));
        } catch (err) {
          err.data = { ...(err.data || {}), field: "context" };
          throw err;
        }
      }
      progress.textContent = "Starting…";
      await call("POST", "/api/sessions", request);
      if (stopped) return;
      ctx.navigate(`/sessions/${encodeURIComponent(request.name)}`);
    } catch (err) {
      if (stopped) return;
      progress.textContent = "";
      if (err.status === 401) ctx.fail(err);
      else showFieldError(err, fields, general, locate);
    } finally {
      submit.disabled = false;
    }
  });

  loadEnvironments();
  message.focus();
  return {
    stop() {
      stopped = true;
    },
  };
}
