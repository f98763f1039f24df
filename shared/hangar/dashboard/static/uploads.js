// Files attached to a message, sent as context items through the uploads API
// (docs/exchange.md): POST /api/uploads, PUT each part's raw bytes, POST .../complete with the
// whole's sha256; the item then names its upload_id.

import { ApiError, call, token } from "./api.js";

const HEX = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

// The hex SHA-256 of an ArrayBuffer: the browser's own where it offers one (a secure context:
// https, or this machine), else a plain implementation.
export async function sha256(buffer) {
  if (globalThis.crypto && crypto.subtle) {
    return HEX(new Uint8Array(await crypto.subtle.digest("SHA-256", buffer)));
  }
  return HEX(sha256Plain(new Uint8Array(buffer)));
}

const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

export function sha256Plain(data) {
  const bits = data.length * 8;
  const padded = new Uint8Array(Math.ceil((data.length + 9) / 64) * 64);
  padded.set(data);
  padded[data.length] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.length - 8, Math.floor(bits / 2 ** 32));
  view.setUint32(padded.length - 4, bits >>> 0);
  const hash = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
  const w = new Uint32Array(64);
  const rot = (x, n) => (x >>> n) | (x << (32 - n));
  for (let off = 0; off < padded.length; off += 64) {
    for (let i = 0; i < 16; i++) w[i] = view.getUint32(off + i * 4);
    for (let i = 16; i < 64; i++) {
      const s0 = rot(w[i - 15], 7) ^ rot(w[i - 15], 18) ^ (w[i - 15] >>> 3);
      const s1 = rot(w[i - 2], 17) ^ rot(w[i - 2], 19) ^ (w[i - 2] >>> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    let [a, b, c, d, e, f, g, hh] = hash;
    for (let i = 0; i < 64; i++) {
      const t1 = (hh + (rot(e, 6) ^ rot(e, 11) ^ rot(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i]) >>> 0;
      const t2 = ((rot(a, 2) ^ rot(a, 13) ^ rot(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
      hh = g; g = f; f = e; e = (d + t1) >>> 0; d = c; c = b; b = a; a = (t1 + t2) >>> 0;
    }
    const next = [a, b, c, d, e, f, g, hh];
    for (let i = 0; i < 8; i++) hash[i] = (hash[i] + next[i]) >>> 0;
  }
  const out = new Uint8Array(32);
  const outView = new DataView(out.buffer);
  hash.forEach((v, i) => outView.setUint32(i * 4, v));
  return out;
}

async function putPart(uploadId, n, blob) {
  let response;
  try {
    response = await fetch(`/api/uploads/${encodeURIComponent(uploadId)}/parts/${n}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${token.get() || ""}`, "Content-Type": "application/octet-stream" },
      body: blob,
    });
  } catch (err) {
    throw new ApiError(0, "unreachable", `the server did not answer (${err.message})`);
  }
  if (response.ok) return;
  let error = {};
  try {
    error = (await response.json()).error || {};
  } catch {
    // not JSON: the status line below
  }
  throw new ApiError(response.status, error.code || `http_${response.status}`,
    error.message || response.statusText || "the request failed", error);
}

// Upload `file` (a File) as a context item of kind "file"; answers the item to send.
export async function uploadFile(file) {
  const upload = await call("POST", "/api/uploads", { kind: "file" });
  const part = Math.max(1, Math.floor(upload.part_mb * 2 ** 20));
  let n = 1;
  for (let at = 0; at < file.size || n === 1; at += part, n++) {
    await putPart(upload.upload_id, n, file.slice(at, at + part));
  }
  const digest = await sha256(await file.arrayBuffer());
  await call("POST", `/api/uploads/${encodeURIComponent(upload.upload_id)}/complete`, { sha256: digest });
  return { kind: "file", name: file.name, upload_id: upload.upload_id };
}
