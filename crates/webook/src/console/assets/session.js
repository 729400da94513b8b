// session.js — who is logged in, as this browser remembers it: the two tokens and a small cached
// profile ({uid, name, admin}) in localStorage, so that a page load needs no extra API call to
// draw the nav. Listeners hear every change (login, logout, a token refresh failing, another tab).

const ACCESS = "webook.access";
const REFRESH = "webook.refresh";
const INFO = "webook.session";
const ACCESS_AT = "webook.accessAt";

const listeners = new Set();

function read(key) {
  try { return localStorage.getItem(key) || ""; } catch { return ""; }
}
function write(key, value) {
  try {
    if (value) localStorage.setItem(key, value); else localStorage.removeItem(key);
  } catch { /* storage disabled: the session lasts as long as the page */ }
}

export const tokens = {
  access: () => read(ACCESS),
  refresh: () => read(REFRESH),
  set(access, refresh) {
    if (access) { write(ACCESS, access); write(ACCESS_AT, String(Date.now())); }
    if (refresh) write(REFRESH, refresh);
  },
  /** True when the access token is about to expire (or missing while a refresh token is
   * there), so api.js refreshes first instead of collecting a 401. Measured from when this
   * browser received it (lifetime = exp − iat), so a wrong local clock does not matter. */
  accessExpiring(marginMs = 20000) {
    const access = read(ACCESS);
    if (!access) return !!read(REFRESH);
    const claims = claimsOf(access);
    if (!claims || !claims.exp) return false;
    const at = Number(read(ACCESS_AT)) || 0;
    if (claims.iat && at) return Date.now() > at + (claims.exp - claims.iat) * 1000 - marginMs;
    return Date.now() > claims.exp * 1000 - marginMs;
  },
};

/** {uid, name, admin} of the logged-in user, or null. */
export function current() {
  if (!tokens.access() && !tokens.refresh()) return null;
  let info = {};
  try { info = JSON.parse(read(INFO) || "{}") || {}; } catch { info = {}; }
  if (!info.uid) info.uid = uidFromToken(tokens.access() || tokens.refresh());
  return { uid: info.uid || 0, name: info.name || "", admin: info.admin === true };
}

export function loggedIn() { return current() !== null; }

/** Merges what is known about the user (after login, a profile read, an admin probe). */
export function update(patch) {
  const now = current() || {};
  write(INFO, JSON.stringify({ ...now, ...patch }));
  emit();
}

/** Forgets the tokens and the cached profile. */
export function clear() {
  const had = loggedIn();
  write(ACCESS, "");
  write(ACCESS_AT, "");
  write(REFRESH, "");
  write(INFO, "");
  if (had) emit();
}

export function onChange(fn) { listeners.add(fn); return () => listeners.delete(fn); }

function emit() { for (const fn of listeners) fn(current()); }

// Another tab logged in or out.
window.addEventListener("storage", (e) => {
  if (e.key === ACCESS || e.key === REFRESH || e.key === INFO || e.key === null) emit();
});

/** A JWT's claims, unverified (display and timing only; the server checks the token). */
function claimsOf(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(part.padEnd(Math.ceil(part.length / 4) * 4, "=")));
  } catch { return null; }
}

function uidFromToken(token) {
  const uid = claimsOf(token)?.uid;
  return Number.isSafeInteger(uid) ? uid : 0;
}
