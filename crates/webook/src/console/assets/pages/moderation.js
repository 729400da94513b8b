// pages/moderation.js — moderation (admins; API.md → Moderation), four pages under one tab of
// the operator pages, with sub-tabs:
//  - #/ops/moderation: the review queue (GET /admin/moderation/queue), targets with open reports
//    in the API's order (?sort=count, most reported first, or ?sort=newest), paged by offset.
//    Each target shows its content as it was reported (the newest report's snapshot; an older
//    report's own snapshot when it differs), every open report's reason, note, reporter and
//    time, and the actions its kind allows (POST /admin/moderation/act: article and comment
//    dismiss, hide, restore, delete; user dismiss, suspend — for a period or for good,
//    optionally hiding their content — and lift), each with the required reason and an
//    Idempotency-Key of its own per click. The answer is shown as it is: what changed and the
//    reports closed, or that nothing changed (`changed: false`).
//  - #/ops/moderation/held: articles and comments the word lists hold (GET
//    /admin/moderation/held, /admin/moderation/held-comments), each to approve (the action
//    `restore`) or reject (`delete`), with a reason.
//  - #/ops/moderation/words: the word lists (GET/PUT/DELETE /admin/moderation/word-lists):
//    edit a list's mode (refuse or hold) and its words (one per line), delete it, create one.
//  - #/ops/moderation/log: the audit log (GET /admin/moderation/log), newest first, optionally
//    of one target (?kind=&id=), paged with `before` = the last id shown.
// Destructive actions (delete, suspend for good, deleting a list) ask window.confirm() first.

import { h, uid, decodeHtml } from "../dom.js";
import { api, newKey } from "../api.js";
import { t, fmtTime } from "../i18n.js";
import { field, input, textarea, select, alertBox, statusLine, onSubmit, actionButton, table, empty, tabs, heading,
  errorText, time } from "../ui.js";
import { opsTabs, notAdmin } from "./ops.js";

const QUEUE_PAGE = 20;
const HELD_PAGE = 50;
const LOG_PAGE = 50;
/** Deepest offset the queue and held routes take. */
const MAX_OFFSET = 10000;
const SORTS = ["count", "newest"];
const KINDS = ["article", "comment", "user"];
/** The actions each kind of target allows (moderation/model.rs → Action::applies_to). */
const ACTIONS = {
  article: ["dismiss", "hide", "restore", "delete"],
  comment: ["dismiss", "hide", "restore", "delete"],
  user: ["dismiss", "suspend", "lift"],
};
/** Suspension periods offered, in days (0: for good). */
const PERIODS = [1, 3, 7, 30, 0];
const DAY_MS = 24 * 3600 * 1000;

const modTabs = (current) => tabs([
  ["#/ops/moderation", t("mod.queue")],
  ["#/ops/moderation/held", t("mod.held")],
  ["#/ops/moderation/words", t("mod.words")],
  ["#/ops/moderation/log", t("mod.log")],
], current);

function page(title, current, ...body) {
  return h("section", { class: "wide-page" },
    heading(title),
    opsTabs("#/ops/moderation"),
    modTabs(current),
    body);
}

/** t(`${prefix}.${value}`), or the value itself when there is no such text (a newer server). */
function label(prefix, value) {
  const key = `${prefix}.${value}`;
  const s = t(key);
  return s === key ? String(value ?? "—") : s;
}

/** A link to a target where the console has a page for it (articles, users). */
function targetLink(kind, id) {
  const text = t("mod.target", { kind: label("mod.kind", kind), id });
  if (kind === "article") return h("a", { href: `#/article/${id}` }, text);
  if (kind === "user") return h("a", { href: `#/user/${id}` }, text);
  return h("span", null, text);
}

/** POST /admin/moderation/act with a fresh Idempotency-Key (one per click). */
function act(body) {
  return api("/admin/moderation/act", { method: "POST", body, idem: newKey() });
}

/** The answer of an action in words: what changed, or that nothing did. */
function actedText(action, r) {
  const closed = Number(r?.closed) || 0;
  if (r?.changed) return t("mod.changed", { action: label("mod.action", action), outcome: r.outcome, n: closed });
  return t("mod.unchanged", { action: label("mod.action", action), outcome: r?.outcome ?? "", n: closed });
}

// ---- queue ---------------------------------------------------------------------------------

/** One report: reason, note, who, when; its own snapshot when it differs from the shown one. */
function reportItem(r, shown) {
  return h("li", { class: "report", dataset: { report: r.id } },
    h("span", { class: `badge reason-${r.reason}`, dataset: { test: "reason" } }, label("mod.reason", r.reason)),
    r.note ? [" ", h("span", { class: "note", dataset: { test: "note" } }, r.note)] : null,
    h("span", { class: "meta" }, " · ", t("mod.by"), " ", h("a", { href: `#/user/${r.reporter}` }, t("mod.user", { id: r.reporter })),
      " · ", time(r.ctime)),
    r.snapshot !== shown
      ? h("details", null, h("summary", null, t("mod.ownSnapshot")), h("pre", { class: "snapshot" }, r.snapshot || "—"))
      : null);
}

/** The action form of a target: reason, a button per action its kind allows, and for a
 * suspension its period and whether to hide the user's content. */
function actionForm(item, result) {
  const alert = alertBox();
  const reason = input("reason", { maxlength: 500, placeholder: t("mod.reasonPlaceholder"),
    "aria-label": t("mod.reasonFor", { target: `${item.kind} ${item.id}` }) });
  const actions = ACTIONS[item.kind] || ["dismiss"];
  let period = null;
  let hideContent = null;
  if (actions.includes("suspend")) {
    period = select("period", PERIODS.map((d) => [String(d), d ? t("mod.days", { n: d }) : t("mod.forGood")]),
      { value: "7", "aria-label": t("mod.period") });
    hideContent = h("input", { type: "checkbox", name: "hideContent", id: uid("hide-content") });
  }
  const buttons = actions.map((a) => h("button", { type: "submit", value: a, dataset: { action: a },
    class: ["small", a === "delete" || a === "suspend" ? "danger" : null] }, label("mod.action", a)));
  const form = h("form", { class: "inline-form mod-actions", "aria-label": t("mod.actOn", { target: `${item.kind} ${item.id}` }) },
    reason,
    period ? [period, h("label", { class: "check", for: hideContent.id }, hideContent, t("mod.hideContent"))] : null,
    buttons, alert);
  onSubmit(form, alert, async (submitter) => {
    const action = submitter?.dataset.action || actions[0];
    const body = { kind: item.kind, id: item.id, action, reason: reason.value.trim() };
    if (action === "suspend") {
      const days = Number(period.value);
      if (days > 0) body.until = Date.now() + days * DAY_MS;
      body.hideContent = hideContent.checked;
      if (!days && !confirm(t("mod.confirmForGood", { id: item.id }))) return;
    }
    if (action === "delete" && !confirm(t("mod.confirmDelete", { target: label("mod.kind", item.kind), id: item.id }))) return;
    const r = await act(body);
    result(action, r);
  });
  return form;
}

function queueCard(item) {
  const reports = item.reports || [];
  const shown = reports[0]?.snapshot ?? "";
  const done = h("p", { class: "status", role: "status", tabindex: "-1", dataset: { test: "result" } });
  const card = h("article", { class: "card mod-item", dataset: { kind: item.kind, id: item.id, open: item.open } },
    h("h2", null, targetLink(item.kind, item.id), " ",
      h("span", { class: "badge bad", dataset: { test: "open" } }, t("mod.openReports", { n: item.open })),
      h("span", { class: "meta" }, " · ", t("mod.latest"), " ", time(item.latest))),
    h("p", { class: "meta" }, t("mod.snapshot")),
    h("pre", { class: "snapshot", dataset: { test: "snapshot" } }, shown.trim() ? shown : "—"),
    h("ul", { class: "reports", dataset: { test: "reports" } }, reports.map((r) => reportItem(r, shown))),
    item.open > reports.length ? h("p", { class: "meta" }, t("mod.moreReports", { n: item.open - reports.length })) : null,
    actionForm(item, (action, r) => {
      done.textContent = actedText(action, r);
      done.dataset.changed = String(!!r?.changed);
      done.dataset.action = action;
      card.dataset.state = r?.closed > 0 ? "closed" : card.dataset.state || "open";
      done.focus();
    }),
    done);
  return card;
}

export async function queue(ctx) {
  const sort = SORTS.includes(ctx.query.get("sort")) ? ctx.query.get("sort") : "count";
  const load = (offset, signal) => api("/admin/moderation/queue", { query: { sort, offset, limit: QUEUE_PAGE }, signal });
  let first;
  try { first = await load(0, ctx.signal); } catch (err) { throw notAdmin(err); }

  const filter = select("sort", SORTS.map((s) => [s, t(`mod.sort.${s}`)]), { value: sort });
  filter.id = "queue-sort";
  filter.addEventListener("change", () => ctx.navigate(`#/ops/moderation?sort=${filter.value}`));

  const list = h("div", { class: "mod-queue", dataset: { test: "queue" } });
  for (const item of first || []) list.append(queueCard(item));
  const none = empty(t("mod.queueEmpty"));
  none.hidden = (first || []).length > 0;
  let offset = (first || []).length;
  const alert = alertBox();
  const more = h("button", { type: "button", class: "more", dataset: { action: "more" },
    hidden: (first || []).length < QUEUE_PAGE }, t("more"));
  more.addEventListener("click", async () => {
    more.disabled = true; alert.clear();
    try {
      const next = await load(offset);
      for (const item of next || []) list.append(queueCard(item));
      offset += (next || []).length;
      more.hidden = (next || []).length < QUEUE_PAGE || offset > MAX_OFFSET;
    } catch (err) { alert.show(errorText(err)); } finally { more.disabled = false; }
  });

  return page(t("mod.title"), "#/ops/moderation",
    h("div", { class: "field inline" }, h("label", { for: filter.id }, t("mod.sort")), filter),
    list, none, more, alert);
}

// ---- held for review ----------------------------------------------------------------------

/** What the held page lists: articles and comments, each from its own route. */
const HELD = [
  { kind: "article", test: "held",
    load: (offset, signal) => api("/admin/moderation/held", { query: { offset, limit: HELD_PAGE }, signal }) },
  { kind: "comment", test: "held-comments",
    load: (offset, signal) => api("/admin/moderation/held-comments", { query: { offset, limit: HELD_PAGE }, signal }) },
];

/** What a held item says: an article's title and abstract, a comment's text and its article. */
function heldContent(kind, a) {
  if (kind === "article") {
    return [h("strong", { dataset: { test: "title" } }, a.title || t("untitled")),
      a.abstract ? h("p", { class: "abstract" }, decodeHtml(a.abstract)) : null];
  }
  return [h("p", { class: "snapshot", dataset: { test: "content" } }, a.content),
    a.biz === "article" ? h("a", { href: `#/article/${a.bizId}` }, t("mod.onArticle", { id: a.bizId })) : null];
}

function heldRow(kind, a) {
  const target = `${kind} ${a.id}`;
  const alert = alertBox();
  const result = h("p", { class: "status", role: "status", tabindex: "-1", dataset: { test: "result" } });
  const reason = input("reason", { maxlength: 500, placeholder: t("mod.reasonPlaceholder"),
    "aria-label": t("mod.reasonFor", { target }) });
  const approve = h("button", { type: "submit", class: "small", dataset: { action: "approve" } }, t("mod.approve"));
  const reject = h("button", { type: "submit", class: "small danger", dataset: { action: "reject" } }, t("mod.reject"));
  const form = h("form", { class: "inline-form", "aria-label": t("mod.actOn", { target }) },
    reason, approve, reject, alert);
  const tr = h("tr", { dataset: { held: a.id, kind } },
    h("td", { class: "num" }, String(a.id)),
    h("td", null, heldContent(kind, a)),
    h("td", null, h("a", { href: `#/user/${a.authorId}` }, t("mod.user", { id: a.authorId }))),
    h("td", { class: "note", dataset: { test: "held-reason" } }, a.reason),
    h("td", null, time(a.utime ?? a.ctime)),
    h("td", { class: "row-actions" }, form, result));
  onSubmit(form, alert, async (submitter) => {
    const approving = submitter?.dataset.action !== "reject";
    const action = approving ? "restore" : "delete";
    if (!approving && !confirm(t("mod.confirmReject", { id: a.id }))) return;
    const r = await act({ kind, id: a.id, action, reason: reason.value.trim() });
    result.textContent = actedText(action, r);
    result.dataset.changed = String(!!r?.changed);
    if (r?.changed) {
      tr.dataset.state = approving ? "approved" : "rejected";
      form.hidden = true;
    }
    result.focus();
  });
  return tr;
}

/** One kind's held items: a table paged by offset. */
function heldSection({ kind, test, load }, first) {
  const tbody = h("tbody");
  for (const a of first) tbody.append(heldRow(kind, a));
  let offset = first.length;
  const alert = alertBox();
  const more = h("button", { type: "button", class: "more", dataset: { action: "more" },
    hidden: first.length < HELD_PAGE }, t("more"));
  more.addEventListener("click", async () => {
    more.disabled = true; alert.clear();
    try {
      const next = (await load(offset)) || [];
      for (const a of next) tbody.append(heldRow(kind, a));
      offset += next.length;
      more.hidden = next.length < HELD_PAGE || offset > MAX_OFFSET;
    } catch (err) { alert.show(errorText(err)); } finally { more.disabled = false; }
  });
  const what = kind === "article" ? t("editor.title") : t("mod.commentText");
  return h("section", { class: "card" },
    h("h2", null, t(kind === "article" ? "mod.heldArticles" : "mod.heldComments")),
    table([t("runs.id"), what, t("mod.author"), t("mod.heldReason"), t("mod.submitted"), ""], tbody,
      { class: "list held", dataset: { test } }),
    first.length ? null : empty(t(kind === "article" ? "mod.heldEmpty" : "mod.heldCommentsEmpty")),
    more, alert);
}

export async function held(ctx) {
  let firsts;
  try {
    firsts = await Promise.all(HELD.map((held) => held.load(0, ctx.signal)));
  } catch (err) { throw notAdmin(err); }
  return page(t("mod.heldTitle"), "#/ops/moderation/held",
    h("p", { class: "meta" }, t("mod.heldHint")),
    HELD.map((held, i) => heldSection(held, firsts[i] || [])));
}

// ---- word lists ----------------------------------------------------------------------------

const MODES = ["refuse", "hold"];
/** The words of a textarea: one per line, trimmed, blank lines left out. */
const wordsOf = (text) => text.split("\n").map((w) => w.trim()).filter(Boolean);

function put(name, action, words) {
  return api(`/admin/moderation/word-lists/${encodeURIComponent(name)}`, { method: "PUT", body: { action, words } });
}

function listCard(list, removed) {
  const alert = alertBox();
  const status = statusLine();
  const mode = select("action", MODES.map((m) => [m, t(`mod.mode.${m}`)]), { value: list.action });
  const words = textarea("words", { rows: Math.min(12, Math.max(4, (list.words || []).length + 1)), class: "mono",
    value: (list.words || []).join("\n") });
  const meta = h("p", { class: "meta", dataset: { test: "edited" } });
  const paintMeta = (l) => {
    meta.textContent = t("mod.editedBy", { admin: l.admin, time: fmtTime(l.utime), n: (l.words || []).length });
  };
  paintMeta(list);
  const del = actionButton(t("mod.deleteList"), "delete-list", async () => {
    if (!confirm(t("mod.confirmDeleteList", { name: list.name }))) return;
    await api(`/admin/moderation/word-lists/${encodeURIComponent(list.name)}`, { method: "DELETE" });
    removed(card, list.name);
  }, alert, { class: "small danger" });
  const form = h("form", { class: "card form word-list", dataset: { list: list.name },
    "aria-label": t("mod.listTitle", { name: list.name }) },
    h("h2", null, t("mod.listTitle", { name: list.name })),
    meta,
    field(t("mod.mode"), mode, t("mod.modeHint")),
    field(t("mod.wordsLabel"), words, t("mod.wordsHint")),
    alert, status,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", dataset: { action: "save-list" } }, t("save")), del));
  const card = form;
  onSubmit(form, alert, async () => {
    status.clear();
    const w = wordsOf(words.value);
    await put(list.name, mode.value, w);
    words.value = w.join("\n");
    paintMeta({ ...list, words: w, utime: Date.now(), admin: list.admin });
    status.show(t("mod.listSaved", { name: list.name }));
  });
  return card;
}

export async function wordLists(ctx) {
  const load = (signal) => api("/admin/moderation/word-lists", { signal });
  let first;
  try { first = await load(ctx.signal); } catch (err) { throw notAdmin(err); }
  const lists = h("div", { class: "word-lists", dataset: { test: "word-lists" } });
  const none = empty(t("mod.noLists"));
  const done = statusLine();
  const removed = (card, name) => {
    card.remove();
    none.hidden = lists.children.length > 0;
    done.show(t("mod.listDeleted", { name }));
  };
  for (const l of first || []) lists.append(listCard(l, removed));
  none.hidden = (first || []).length > 0;

  // A new list.
  const alert = alertBox();
  const name = input("name", { maxlength: 64 });
  const mode = select("action", MODES.map((m) => [m, t(`mod.mode.${m}`)]));
  const words = textarea("words", { rows: 4, class: "mono" });
  const form = h("form", { class: "card form grid-form", "aria-labelledby": "new-list-title" },
    h("h2", { id: "new-list-title" }, t("mod.newList")),
    field(t("mod.listName"), name, t("mod.listNameHint")),
    field(t("mod.mode"), mode, t("mod.modeHint")),
    h("div", { class: "wide" }, field(t("mod.wordsLabel"), words, t("mod.wordsHint"))),
    h("div", { class: "wide" }, alert),
    h("div", { class: "actions wide" }, h("button", { type: "submit", class: "primary", dataset: { action: "create-list" } }, t("mod.createList"))));
  onSubmit(form, alert, async () => {
    done.clear();
    const listName = name.value.trim();
    await put(listName, mode.value, wordsOf(words.value));
    // The stored list, as every instance will apply it.
    const all = await load();
    const saved = (all || []).find((l) => l.name === listName);
    if (saved) {
      lists.querySelector(`[data-list="${CSS.escape(listName)}"]`)?.remove();
      lists.append(listCard(saved, removed));
    }
    none.hidden = lists.children.length > 0;
    name.value = ""; words.value = "";
    done.show(t("mod.listSaved", { name: listName }));
  });

  return page(t("mod.wordsTitle"), "#/ops/moderation/words",
    h("p", { class: "meta" }, t("mod.wordsIntro")),
    done, lists, none, form);
}

// ---- audit log -----------------------------------------------------------------------------

function logRow(e) {
  return h("tr", { dataset: { log: e.id, action: e.action, kind: e.kind, target: e.target } },
    h("td", { class: "num" }, String(e.id)),
    h("td", null, time(e.ctime)),
    h("td", null, t("mod.admin", { id: e.admin })),
    h("td", null, h("code", { dataset: { test: "action" } }, e.action)),
    h("td", null, targetLink(e.kind, e.target)),
    h("td", { class: "note", dataset: { test: "reason" } }, e.reason),
    h("td", { dataset: { test: "outcome" } }, e.outcome));
}

export async function log(ctx) {
  const kind = KINDS.includes(ctx.query.get("kind")) ? ctx.query.get("kind") : "";
  const id = /^\d+$/.test(ctx.query.get("id") || "") ? ctx.query.get("id") : "";
  const target = kind && id ? { kind, id } : {};
  const load = (before, signal) => api("/admin/moderation/log", { query: { ...target, before, limit: LOG_PAGE }, signal });
  let first;
  try { first = await load(null, ctx.signal); } catch (err) { throw notAdmin(err); }

  const tbody = h("tbody");
  for (const e of first || []) tbody.append(logRow(e));
  let before = (first || []).at(-1)?.id ?? null;
  const alert = alertBox();
  const more = h("button", { type: "button", class: "more", dataset: { action: "more" },
    hidden: (first || []).length < LOG_PAGE }, t("more"));
  more.addEventListener("click", async () => {
    more.disabled = true; alert.clear();
    try {
      const next = await load(before);
      for (const e of next || []) tbody.append(logRow(e));
      if ((next || []).length) before = next.at(-1).id;
      more.hidden = (next || []).length < LOG_PAGE;
    } catch (err) { alert.show(errorText(err)); } finally { more.disabled = false; }
  });

  // Only one target's entries.
  const kindSel = select("kind", [["", t("mod.anyKind")], ...KINDS.map((k) => [k, label("mod.kind", k)])], { value: kind });
  kindSel.id = "log-kind";
  const idBox = input("id", { value: id, inputmode: "numeric", class: "short", id: "log-id" });
  const filterForm = h("form", { class: "filters inline-form", "aria-label": t("mod.filterLog") },
    h("label", { for: kindSel.id }, t("mod.kindLabel")), kindSel,
    h("label", { for: idBox.id }, t("mod.idLabel")), idBox,
    h("button", { type: "submit", class: "small", dataset: { action: "filter-log" } }, t("mod.filter")));
  filterForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const k = kindSel.value;
    const i = idBox.value.trim();
    ctx.navigate(k && /^\d+$/.test(i) ? `#/ops/moderation/log?kind=${k}&id=${i}` : "#/ops/moderation/log");
  });

  return page(t("mod.logTitle"), "#/ops/moderation/log",
    filterForm,
    h("section", { class: "card" },
      table([t("runs.id"), t("time"), t("mod.adminCol"), t("mod.actionCol"), t("mod.targetCol"), t("mod.reasonCol"),
        t("mod.outcomeCol")], tbody, { class: "list mod-log", dataset: { test: "mod-log" } }),
      (first || []).length ? null : empty(t("mod.logEmpty")),
      more, alert));
}
