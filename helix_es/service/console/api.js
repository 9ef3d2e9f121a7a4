// The memory service's JSON API (/v1/), with the key as a bearer token; errors keep the status and field.

const API = new URL("../v1/", document.baseURI);

export class ApiError extends Error {
  constructor(status, message, field) {
    super(message);
    this.status = status;
    this.field = field;
  }
}

export async function api(key, path, params = {}) {
  const url = new URL(path, API);
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined) url.searchParams.set(k, v);
  let response;
  try {
    response = await fetch(url, { headers: { Authorization: `Bearer ${key}`, Accept: "application/json" } });
  } catch (err) {
    throw new ApiError(0, `the server did not answer (${err.message}); is helix-es serve running?`);
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message = body && typeof body.error === "string" ? body.error : response.statusText;
    throw new ApiError(response.status, message, body ? body.field : undefined);
  }
  return body;
}

export const enc = encodeURIComponent;
export const sessionPath = (ns, sid) => `${enc(ns)}/sessions/${enc(sid)}`;
