// The REST API as the page calls it: the signed-in token as the bearer header, errors as
// ApiError with the API's stable code and message. The page holds no logic the API lacks.

const KEY = "hangar.token";

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => sessionStorage.setItem(KEY, value),
  clear: () => sessionStorage.removeItem(KEY),
};

// data: the error's other fields as the API sent them (e.g. `field`, the one it names).
export class ApiError extends Error {
  constructor(status, code, message, data = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.data = data;
  }
}

export function sessionPath(name, tail) {
  return `/api/sessions/${encodeURIComponent(name)}${tail ? `/${tail}` : ""}`;
}

async function failure(response) {
  let code = `http_${response.status}`;
  let message = response.statusText || "the request failed";
  let data = {};
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
      data = body.error;
    }
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, code, message, data);
}

// call(method, path, body?, {raw, signal}): the parsed JSON answer (or the Response when raw).
export async function call(method, path, body, { raw = false, signal } = {}) {
  const headers = { Authorization: `Bearer ${token.get() || ""}` };
  const init = { method, headers, signal };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "unreachable", `the server did not answer (${err.message})`);
  }
  if (!response.ok) throw await failure(response);
  if (raw) return response;
  return response.status === 204 ? null : response.json();
}
