// notify.js — the signed-in user's unread notification count, live: the nav's badge. Loaded by
// app.js after the first page has rendered (the stream never delays a page), started while
// someone is signed in and stopped at logout.
//
// GET /notifications/stream is Server-Sent Events sent with the access token in the
// Authorization header, which EventSource cannot send: the stream is read with fetch and its
// ReadableStream, parsed here (`event: unread` / `data: {"count": n}`, comments ignored). The
// token comes from api.js (freshAccess: refreshed first when about to expire; renewAccess after
// a 401: the same one-at-a-time refresh api() does, which clears the session when the refresh
// token is refused). The server ends a stream after 10 minutes or when it drains: the stream is
// opened again at once when it had worked, else after a growing pause (1 s doubling to 60 s,
// with jitter). While it is down the count is polled (GET /notifications/unread) at once and
// every 30 s. Pages that change the count (marking read) call refresh() for an immediate
// answer. The stream is closed while the page sits in the back/forward cache (pagehide) and
// opened again when it comes back (pageshow). A 204 answer means the stream is switched off for
// this user (the `notifications_stream` rollout): the count is polled, and the stream asked
// for again every 10 minutes (the rollout may have widened).

import { acceptLanguage } from "./i18n.js";
import { api, freshAccess, renewAccess, isAbort } from "./api.js";

const POLL_MS = 30000;
const FIRST_PAUSE_MS = 1000;
const MAX_PAUSE_MS = 60000;
const SWITCHED_OFF_MS = 600000;

let run = null; // {uid, controller, pollTimer, onCount}
let last = null;

/** Shows `count`, learnt from `via` ("stream" or "poll"). */
function show(count, via) {
  if (!run || !Number.isFinite(count)) return;
  last = count;
  run.onCount(count, via);
}

/** The count seen last (null before the first). */
export function unread() { return last; }

/** Reads the count now (GET /notifications/unread) and shows it. */
export async function refresh() {
  const my = run;
  if (!my) return;
  try {
    const r = await api("/notifications/unread", { signal: my.controller.signal });
    if (run === my) show(Number(r?.count), "poll");
  } catch { /* the stream or the next poll tells */ }
}

function startPolling(my) {
  if (my.pollTimer) return;
  const tick = () => { if (run === my) refresh(); };
  tick();
  my.pollTimer = setInterval(tick, POLL_MS);
}

function stopPolling(my) {
  clearInterval(my.pollTimer);
  my.pollTimer = null;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() { clearTimeout(timer); signal.removeEventListener("abort", done); resolve(); }
    signal.addEventListener("abort", done);
  });
}

/** Calls `onEvent(name, data)` for each event of the SSE body until it ends. */
async function readEvents(body, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (!line || line.startsWith(":")) continue; // a keep-alive comment
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") name = text;
          else if (field === "data") data.push(text);
        }
        if (data.length) onEvent(name, data.join("\n"));
      }
    }
  } finally {
    reader.releaseLock?.();
  }
}

/** Keeps a stream open for `my` until it is stopped. */
async function loop(my) {
  const { signal } = my.controller;
  let pauseMs = FIRST_PAUSE_MS;
  let renewed = false;
  while (!signal.aborted) {
    let worked = false;
    let access = "";
    try {
      access = await freshAccess();
      const res = await fetch("/notifications/stream", {
        headers: { Accept: "text/event-stream", "Accept-Language": acceptLanguage(), Authorization: `Bearer ${access}` },
        signal,
        credentials: "same-origin",
        cache: "no-store",
      });
      if (res.status === 401 && !renewed) {
        renewed = true;
        if (await renewAccess(access)) continue; // a new token: at once, once
      }
      if (res.status === 204) {
        renewed = false;
        startPolling(my);
        await pause(SWITCHED_OFF_MS, signal);
        continue;
      }
      if (res.ok && res.body) {
        renewed = false;
        await readEvents(res.body, (name, data) => {
          if (name !== "unread") return;
          let count = NaN;
          try { count = Number(JSON.parse(data).count); } catch { /* not ours */ }
          if (!Number.isFinite(count)) return;
          if (!worked) { worked = true; stopPolling(my); pauseMs = FIRST_PAUSE_MS; }
          show(count, "stream");
        });
      }
    } catch (err) {
      if (isAbort(err) || signal.aborted) return;
    }
    if (signal.aborted) return;
    // Down: the count by polling until a stream works again. A stream that worked and ended
    // (its 10 minutes, a draining server) is opened again after the shortest pause.
    startPolling(my);
    const wait = worked ? FIRST_PAUSE_MS : pauseMs;
    if (!worked) pauseMs = Math.min(pauseMs * 2, MAX_PAUSE_MS);
    await pause(wait * (0.75 + Math.random() * 0.5), signal);
  }
}

/** Starts following user `uid`'s count (calling `onCount(n, via)`, via "stream" or "poll"); a
 * start for the same user is a no-op, for another one restarts. */
export function start(uid, onCount) {
  if (run && run.uid === uid) { run.onCount = onCount; return; }
  stop();
  const my = { uid, controller: new AbortController(), pollTimer: null, onCount };
  run = my;
  loop(my);
}

/** Stops the stream and the polling (logout). */
export function stop() {
  parked = null;
  end();
}

function end() {
  if (!run) return;
  const my = run;
  run = null;
  last = null;
  my.controller.abort();
  stopPolling(my);
}

// A page left for another is kept in the back/forward cache with its open requests: a stream
// would hold one of the browser's few connections to this server until the server next wrote
// to it (a keep-alive, up to 15 s), and a few quick reloads would wait that long for one. So the
// stream closes when the page is hidden that way and opens again if the page comes back.
let parked = null; // {uid, onCount} while the page is in the cache
window.addEventListener("pagehide", () => {
  if (!run) return;
  parked = { uid: run.uid, onCount: run.onCount };
  end();
});
window.addEventListener("pageshow", (e) => {
  if (!e.persisted || !parked) return;
  const { uid, onCount } = parked;
  parked = null;
  start(uid, onCount);
});
