// api.js — the one way pages talk to the server: JSON in and out, the {code, msg, data}
// envelope (code 0 → data, anything else → ApiError with the server's msg), Accept-Language
// matching the UI, the access token as `Authorization: Bearer`, and on a 401 exactly one
// refresh with the refresh token (both rotate; one refresh at a time, across tabs too) and one
// retry. When the session is gone the tokens are cleared and listeners of session.js hear it.
// freshAccess() and renewAccess() give the same token handling to notify.js, whose stream
// api() cannot read.

import { acceptLanguage, t } from "./i18n.js";
import { tokens, clear as clearSession } from "./session.js";

export class ApiError extends Error {
  constructor(status, code, msg, { retryAfter = null, data = null } = {}) {
    super(msg);
    this.status = status; // HTTP status (0: no answer)
    this.code = code; // envelope code (-1: no envelope)
    this.retryAfter = retryAfter;
    this.data = data;
  }
}

/** True for errors a page should not show: the user navigated away. */
export function isAbort(err) {
  return err?.name === "AbortError" || (err instanceof DOMException && err.code === 20);
}

/** A fresh key for Idempotency-Key; crypto.randomUUID needs a secure context, so a fallback. */
export function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function url(path, query) {
  if (!query) return path;
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v != null && v !== "") qs.set(k, String(v));
  const s = qs.toString();
  return s ? `${path}?${s}` : path;
}

function keepTokens(res) {
  const access = res.headers.get("x-jwt-token");
  const refresh = res.headers.get("x-refresh-token");
  if (access || refresh) tokens.set(access, refresh);
}

let refreshing = null;

/** One refresh at a time in this tab (and, where Web Locks exist, across tabs). `stale` is the
 * access token that was refused: if another request or tab has replaced it meanwhile, there is
 * nothing to do but retry. Resolves true when a retry is worth it. */
function refresh(stale) {
  if (!refreshing) {
    const run = async () => {
      const now = tokens.access();
      if (now && now !== stale) return true;
      const rt = tokens.refresh();
      if (!rt) return false;
      let res;
      try {
        res = await fetch("/users/refresh_token", {
          method: "POST",
          headers: { Authorization: `Bearer ${rt}`, "Accept-Language": acceptLanguage(), Accept: "application/json" },
          credentials: "same-origin",
          cache: "no-store",
        });
      } catch {
        return false; // offline: keep the tokens, the caller shows the 401
      }
      let body = null;
      try { body = await res.json(); } catch { /* no body */ }
      if (res.ok && body?.code === 0) {
        keepTokens(res);
        return true;
      }
      if (res.status === 401 || res.status === 403) clearSession();
      return false;
    };
    const locked = navigator.locks?.request ? navigator.locks.request("webook-refresh", run) : run();
    refreshing = locked.finally(() => { refreshing = null; });
  }
  return refreshing;
}

/**
 * api(path, {method, body, query, idem, signal, bare, raw, auth}) → data.
 *  - idem: true (a fresh key) or a string: sent as Idempotency-Key, the same on the retry.
 *  - bare: the route answers a bare object (GET /users/profile), no envelope.
 *  - raw: resolve {status, headers, body} whatever the status or code (after the refresh dance).
 */
export async function api(path, opts = {}) {
  const { method = "GET", body, query, signal, bare = false, raw = false, auth = true } = opts;
  const idem = opts.idem === true ? newKey() : opts.idem;
  const target = url(path, query);
  for (let attempt = 0; ; attempt++) {
    const headers = { Accept: "application/json", "Accept-Language": acceptLanguage() };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    // An access token about to expire is refreshed first (no 401 round trip in the log).
    if (auth && attempt === 0 && tokens.refresh() && tokens.accessExpiring()) await refresh(tokens.access());
    const access = tokens.access();
    if (auth && access) headers.Authorization = `Bearer ${access}`;
    if (idem) headers["Idempotency-Key"] = idem;
    let res;
    try {
      res = await fetch(target, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
        credentials: "same-origin",
      });
    } catch (err) {
      if (isAbort(err)) throw err;
      throw new ApiError(0, -1, t("err.network"));
    }
    keepTokens(res);
    let json = null;
    const text = await res.text();
    if (text) { try { json = JSON.parse(text); } catch { json = null; } }

    if (res.status === 401 && auth && attempt === 0 && tokens.refresh()) {
      if (await refresh(access)) continue;
    }
    if (res.status === 401 && auth) clearSession();
    if (res.status === 403 && json?.code === 403001) clearSession(); // token from another client

    if (raw) return { status: res.status, headers: res.headers, body: json };

    const enveloped = json && typeof json === "object" && !Array.isArray(json) && typeof json.code === "number" && "msg" in json;
    if (bare && res.ok && json && !enveloped) return json;
    if (enveloped && json.code === 0 && res.ok) return json.data;
    const retryAfter = res.headers.get("Retry-After");
    if (enveloped) {
      throw new ApiError(res.status, json.code, json.msg || t("err.http", { status: res.status }), { retryAfter, data: json.data });
    }
    throw new ApiError(res.status, -1, t("err.http", { status: res.status }), { retryAfter });
  }
}

/** Like api() but also returns the response headers: {data, headers}. */
export async function apiWithHeaders(path, opts = {}) {
  const r = await api(path, { ...opts, raw: true });
  const json = r.body;
  if (json && typeof json.code === "number" && json.code === 0 && r.status < 300) return { data: json.data, headers: r.headers };
  throw new ApiError(r.status, json?.code ?? -1, json?.msg || t("err.http", { status: r.status }), { retryAfter: r.headers.get("Retry-After") });
}

/** The access token to send now, refreshed first when it is about to expire (as api() does):
 * for the one request api() cannot make, the notification stream read with fetch. */
export async function freshAccess() {
  if (tokens.refresh() && tokens.accessExpiring()) await refresh(tokens.access());
  return tokens.access();
}

/** After a 401 for the access token `stale`: the one refresh api() would do (shared with it, so
 * never two at once). Resolves true when a retry is worth it; a refused refresh token clears
 * the session, as in api(). */
export function renewAccess(stale) {
  return refresh(stale);
}
