// pages/notifications.js — #/notifications (every signed-in user): their notifications, most
// recently changed first, paged by the API's keyset cursor (`next` → `?cursor=`). Each kind in
// words: a reply or a comment (with its excerpt), likes and collects grouped per article and day
// ("12 people liked …": actorCnt, the latest actors named), a follow, a reward (amt in fen) and a
// moderator's decision (`moderation: {action, target, reason, until?}` when the server sends it;
// a moderation notification without it still shows). An unread one is marked read by its "Mark
// read" button or by following its link; "Mark all read" reads them all (POST
// /notifications/read {id} / {all: true}); the nav's badge follows at once (notify.js). Below,
// the kinds the user does not want to be told about (GET/PUT /notifications/preferences).

import { h, decodeHtml, uid } from "../dom.js";
import { api } from "../api.js";
import { t, fmtMoney, fmtTime } from "../i18n.js";
import { alertBox, statusLine, onSubmit, actionButton, pager, emptyItem, heading, time, userLink } from "../ui.js";

const PAGE = 20;
/** The kinds, in the order the preferences list them (as the API does). */
const KINDS = ["reply", "comment", "like", "collect", "follow", "reward", "moderation"];

/** The badge, told at once (notify.js is loaded by app.js after the first page). */
async function recount() {
  try { (await import("../notify.js")).refresh(); } catch { /* the stream tells */ }
}

function articleLink(article) {
  if (!article) return null;
  if (!article.title) return h("span", { class: "muted" }, t("notif.goneArticle"));
  return h("a", { href: `#/article/${article.id}`, dataset: { test: "article" } }, article.title);
}

/** The latest actors as links: "A, B and C". */
function actorList(actors) {
  const links = (actors || []).map((a) => userLink(a));
  if (!links.length) return [h("span", { class: "muted" }, t("notif.someone"))];
  const out = [];
  links.forEach((link, i) => {
    if (i > 0) out.push(i === links.length - 1 ? t("notif.and") : t("notif.comma"));
    out.push(link);
  });
  return out;
}

/** A grouped like or collect: one person by name, more as "n people" with the latest named. */
function grouped(n, kind, actors, article) {
  const what = articleLink(article) || t("feed.yourArticle");
  if (n <= 1) return [t.parts(`notif.${kind}.one`, { actor: actorList(actors), article: what })];
  return [t.parts(`notif.${kind}.many`, { n, article: what }),
    h("span", { class: "meta latest" }, " ", t.parts("notif.latest", { actors: actorList(actors) }))];
}

/** What a moderator decided, in words; `m` may be missing (an older server). */
function moderationText(n) {
  const m = n.moderation;
  const target = m?.target && ["article", "comment", "user"].includes(m.target) ? m.target : n.article ? "article" : n.comment ? "comment" : null;
  const action = m?.action;
  const known = ["hide", "restore", "delete", "suspend", "lift", "approve"].includes(action);
  const parts = [];
  if (!known) parts.push(t("notif.mod.generic"));
  else if (action === "suspend") {
    parts.push(m.until ? t("notif.mod.suspendUntil", { time: fmtTime(m.until) }) : t("notif.mod.suspendForGood"));
  } else if (action === "lift") parts.push(t("notif.mod.lift"));
  else parts.push(t(`notif.mod.${action}`, { target: t(`notif.target.${target || "article"}`) }));
  const what = articleLink(n.article);
  const excerpt = n.comment?.excerpt ? h("p", { class: "quote" }, decodeHtml(n.comment.excerpt)) : null;
  return [
    h("span", { dataset: { test: "moderation", action: action || "" } }, parts),
    what ? [" ", what] : null,
    excerpt,
    m?.reason ? h("p", { class: "meta reason", dataset: { test: "reason" } }, t("notif.mod.reason", { reason: m.reason })) : null,
  ];
}

/** The sentence of a notification. */
function text(n) {
  const excerpt = n.comment?.excerpt ? h("p", { class: "quote" }, decodeHtml(n.comment.excerpt)) : null;
  const actor = actorList((n.actors || []).slice(0, 1));
  switch (n.kind) {
    case "reply":
      return [t.parts("notif.reply", { actor, article: articleLink(n.article) || t("notif.aComment") }), excerpt];
    case "comment":
      return [t.parts("notif.comment", { actor, article: articleLink(n.article) || t("feed.yourArticle") }), excerpt];
    case "like":
    case "collect":
      return grouped(Number(n.actorCnt) || (n.actors || []).length, n.kind, n.actors, n.article);
    case "follow":
      return [t.parts("notif.follow", { actor })];
    case "reward":
      return [t.parts("notif.reward", { actor, article: articleLink(n.article) || t("feed.yourArticle"),
        amount: h("strong", { dataset: { test: "amount" } }, fmtMoney(n.amt ?? 0)) })];
    case "moderation":
      return moderationText(n);
    default:
      return [h("code", null, String(n.kind)), n.article ? [" ", articleLink(n.article)] : null];
  }
}

export async function notifications(ctx) {
  const load = (cursor, signal) => api("/notifications", { query: { cursor, limit: PAGE }, signal });
  const [first, prefs] = await Promise.all([
    load(null, ctx.signal),
    api("/notifications/preferences", { signal: ctx.signal }),
  ]);

  const list = h("ul", { class: "notifications", dataset: { test: "notifications" } });
  const done = statusLine();
  const entries = new Map(); // id → {n, li, button}

  const markRead = async (entry) => {
    await api("/notifications/read", { method: "POST", body: { id: entry.n.id } });
    entry.n.read = true;
    paint(entry);
    recount();
  };

  function paint(entry) {
    entry.li.dataset.read = String(!!entry.n.read);
    entry.li.classList.toggle("unread", !entry.n.read);
    entry.button.hidden = !!entry.n.read;
  }

  function item(n) {
    const alert = alertBox();
    const entry = { n, li: null, button: null };
    entry.button = actionButton(t("notif.markRead"), "read", () => markRead(entry), alert, { class: "small" });
    entry.li = h("li", { class: "notification", dataset: { id: n.id, kind: n.kind } },
      h("div", { class: "notification-text", dataset: { test: "text" } }, text(n)),
      h("p", { class: "meta" }, time(n.time, { relative: true }), " ", entry.button),
      alert);
    // Following a link of an unread notification reads it (the page changes; no wait).
    entry.li.addEventListener("click", (e) => {
      if (!entry.n.read && e.target.closest("a")) markRead(entry).catch(() => { /* shown unread */ });
    });
    entries.set(n.id, entry);
    paint(entry);
    return entry.li;
  }

  for (const n of first.items || []) list.append(item(n));
  if (!(first.items || []).length) list.append(emptyItem(t("notif.none")));
  const more = pager(list, (cursor) => load(cursor), item);
  more.setNext(first.next);

  const allAlert = alertBox();
  const readAll = actionButton(t("notif.markAllRead"), "read-all", async () => {
    await api("/notifications/read", { method: "POST", body: { all: true } });
    for (const entry of entries.values()) { entry.n.read = true; paint(entry); }
    done.show(t("notif.allRead"));
    recount();
  }, allAlert, { class: "small" });

  // Preferences: what not to be told about.
  const muted = new Set(prefs?.muted || []);
  const prefAlert = alertBox();
  const prefStatus = statusLine();
  prefStatus.dataset.test = "prefs-status";
  const boxes = KINDS.map((kind) => {
    const box = h("input", { type: "checkbox", name: "muted", value: kind, id: uid(`mute-${kind}`), checked: muted.has(kind) });
    return { kind, box, label: h("label", { class: "check", for: box.id }, box, t(`notif.kind.${kind}`)) };
  });
  const prefForm = h("form", { class: "card form", "aria-labelledby": "prefs-title", dataset: { test: "preferences" } },
    h("h2", { id: "prefs-title" }, t("notif.prefsTitle")),
    h("p", { class: "hint" }, t("notif.prefsHint")),
    h("fieldset", { class: "checks" }, h("legend", { class: "sr-only" }, t("notif.prefsTitle")), boxes.map((b) => b.label)),
    prefAlert, prefStatus,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", dataset: { action: "save-preferences" } }, t("save"))));
  onSubmit(prefForm, prefAlert, async () => {
    prefStatus.clear();
    const saved = await api("/notifications/preferences", { method: "PUT", body: { muted: boxes.filter((b) => b.box.checked).map((b) => b.kind) } });
    const now = new Set(saved?.muted || []);
    for (const b of boxes) b.box.checked = now.has(b.kind);
    prefStatus.show(t("me.saved"));
  });

  return h("section", null,
    heading(t("notif.title")),
    h("div", { class: "actions" }, readAll),
    allAlert, done,
    h("section", { class: "card" }, list, more.el),
    prefForm);
}
