// Form helpers for the pages that make things (New session, Environments): labelled fields
// whose errors sit next to them, and the API's errors put by the field they name.

import { h } from "./ui.js";

// A labelled field: { row, control, error }. The label is tied to the control by its id, and
// the error (empty until set) is the control's description, so a screen reader reads it too.
export function field(id, label, control, hint) {
  control.id = id;
  const error = h("p", { class: "field-error", id: `${id}-error`, hidden: true, "aria-live": "polite" });
  const described = [error.id];
  const parts = [h("label", { for: id }, label), control];
  if (hint) {
    parts.push(h("p", { class: "hint muted", id: `${id}-hint` }, hint));
    described.push(`${id}-hint`);
  }
  control.setAttribute("aria-describedby", described.join(" "));
  parts.push(error);
  // An error is about the value it was given: changing the value takes it away.
  const clear = () => {
    error.hidden = true;
    error.replaceChildren();
    control.removeAttribute("aria-invalid");
  };
  control.addEventListener("input", clear);
  control.addEventListener("change", clear);
  return { row: h("div", { class: "field" }, ...parts), control, error };
}

// Parse "KEY=VALUE" lines (blank lines skipped) as the CLI's --var and --secret do; throws a
// FieldError naming the field for a line without "=" or a key.
export function pairs(text, key, flag) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const at = line.indexOf("=");
    if (at <= 0) throw new FieldError(key, "invalid_input", `${flag} takes KEY=VALUE, not '${line.slice(0, 60)}'`);
    out[line.slice(0, at).trim()] = line.slice(at + 1);
  }
  return out;
}

// A check made in the page before anything is sent, shown as the API's errors are.
export class FieldError extends Error {
  constructor(field, code, message) {
    super(message);
    this.code = code;
    this.data = { field };
  }
}

// The form field an error names: `locate(err)` first (a page's own knowledge of codes), then
// the error's `field` (its first segment: "context.0.name" is "context"), then any of its data
// keys that is a field of the form. Null when it names none.
export function fieldOf(err, fields, locate = () => null) {
  const data = (err && err.data) || {};
  const own = locate(err);
  if (own && fields[own]) return own;
  if (typeof data.field === "string") {
    const first = data.field.split(".")[0];
    if (fields[first]) return first;
  }
  return Object.keys(data).find((key) => key !== "code" && key !== "message" && fields[key]) || null;
}

// Show `err` (an ApiError or FieldError) by the field it names, else in `general`; marks the
// field invalid and moves the focus to it. `fields` maps names to field() results.
export function showFieldError(err, fields, general, locate) {
  clearFieldErrors(fields, general);
  const name = fieldOf(err, fields, locate);
  const text = [`${err.message || String(err)} `, h("code", {}, `(${err.code || "error"})`)];
  if (!name) {
    general.replaceChildren(...text);
    general.hidden = false;
    general.focus();
    return null;
  }
  const f = fields[name];
  f.error.replaceChildren(...text);
  f.error.hidden = false;
  f.control.setAttribute("aria-invalid", "true");
  f.control.focus();
  return name;
}

export function clearFieldErrors(fields, general) {
  for (const f of Object.values(fields)) {
    f.error.hidden = true;
    f.error.replaceChildren();
    f.control.removeAttribute("aria-invalid");
  }
  general.hidden = true;
  general.replaceChildren();
}

// The general error box of a form (errors that name no field).
export function formError() {
  return h("div", { class: "notice bad form-error", role: "alert", tabindex: "-1", hidden: true });
}
