// pages/events.js — #/ops/events (admins): the event consumer groups and the events they parked
// (API.md → Event consumer groups). Groups: this instance's live view (lag, health — ok,
// failing or stuck with the last error —, handled and failed counts) merged by group and topic
// with the database's (outbox rows waiting behind the group, parked events by state), with
// "replay all of this group" (after a window.confirm). Parked events: the open ones by default
// (parked, or on their way to a replay), filtered by group and state in the hash
// (#/ops/events?group=feed&state=discarded); each with topic, key, failure kind, attempts, last
// error, when it was parked and its payload (expandable), Replay, and Discard with a reason
// (an inline form). Re-polled every 3 s while visible; rows are updated in place, so an open
// payload, a half-typed reason and the focus stay.

import { h, uid } from "../dom.js";
import { api, isAbort, ApiError } from "../api.js";
import { t, fmtTime, fmtRelative, fmtDuration } from "../i18n.js";
import { input, select, alertBox, statusLine, onSubmit, actionButton, table, heading, errorText } from "../ui.js";
import { opsTabs, notAdmin, every, learnSkew, serverNow } from "./ops.js";

const POLL_MS = 3000;
/** Parked events one view lists (the API's default page). */
const LIMIT = 100;
/** The states of an open event: waiting for an operator, or for its replay to be applied. */
const OPEN = ["parked", "replay", "replaying"];
const STATES = ["open", ...OPEN, "replayed", "discarded", "all"];

const set = (el, text) => { if (el.textContent !== text) el.textContent = text; };
const count = (v) => (v == null ? "—" : String(v));
const seconds = (s) => fmtDuration(Math.max(0, Number(s) || 0) * 1000);

/** t(`${prefix}.${value}`), or the value itself when there is no such text (a newer server). */
function label(prefix, value) {
  const key = `${prefix}.${value}`;
  const s = t(key);
  return s === key ? String(value ?? "—") : s;
}

async function getGroups(signal) {
  const r = await api("/admin/events/groups", { raw: true, signal });
  learnSkew(r.headers);
  if (r.body?.code === 0 && r.status < 300) return r.body.data || { live: [], stored: [] };
  throw notAdmin(new ApiError(r.status, r.body?.code ?? -1, r.body?.msg || t("err.http", { status: r.status })));
}

/** The parked events of the view: `state` one of STATES; "open" asks for each open state. */
async function getParked(signal, group, state) {
  const one = (s) => api("/admin/events/parked", { query: { group, state: s, limit: LIMIT }, signal });
  if (state === "all") return one(null);
  if (state !== "open") return one(state);
  const lists = await Promise.all(OPEN.map(one));
  return lists.flat().sort((a, b) => b.id - a.id).slice(0, LIMIT);
}

/** Live and stored groups as one list, by group and topic. */
function merge({ live = [], stored = [] }) {
  const byKey = new Map();
  const at = (g) => {
    const key = `${g.group}\n${g.topic}`;
    if (!byKey.has(key)) byKey.set(key, { key, group: g.group, topic: g.topic, live: null, stored: null });
    return byKey.get(key);
  };
  for (const g of live) at(g).live = g;
  for (const g of stored) at(g).stored = g;
  return [...byKey.values()].sort((a, b) => a.group.localeCompare(b.group) || a.topic.localeCompare(b.topic));
}

/** Who resolved a parked event, when, and (discarded) why; who asked for a replay. */
function resolution(p) {
  const at = p.resolved_at != null ? fmtTime(p.resolved_at, { seconds: true }) : null;
  if (p.state === "discarded") return [p.resolved_by, at, p.note].filter(Boolean).join(" · ");
  if (p.state === "replayed") return [p.resolved_by, at].filter(Boolean).join(" · ");
  // Parked again after a replay, or on its way to one: who asked (the note is the platform's).
  return p.resolved_by ? t("events.askedBy", { by: p.resolved_by }) : "—";
}

/** The payload as indented JSON when it is JSON, else as stored. */
function payloadText(payload) {
  try { return JSON.stringify(JSON.parse(payload), null, 2); } catch { return String(payload ?? ""); }
}

export async function events(ctx) {
  const group = ctx.query.get("group") || "";
  const state = STATES.includes(ctx.query.get("state")) ? ctx.query.get("state") : "open";
  let first;
  try {
    first = await Promise.all([getGroups(ctx.signal), getParked(ctx.signal, group || null, state)]);
  } catch (err) { throw notAdmin(err); }

  const pollAlert = alertBox();
  const done = statusLine();
  let poller = null;
  const refresh = () => poller?.now();
  const go = (g, s) => {
    const q = new URLSearchParams();
    if (g) q.set("group", g);
    if (s && s !== "open") q.set("state", s);
    const qs = q.toString();
    ctx.navigate(`#/ops/events${qs ? `?${qs}` : ""}`);
  };

  // ---- groups ----
  const gBody = h("tbody");
  const gRows = new Map(); // key → entry
  const noGroups = h("p", { class: "empty muted" }, t("events.noGroups"));

  function groupRow(g) {
    const alert = alertBox();
    const cells = {
      lag: h("td", { class: "num", dataset: { test: "lag" } }),
      badge: h("span", { class: "badge", dataset: { test: "health" } }),
      failing: h("span", { class: "meta" }),
      error: h("div", { class: "error-text", dataset: { test: "last-error" } }),
      waiting: h("td", { class: "num", dataset: { test: "waiting" } }),
      parked: h("td", { class: "num", dataset: { test: "parked" } }),
      replayed: h("td", { class: "num", dataset: { test: "replayed" } }),
      discarded: h("td", { class: "num", dataset: { test: "discarded" } }),
      handled: h("td", { class: "num", dataset: { test: "handled" } }),
    };
    const replayAll = actionButton(t("events.replayGroup"), "replay-group", async () => {
      const n = entry.g.stored?.parked ?? 0;
      if (!confirm(t("events.confirmReplayGroup", { n, group: entry.g.group, topic: entry.g.topic }))) return;
      const r = await api("/admin/events/replay", { method: "POST", body: { group: entry.g.group, topic: entry.g.topic } });
      done.show(t("events.marked", { n: r?.count ?? 0 }));
      refresh();
    }, alert, { class: "small", "aria-label": t("events.replayGroupLabel", { group: g.group, topic: g.topic }) });
    const show = h("a", { href: "#/ops/events", dataset: { action: "show-parked" },
      "aria-label": t("events.showParkedLabel", { group: g.group }) }, t("events.showParked"));
    const tr = h("tr", { dataset: { group: g.group, topic: g.topic } },
      h("td", { class: "mono" }, g.group),
      h("td", { class: "mono" }, g.topic),
      cells.lag,
      h("td", { class: "health" }, cells.badge, " ", cells.failing, cells.error),
      cells.waiting, cells.parked, cells.replayed, cells.discarded, cells.handled,
      h("td", { class: "row-actions" }, replayAll, show, alert));
    const entry = { g, tr, cells, replayAll, show };
    return entry;
  }

  function paintGroup(entry) {
    const { g, cells, tr } = entry;
    const live = g.live;
    const stored = g.stored;
    set(cells.lag, live ? seconds(live.lag_seconds) : "—");
    let health = "elsewhere";
    if (live) health = live.stuck ? "stuck" : live.failing_seconds > 0 ? "failing" : "ok";
    tr.dataset.health = health;
    set(cells.badge, label("events.h", health));
    cells.badge.className = `badge ${{ ok: "ok", failing: "warn", stuck: "bad" }[health] || ""}`;
    cells.badge.title = live?.last_failure ? label("events.f", live.last_failure) : "";
    const failing = live && health !== "ok";
    set(cells.failing, failing ? t("events.failingFor", { d: seconds(live.failing_seconds) }) : "");
    set(cells.error, failing ? live.last_error || "" : "");
    cells.error.hidden = !failing || !live.last_error;
    if (stored?.waiting == null) set(cells.waiting, "—");
    else if (stored.waiting > 0) set(cells.waiting, `${stored.waiting} (${t("events.oldest", { d: seconds(stored.oldest_waiting_seconds) })})`);
    else set(cells.waiting, "0");
    const parked = stored?.parked ?? live?.open_parked ?? 0;
    set(cells.parked, stored?.replaying ? `${parked} (${t("events.replayingN", { n: stored.replaying })})` : String(parked));
    tr.dataset.parked = String(parked);
    set(cells.replayed, count(stored?.replayed));
    set(cells.discarded, count(stored?.discarded));
    set(cells.handled, live ? `${live.handled} / ${live.failed}` : "—");
    entry.replayAll.hidden = !(stored?.parked > 0);
    // The group's open events, or, when it has none open, everything it ever parked.
    const open = parked + (stored?.replaying ?? 0);
    entry.show.hidden = !(open + (stored?.replayed ?? 0) + (stored?.discarded ?? 0) > 0);
    const href = `#/ops/events?group=${encodeURIComponent(g.group)}${open > 0 ? "" : "&state=all"}`;
    if (entry.show.getAttribute("href") !== href) entry.show.setAttribute("href", href);
  }

  function paintGroups(data) {
    const list = merge(data);
    const seen = new Set();
    for (const g of list) {
      seen.add(g.key);
      let entry = gRows.get(g.key);
      if (!entry) { entry = groupRow(g); gRows.set(g.key, entry); } else entry.g = g;
      paintGroup(entry);
    }
    for (const [key, entry] of gRows) if (!seen.has(key)) { entry.tr.remove(); gRows.delete(key); }
    const want = list.map((g) => gRows.get(g.key).tr);
    if (want.length !== gBody.children.length || want.some((tr, i) => tr !== gBody.children[i])) gBody.append(...want);
    noGroups.hidden = list.length > 0;
    return list;
  }

  // ---- parked events ----
  const pBody = h("tbody");
  const pRows = new Map(); // id → entry
  const noParked = h("p", { class: "empty muted", dataset: { test: "no-parked" } },
    state === "open" ? t("events.noOpen") : t("events.noParked"));
  const limited = h("p", { class: "meta", hidden: true }, t("events.limited", { n: LIMIT }));
  const parkedTitle = h("h2", { id: "parked-title", tabindex: "-1" }, t("events.parkedTitle"));

  function parkedRow(p) {
    const alert = alertBox();
    const cells = {
      failure: h("span", { class: "badge", dataset: { test: "failure" } }),
      attempts: h("td", { class: "num", dataset: { test: "attempts" } }),
      error: h("div", { dataset: { test: "last-error" } }),
      first: h("div", { class: "meta" }),
      parkedAt: h("time", { dataset: { test: "parked-at" } }),
      state: h("span", { class: "badge", tabindex: "-1", dataset: { test: "state" } }),
      resolution: h("td", { class: "note", dataset: { test: "resolution" } }),
      payload: h("pre", { class: "payload" }),
    };
    const replay = actionButton(t("events.replay"), "replay", async () => {
      const r = await api("/admin/events/replay", { method: "POST", body: { ids: [entry.p.id] } });
      if (r?.count) {
        entry.p.state = "replay";
        paintParked(entry); // hides the buttons: the focus goes to the state they changed
        entry.cells.state.focus();
        done.show(t("events.marked", { n: r.count }));
      } else done.show(t("events.nothingChanged"));
      refresh();
    }, alert, { class: "small", "aria-label": t("events.replayOne", { id: p.id }) });
    const discard = h("button", { type: "button", class: "small danger", dataset: { action: "discard" },
      "aria-expanded": "false", "aria-label": t("events.discardOne", { id: p.id }) }, t("events.discard"));
    discard.addEventListener("click", () => toggleDiscard(entry));
    const tr = h("tr", { dataset: { parked: p.id, group: p.group, topic: p.topic } },
      h("td", { class: "num" }, String(p.id)),
      h("td", { class: "mono" }, h("strong", null, p.group), h("br"), h("span", { class: "muted" }, p.topic)),
      h("td", { class: "mono", dataset: { test: "key" } }, p.key),
      h("td", null, cells.failure),
      cells.attempts,
      h("td", { class: "error-text" }, cells.error, cells.first),
      h("td", null, cells.parkedAt),
      h("td", null, cells.state),
      cells.resolution,
      h("td", { class: "payload-cell" },
        h("details", { dataset: { test: "payload" } }, h("summary", null, t("events.payload")), cells.payload)),
      h("td", { class: "row-actions" }, replay, discard, alert));
    const entry = { p, tr, cells, replay, discard, formRow: null };
    return entry;
  }

  function paintParked(entry) {
    const { p, cells, tr } = entry;
    tr.dataset.state = p.state;
    set(cells.failure, label("events.f", p.failure));
    cells.failure.className = `badge fk-${p.failure}`;
    set(cells.attempts, String(p.attempts));
    set(cells.error, p.last_error || "");
    const first = p.first_error && p.first_error !== p.last_error ? t("events.firstError", { error: p.first_error }) : "";
    set(cells.first, first);
    cells.first.hidden = !first;
    set(cells.parkedAt, fmtRelative(p.parked_at, serverNow()));
    cells.parkedAt.dateTime = new Date(p.parked_at).toISOString();
    cells.parkedAt.title = fmtTime(p.parked_at, { seconds: true });
    set(cells.state, label("events.s", p.state));
    cells.state.className = `badge p-${p.state}`;
    set(cells.resolution, resolution(p));
    set(cells.payload, payloadText(p.payload));
    const open = p.state === "parked";
    entry.replay.hidden = !open;
    entry.discard.hidden = !open;
    if (!open && entry.formRow) toggleDiscard(entry);
  }

  function toggleDiscard(entry) {
    if (entry.formRow) {
      const hadFocus = entry.formRow.contains(document.activeElement);
      entry.formRow.remove();
      entry.formRow = null;
      entry.discard.setAttribute("aria-expanded", "false");
      if (hadFocus && !entry.discard.hidden) entry.discard.focus();
      return;
    }
    const { p } = entry;
    const alert = alertBox();
    const reason = input("reason", { id: uid("reason"), maxlength: 500, placeholder: t("events.reasonPlaceholder") });
    const cancel = h("button", { type: "button", class: "link" }, t("cancel"));
    cancel.addEventListener("click", () => toggleDiscard(entry));
    const form = h("form", { class: "inline-form", "aria-label": t("events.discardOne", { id: p.id }) },
      h("label", { for: reason.id }, t("events.reason")), reason,
      h("button", { type: "submit", class: "small danger", dataset: { action: "discard-confirm" } }, t("events.discard")),
      cancel, alert);
    onSubmit(form, alert, async () => {
      const r = await api("/admin/events/discard", { method: "POST", body: { ids: [p.id], reason: reason.value.trim() } });
      done.show(r?.count ? t("events.discardedN", { n: r.count }) : t("events.nothingChanged"));
      toggleDiscard(entry);
      refresh();
    });
    entry.formRow = h("tr", { class: "edit-row", dataset: { discard: p.id } }, h("td", { colspan: 11 }, form));
    entry.tr.after(entry.formRow);
    entry.discard.setAttribute("aria-expanded", "true");
    reason.focus();
  }

  function paintParkedList(list) {
    const seen = new Set();
    for (const p of list) {
      seen.add(p.id);
      let entry = pRows.get(p.id);
      if (!entry) { entry = parkedRow(p); pRows.set(p.id, entry); } else entry.p = p;
      paintParked(entry);
    }
    for (const [id, entry] of pRows) {
      if (seen.has(id)) continue;
      const focused = entry.tr.contains(document.activeElement) || entry.formRow?.contains(document.activeElement);
      entry.tr.remove(); entry.formRow?.remove(); pRows.delete(id);
      if (focused) parkedTitle.focus(); // the row left the view (replayed, discarded)
    }
    // Keep the API's order (newest first); move rows only when it changed (moving blurs buttons).
    const want = list.map((p) => pRows.get(p.id).tr);
    const have = [...pBody.children].filter((r) => !r.classList.contains("edit-row"));
    if (want.length !== have.length || want.some((r, i) => r !== have[i])) {
      for (const p of list) {
        const e = pRows.get(p.id);
        pBody.append(e.tr);
        if (e.formRow) pBody.append(e.formRow);
      }
    }
    noParked.hidden = list.length > 0;
    limited.hidden = list.length < LIMIT;
  }

  // ---- filters ----
  const groups = paintGroups(first[0]);
  paintParkedList(first[1]);
  const names = [...new Set([...groups.map((g) => g.group), ...(group ? [group] : [])])].sort();
  const groupFilter = select("group", [["", t("events.allGroups")], ...names.map((n) => [n, n])], { value: group });
  groupFilter.id = "events-group";
  const stateFilter = select("state", STATES.map((s) => [s, label("events.s", s)]), { value: state });
  stateFilter.id = "events-state";
  groupFilter.addEventListener("change", () => go(groupFilter.value, stateFilter.value));
  stateFilter.addEventListener("change", () => go(groupFilter.value, stateFilter.value));

  poller = every(ctx, POLL_MS, async () => {
    try {
      const [g, p] = await Promise.all([getGroups(ctx.signal), getParked(ctx.signal, group || null, state)]);
      pollAlert.clear();
      paintGroups(g);
      paintParkedList(p);
    } catch (err) {
      if (!isAbort(err)) pollAlert.show(errorText(err));
    }
  });

  return h("section", { class: "wide-page" },
    heading(t("ops.events")),
    opsTabs("#/ops/events"),
    pollAlert,
    done,
    h("section", { class: "card", "aria-labelledby": "groups-title" },
      h("h2", { id: "groups-title" }, t("events.groupsTitle")),
      table([t("events.group"), t("events.topic"), t("events.lag"), t("events.health"), t("events.waiting"),
        t("events.parked"), t("events.replayedCol"), t("events.discardedCol"), t("events.handled"), ""],
      gBody, { class: "list events-groups", dataset: { test: "events-groups" }, "aria-labelledby": "groups-title" }),
      noGroups,
      h("p", { class: "meta" }, t("events.live"))),
    h("section", { class: "card", "aria-labelledby": "parked-title" },
      parkedTitle,
      h("div", { class: "filters" },
        h("div", { class: "field inline" }, h("label", { for: groupFilter.id }, t("events.filterGroup")), groupFilter),
        h("div", { class: "field inline" }, h("label", { for: stateFilter.id }, t("events.filterState")), stateFilter)),
      table([t("runs.id"), t("events.groupTopic"), t("events.key"), t("events.failure"), t("events.attempts"),
        t("events.lastError"), t("events.parkedAt"), t("status"), t("events.resolution"), t("events.payload"), ""],
      pBody, { class: "list events-parked", dataset: { test: "events-parked" }, "aria-labelledby": "parked-title" }),
      noParked,
      limited));
}
