// pages/ops.js — operator pages (admins): #/ops/jobs (the jobs dashboard: status, next fire,
// owner and lease, stop/resume/trigger/edit, runs of a selected job, add a job; re-polled every
// 2 s while visible, updating rows in place so an open edit form and the scroll position stay),
// #/ops/findings (reconciliation discrepancies: each open one offers the API's actions for its
// kind — credit, refund (optionally letting the author's balance go below 0), resolve — with a
// note; a closed one shows the action, the admin and the note), #/ops/refunds (refunds by status,
// paged, and a form to refund a paid payment by its trade number) and #/ops/instances (every
// instance that reported in the last minute plus this one's /readyz, every 5 s).

import { h, uid } from "../dom.js";
import { api, newKey, isAbort, ApiError } from "../api.js";
import { t, fmtTime, fmtRelative, fmtDuration, fmtMoney } from "../i18n.js";
import * as session from "../session.js";
import { field, input, textarea, select, alertBox, statusLine, onSubmit, actionButton, table, empty, tabs,
  heading, errorText, time } from "../ui.js";

/** The operator pages' tab bar (the events, moderation, move and settings pages use it too). */
export const opsTabs = (current) => tabs([
  ["#/ops/jobs", t("ops.jobs")],
  ["#/ops/findings", t("ops.findings")],
  ["#/ops/refunds", t("ops.refunds")],
  ["#/ops/instances", t("ops.instances")],
  ["#/ops/events", t("ops.events")],
  ["#/ops/moderation", t("ops.moderation")],
  ["#/ops/move", t("ops.move")],
  ["#/ops/settings", t("ops.settings")],
], current);

/** Not an admin (any more): the nav forgets the Ops link, the error goes to the page. */
export function notAdmin(err) {
  if (err?.code === 403002) session.update({ admin: false });
  return err;
}

/** Runs `tick` every `ms` while the page is visible (paused while hidden, at once on return). */
export function every(ctx, ms, tick) {
  let timer = null;
  let running = false;
  const schedule = () => { clearTimeout(timer); timer = setTimeout(run, ms); };
  const run = async () => {
    if (ctx.signal.aborted) return;
    if (document.hidden) return; // visibilitychange restarts it
    if (running) return schedule();
    running = true;
    try { await tick(); } finally { running = false; }
    if (!ctx.signal.aborted) schedule();
  };
  const onVis = () => { if (!document.hidden) run(); else clearTimeout(timer); };
  document.addEventListener("visibilitychange", onVis);
  ctx.onLeave(() => { clearTimeout(timer); document.removeEventListener("visibilitychange", onVis); });
  schedule();
  return { now: run };
}

/** Clock skew between this browser and the server, from the Date header (whole seconds). */
let skew = 0;
export function learnSkew(headers) {
  const d = Date.parse(headers?.get("Date") || "");
  if (!Number.isFinite(d)) return;
  const s = d + 500 - Date.now();
  skew = Math.abs(s) > 2000 ? s : 0;
}
export const serverNow = () => Date.now() + skew;

async function getJobs(signal) {
  const r = await api("/jobs", { raw: true, signal });
  learnSkew(r.headers);
  if (r.body?.code === 0 && r.status < 300) return r.body.data || [];
  throw notAdmin(new ApiError(r.status, r.body?.code ?? -1, r.body?.msg || t("err.http", { status: r.status })));
}

const set = (el, text) => { if (el.textContent !== text) el.textContent = text; };
const MISFIRE = ["fire_once", "skip", "catch_up"];

function timeZones() {
  let zones = ["UTC"];
  try { zones = Intl.supportedValuesOf("timeZone"); } catch { /* older browser */ }
  if (!zones.includes("UTC")) zones.unshift("UTC");
  return h("datalist", { id: "tz-list" }, zones.map((z) => h("option", { value: z })));
}

function cfgText(cfg) {
  if (cfg == null || cfg === "") return "";
  if (typeof cfg === "string") { try { cfg = JSON.parse(cfg); } catch { return cfg; } }
  const s = JSON.stringify(cfg, null, 2);
  return s === "{}" ? "" : s;
}

/** The cfg textarea's text as an object (blank → {}), or an error naming the field. */
function parseCfg(text) {
  if (!text.trim()) return {};
  try {
    const v = JSON.parse(text);
    if (v && typeof v === "object" && !Array.isArray(v)) return v;
  } catch { /* below */ }
  throw new ApiError(0, 4, t("jobs.badCfg"));
}

// ---- jobs -----------------------------------------------------------------------------------

export async function jobs(ctx) {
  const first = await getJobs(ctx.signal);
  const pollAlert = alertBox();
  const tbody = h("tbody");
  const rows = new Map(); // id → {job, tr, cells, edit}
  let selected = null; // job id whose runs are shown
  let poller = null;

  const refresh = () => poller?.now();

  // Runs panel.
  const runsTitle = h("h2", { id: "runs-title" });
  const runsBody = h("tbody");
  const runsAlert = alertBox();
  const runsPanel = h("section", { class: "card", hidden: true, "aria-labelledby": "runs-title" },
    runsTitle,
    table([t("runs.id"), t("status"), t("runs.scheduled"), t("runs.started"), t("runs.duration"), t("jobs.owner"), t("runs.error")],
      runsBody, { class: "list runs", dataset: { test: "runs" } }),
    runsAlert);
  const paintRuns = (list) => {
    runsBody.replaceChildren(...list.map((r) => h("tr", { dataset: { status: r.status, id: r.id } },
      h("td", { class: "num" }, String(r.id)),
      h("td", null, h("span", { class: `badge run-${r.status}` }, r.status)),
      h("td", null, fmtTime(r.scheduledAt, { seconds: true })),
      h("td", null, r.startedAt ? fmtTime(r.startedAt, { seconds: true }) : "—"),
      h("td", { class: "num" }, r.startedAt && r.finishedAt ? fmtDuration(r.finishedAt - r.startedAt)
        : r.startedAt ? t("runs.runningFor", { d: fmtDuration(serverNow() - r.startedAt) }) : "—"),
      h("td", null, r.owner || "—"),
      h("td", { class: "error-text" }, r.error || ""))));
    if (!list.length) runsBody.append(h("tr", null, h("td", { colspan: 7, class: "muted" }, t("runs.none"))));
  };
  const loadRuns = async (signal) => {
    if (selected == null) return;
    const id = selected;
    try {
      const list = await api(`/jobs/${id}/runs`, { query: { limit: 20 }, signal });
      if (selected !== id) return;
      runsAlert.clear();
      paintRuns(list || []);
    } catch (err) { if (!isAbort(err)) runsAlert.show(errorText(err)); }
  };

  function row(job) {
    const cells = {
      name: h("td", { class: "job-name" }),
      cron: h("td", null, h("code")),
      tz: h("td"),
      status: h("span", { class: "badge", dataset: { test: "status" } }),
      next: h("td", { dataset: { test: "next-time" } }),
      owner: h("td", { dataset: { test: "owner" } }),
      lease: h("td"),
    };
    const alert = alertBox();
    const stop = actionButton(t("jobs.stop"), "stop", async () => {
      if (!confirm(t("jobs.confirmStop", { name: entry.job.name }))) return;
      await api(`/jobs/${entry.job.id}/stop`, { method: "POST" });
      entry.job.status = "paused"; paint(entry);
      resume.focus();
      refresh();
    }, alert, { class: "small danger" });
    const resume = actionButton(t("jobs.resume"), "resume", async () => {
      await api(`/jobs/${entry.job.id}/resume`, { method: "POST" });
      entry.job.status = "waiting"; paint(entry);
      stop.focus();
      refresh();
    }, alert, { class: "small" });
    const trigger = actionButton(t("jobs.trigger"), "trigger", async () => {
      await api(`/jobs/${entry.job.id}/trigger`, { method: "POST" });
      selected = entry.job.id;
      showRuns(entry.job);
      refresh();
    }, alert, { class: "small" });
    const edit = h("button", { type: "button", class: "small", dataset: { action: "edit" }, "aria-expanded": "false" }, t("edit"));
    edit.addEventListener("click", () => toggleEdit(entry));
    const runs = h("button", { type: "button", class: "small", dataset: { action: "runs" } }, t("jobs.runs"));
    runs.addEventListener("click", () => { selected = entry.job.id; showRuns(entry.job); loadRuns(); });
    const tr = h("tr", { dataset: { job: job.name, id: job.id } },
      cells.name, cells.cron, cells.tz, h("td", null, cells.status), cells.next, cells.owner, cells.lease,
      h("td", { class: "row-actions" }, stop, resume, trigger, edit, runs, alert));
    const entry = { job, tr, cells, stop, resume, edit, editRow: null };
    return entry;
  }

  function paint(entry) {
    const { job, cells, tr } = entry;
    const now = serverNow();
    tr.dataset.job = job.name;
    set(cells.name, job.name);
    cells.name.title = `${t("jobs.executor")}: ${job.executor}`;
    set(cells.cron.firstChild, job.cron);
    set(cells.tz, job.timezone);
    set(cells.status, job.status);
    cells.status.className = `badge job-${job.status}`;
    cells.status.title = t(`jobs.s.${job.status}`);
    set(cells.next, job.nextTime == null ? t("jobs.never") : `${fmtTime(job.nextTime, { seconds: true })} (${fmtRelative(job.nextTime, now)})`);
    set(cells.owner, job.owner || "—");
    let lease = "—";
    if (job.status === "running") {
      const parts = [];
      if (job.leaseUntil) parts.push(t("jobs.leaseUntil", { time: fmtTime(job.leaseUntil, { seconds: true, dateless: true }), rel: fmtRelative(job.leaseUntil, now) }));
      if (job.utime) parts.push(t("jobs.heartbeat", { rel: fmtRelative(job.utime, now) }));
      lease = parts.join(" · ") || "—";
    }
    set(cells.lease, lease);
    entry.stop.hidden = job.status === "paused";
    entry.resume.hidden = job.status !== "paused";
  }

  function toggleEdit(entry) {
    if (entry.editRow) {
      entry.editRow.remove(); entry.editRow = null;
      entry.edit.setAttribute("aria-expanded", "false");
      entry.edit.focus();
      return;
    }
    const job = entry.job;
    const alert = alertBox();
    const cron = input("cron", { value: job.cron, class: "mono" });
    const timezone = input("timezone", { value: job.timezone || "UTC", list: "tz-list" });
    const cfg = textarea("cfg", { rows: 4, value: cfgText(job.cfg), class: "mono", placeholder: "{}" });
    const misfire = select("misfire", MISFIRE.map((m) => [m, t(`jobs.misfire.${m}`)]), { value: job.misfire || "fire_once" });
    const timeoutMs = input("timeoutMs", { type: "number", min: 1000, step: 1000, value: job.timeoutMs ?? "", inputmode: "numeric" });
    const cancel = h("button", { type: "button", class: "link" }, t("cancel"));
    cancel.addEventListener("click", () => toggleEdit(entry));
    const form = h("form", { class: "form grid-form", "aria-label": t("jobs.editTitle", { name: job.name }) },
      h("h3", null, t("jobs.editTitle", { name: job.name })),
      field(t("jobs.cron"), cron, t("jobs.cronHint")),
      field(t("jobs.timezone"), timezone),
      field(t("jobs.misfire"), misfire),
      field(t("jobs.timeoutMs"), timeoutMs),
      h("div", { class: "wide" }, field(t("jobs.cfg"), cfg, t("jobs.cfgHint"))),
      h("div", { class: "wide" }, alert),
      h("div", { class: "actions wide" }, h("button", { type: "submit", class: "primary" }, t("save")), cancel));
    onSubmit(form, alert, async () => {
      const body = {};
      if (cron.value.trim() !== job.cron) body.cron = cron.value.trim();
      if (timezone.value.trim() !== (job.timezone || "")) body.timezone = timezone.value.trim();
      const c = parseCfg(cfg.value);
      if (JSON.stringify(c) !== JSON.stringify(job.cfg && typeof job.cfg === "object" ? job.cfg : parseCfgSafe(job.cfg))) body.cfg = c;
      if (misfire.value !== (job.misfire || "fire_once")) body.misfire = misfire.value;
      if (timeoutMs.value.trim() !== "" && Number(timeoutMs.value) !== job.timeoutMs) body.timeoutMs = Number(timeoutMs.value);
      if (Object.keys(body).length) await api(`/jobs/${job.id}/edit`, { method: "POST", body });
      toggleEdit(entry);
      refresh();
    });
    entry.editRow = h("tr", { class: "edit-row", dataset: { editJob: job.name } }, h("td", { colspan: 8 }, form));
    entry.tr.after(entry.editRow);
    entry.edit.setAttribute("aria-expanded", "true");
    cron.focus();
  }

  function showRuns(job) {
    runsTitle.textContent = t("runs.title", { name: job.name });
    runsPanel.hidden = false;
  }

  function update(list) {
    const seen = new Set();
    for (const job of list) {
      seen.add(job.id);
      let entry = rows.get(job.id);
      if (!entry) { entry = row(job); rows.set(job.id, entry); } else entry.job = job;
      paint(entry);
    }
    for (const [id, entry] of rows) {
      if (!seen.has(id)) { entry.tr.remove(); entry.editRow?.remove(); rows.delete(id); }
    }
    // Keep the API's order; move rows only when it changed (moving a row would blur its buttons).
    const want = list.map((j) => rows.get(j.id).tr);
    const have = [...tbody.children].filter((r) => !r.classList.contains("edit-row"));
    if (want.length !== have.length || want.some((r, i) => r !== have[i])) {
      for (const j of list) {
        const e = rows.get(j.id);
        tbody.append(e.tr);
        if (e.editRow) tbody.append(e.editRow);
      }
    }
    emptyNote.hidden = list.length > 0;
  }

  const emptyNote = empty(t("jobs.none"));
  update(first);

  // Add a job.
  const addAlert = alertBox();
  const addStatus = statusLine();
  const name = input("name", { class: "mono", maxlength: 64 });
  const cron = input("cron", { class: "mono", placeholder: "0 */5 * * * *" });
  const executors = new Set(["http", ...first.map((j) => j.executor)]);
  const executor = input("executor", { value: "http", list: "executor-list" });
  const cfg = textarea("cfg", { rows: 4, class: "mono", placeholder: '{"url": "http://example.com/hook", "method": "POST"}' });
  const timezone = input("timezone", { value: "UTC", list: "tz-list" });
  const misfire = select("misfire", MISFIRE.map((m) => [m, t(`jobs.misfire.${m}`)]));
  const timeoutMs = input("timeoutMs", { type: "number", min: 1000, step: 1000, placeholder: "600000", inputmode: "numeric" });
  const addForm = h("form", { class: "card form grid-form", "aria-labelledby": "add-title" },
    h("h2", { id: "add-title", class: "wide" }, t("jobs.addTitle")),
    field(t("jobs.name"), name, t("jobs.nameHint")),
    field(t("jobs.cron"), cron, t("jobs.cronHint")),
    field(t("jobs.executor"), executor),
    field(t("jobs.timezone"), timezone),
    field(t("jobs.misfire"), misfire),
    field(t("jobs.timeoutMs"), timeoutMs),
    h("div", { class: "wide" }, field(t("jobs.cfg"), cfg, t("jobs.cfgHint"))),
    h("div", { class: "wide" }, addAlert, addStatus),
    h("div", { class: "actions wide" }, h("button", { type: "submit", class: "primary", dataset: { action: "add-job" } }, t("jobs.add"))),
    h("datalist", { id: "executor-list" }, [...executors].map((x) => h("option", { value: x }))));
  onSubmit(addForm, addAlert, async () => {
    addStatus.clear();
    const body = { name: name.value.trim(), cron: cron.value.trim(), executor: executor.value.trim(), cfg: parseCfg(cfg.value) };
    if (timezone.value.trim()) body.timezone = timezone.value.trim();
    body.misfire = misfire.value;
    if (timeoutMs.value.trim()) body.timeoutMs = Number(timeoutMs.value);
    await api("/jobs", { method: "POST", body, idem: newKey() });
    addStatus.show(t("jobs.added", { name: body.name }));
    name.value = ""; cron.value = ""; cfg.value = ""; timeoutMs.value = "";
    refresh();
  });

  poller = every(ctx, 2000, async () => {
    try {
      const [list] = await Promise.all([getJobs(ctx.signal), loadRuns(ctx.signal)]);
      pollAlert.clear();
      update(list);
    } catch (err) {
      if (!isAbort(err)) pollAlert.show(errorText(err));
    }
  });

  return h("section", { class: "wide-page" },
    heading(t("ops.jobs")),
    opsTabs("#/ops/jobs"),
    pollAlert,
    h("section", { class: "card" },
      table([t("jobs.name"), t("jobs.cron"), t("jobs.timezone"), t("status"), t("jobs.next"), t("jobs.owner"), t("jobs.lease"), ""],
        tbody, { class: "list jobs" }),
      emptyNote,
      h("p", { class: "meta" }, t("jobs.live"))),
    runsPanel,
    addForm,
    timeZones());
}

function parseCfgSafe(v) {
  if (v == null || v === "") return {};
  try { return JSON.parse(v); } catch { return {}; }
}

// ---- findings -------------------------------------------------------------------------------

const FINDING_STATUS = ["open", "fixed", "resolved", "all"];
const money = (v) => (v == null ? "—" : fmtMoney(v));

/** Who closed a finding and how: the action (as the API spells it) by the admin, or "fixed
 * automatically" for what reconciliation repaired itself. */
function actedCell(f) {
  const cell = h("td", { class: "acted", dataset: { test: "acted" } });
  if (f.action) {
    cell.append(h("code", { dataset: { test: "action" } }, f.action),
      f.actedBy != null ? h("span", { class: "muted", dataset: { test: "acted-by" } }, ` ${t("findings.by", { uid: f.actedBy })}`) : null);
  } else if (f.status === "fixed") {
    cell.append(h("span", { class: "muted" }, t("findings.auto")));
  } else {
    cell.append(h("span", { class: "muted" }, "—"));
  }
  return cell;
}

/** The actions an open finding offers (`f.actions`: credit, refund, resolve): one note field, a
 * button per action, "allow negative balance" when refund is among them; the API's answer
 * replaces the row, its refusal goes to the row's alert. */
function findingActions(f, done) {
  const alert = alertBox();
  const note = input("note", { placeholder: t("findings.notePlaceholder"), "aria-label": t("findings.noteFor", { id: f.id }), maxlength: 1000 });
  const offered = (f.actions || []).filter((a) => ["credit", "refund", "resolve"].includes(a));
  let allowNegative = null;
  if (offered.includes("refund")) {
    allowNegative = h("input", { type: "checkbox", name: "allowNegative", id: uid("allow-negative") });
  }
  const buttons = offered.map((a) => h("button", { type: "submit", class: ["small", a === "refund" ? "danger" : null],
    dataset: { action: a }, value: a, "aria-label": t(`findings.${a}For`, { id: f.id }) }, t(`findings.${a}`)));
  const form = h("form", { class: "inline-form finding-actions", "aria-label": t("findings.actOn", { id: f.id }) }, note, ...buttons,
    allowNegative ? h("label", { class: "check", for: allowNegative.id }, allowNegative, t("findings.allowNegative")) : null,
    alert);
  onSubmit(form, alert, async (submitter) => {
    const action = submitter?.dataset.action || offered[0];
    const body = { note: note.value.trim() };
    if (action === "refund") {
      body.allowNegative = !!allowNegative?.checked;
      if (!confirm(t("findings.confirmRefund", { tradeNo: f.tradeNo }))) return;
    }
    const after = await api(`/payments/discrepancies/${f.id}/${action}`, { method: "POST", body });
    done(after);
  });
  return form;
}

export async function findings(ctx) {
  const status = FINDING_STATUS.includes(ctx.query.get("status")) ? ctx.query.get("status") : "open";
  const load = (cursor, signal) => api("/payments/discrepancies", { query: { status, cursor, limit: 20 }, signal });
  let first;
  try { first = await load(null, ctx.signal); } catch (err) { throw notAdmin(err); }

  const filter = select("status", FINDING_STATUS.map((s) => [s, t(`findings.s.${s}`)]), { value: status });
  filter.id = "findings-status";
  filter.addEventListener("change", () => ctx.navigate(`#/ops/findings?status=${filter.value}`));

  const tbody = h("tbody");
  const COLUMNS = 11;
  // A finding is one row; an open one is followed by a row of its actions (the form spans the
  // table, so the list stays readable at desktop width). Done, both give way to the closed row.
  const rows = (f, { justDone = false } = {}) => {
    const acted = actedCell(f);
    const tr = h("tr", { dataset: { finding: f.id, status: f.status, trade: f.tradeNo } },
      h("td", { class: "num" }, String(f.id)),
      h("td", null, f.billDate || "—"),
      h("td", null, h("code", null, f.kind)),
      h("td", { class: "mono" }, f.tradeNo || "—"),
      h("td", { class: "num" }, money(f.providerAmt)),
      h("td", { class: "num" }, money(f.ourAmt)),
      h("td", { class: "detail" }, typeof f.detail === "string" ? f.detail : JSON.stringify(f.detail ?? "")),
      h("td", null, h("span", { class: `badge f-${f.status}`, dataset: { test: "status" } }, f.status)),
      acted,
      h("td", { class: "note", dataset: { test: "note" } }, f.note || ""),
      h("td", null, time(f.ctime)));
    if (justDone) {
      acted.append(h("p", { class: "status", role: "status", tabindex: "-1", dataset: { test: "done" } },
        t("findings.done", { action: f.action })));
    }
    if (f.status !== "open" || !(f.actions || []).length) return [tr];
    const act = h("tr", { class: "act-row", dataset: { actions: f.id, trade: f.tradeNo } });
    act.append(h("td", { colspan: COLUMNS }, findingActions(f, (after) => {
      const [done] = rows(after, { justDone: true });
      act.remove();
      tr.replaceWith(done);
      done.querySelector("[data-test=done]")?.focus();
    })));
    return [tr, act];
  };
  for (const f of first.items || []) tbody.append(...rows(f));
  const alert = alertBox();
  let next = first.next ?? null;
  const more = h("button", { type: "button", class: "more", dataset: { action: "more" }, hidden: next == null }, t("more"));
  more.addEventListener("click", async () => {
    more.disabled = true; alert.clear();
    try {
      const page = await load(next);
      for (const f of page.items || []) tbody.append(...rows(f));
      next = page.next ?? null; more.hidden = next == null;
    } catch (err) { alert.show(errorText(err)); } finally { more.disabled = false; }
  });

  return h("section", { class: "wide-page" },
    heading(t("ops.findings")),
    opsTabs("#/ops/findings"),
    h("div", { class: "field inline" }, h("label", { for: filter.id }, t("findings.show")), filter),
    h("section", { class: "card" },
      table([t("runs.id"), t("findings.billDate"), t("findings.kind"), t("findings.tradeNo"), t("findings.providerAmt"),
        t("findings.ourAmt"), t("findings.detail"), t("status"), t("findings.acted"), t("findings.note"), t("time")], tbody,
      { class: "list findings", dataset: { test: "findings" } }),
      (first.items || []).length ? null : empty(t("findings.none")),
      more, alert));
}

// ---- refunds --------------------------------------------------------------------------------

const REFUND_STATUS = ["all", "requested", "processing", "abnormal", "succeeded", "failed"];

function refundRow(r) {
  return h("tr", { dataset: { refund: r.id, trade: r.tradeNo, status: r.status } },
    h("td", { class: "num" }, String(r.id)),
    h("td", { class: "mono" }, r.refundNo),
    h("td", { class: "mono" }, r.tradeNo || "—"),
    h("td", null, r.biz ? `${r.biz} ${r.bizId}` : "—"),
    h("td", { class: "num" }, fmtMoney(r.amt)),
    h("td", { class: "note" }, r.reason),
    h("td", null, h("span", { class: `badge rf-${r.status}`, dataset: { test: "status" } }, r.status)),
    h("td", { dataset: { test: "requested-by" } }, t("refunds.admin", { uid: r.requestedBy }),
      r.allowNegative ? h("span", { class: "badge warn", title: t("refunds.allowNegative") }, t("refunds.negativeAllowed")) : null),
    h("td", { class: "detail" }, r.detail || (r.providerRefundId ? r.providerRefundId : "")),
    h("td", null, time(r.refundedAt)),
    h("td", null, time(r.ctime)));
}

export async function refunds(ctx) {
  const status = REFUND_STATUS.includes(ctx.query.get("status")) ? ctx.query.get("status") : "all";
  const load = (cursor, signal) => api("/payments/refunds", { query: { status, cursor, limit: 20 }, signal });
  let first;
  try { first = await load(null, ctx.signal); } catch (err) { throw notAdmin(err); }

  const filter = select("status", REFUND_STATUS.map((s) => [s, t(`refunds.s.${s}`)]), { value: status });
  filter.id = "refunds-status";
  filter.addEventListener("change", () => ctx.navigate(`#/ops/refunds?status=${filter.value}`));

  // The list, newest first, with a pager.
  const tbody = h("tbody");
  const emptyNote = empty(t("refunds.none"));
  const show = (r) => {
    const tr = refundRow(r);
    const old = tbody.querySelector(`tr[data-refund="${CSS.escape(String(r.id))}"]`);
    if (old) old.replaceWith(tr);
    else if (status === "all" || status === r.status) tbody.prepend(tr);
    emptyNote.hidden = tbody.rows.length > 0;
  };
  for (const r of first.items || []) tbody.append(refundRow(r));
  emptyNote.hidden = tbody.rows.length > 0;
  const listAlert = alertBox();
  let next = first.next ?? null;
  const more = h("button", { type: "button", class: "more", dataset: { action: "more" }, hidden: next == null }, t("more"));
  more.addEventListener("click", async () => {
    more.disabled = true; listAlert.clear();
    try {
      const page = await load(next);
      for (const r of page.items || []) tbody.append(refundRow(r));
      next = page.next ?? null; more.hidden = next == null;
    } catch (err) { listAlert.show(errorText(err)); } finally { more.disabled = false; }
  });

  // Refund a payment.
  const alert = alertBox();
  const result = statusLine();
  result.dataset.test = "refund-result";
  const tradeNo = input("tradeNo", { class: "mono", value: ctx.query.get("tradeNo") || "", maxlength: 64 });
  const reason = input("reason", { maxlength: 80 });
  const allowNegative = h("input", { type: "checkbox", name: "allowNegative", id: uid("allow-negative") });
  const form = h("form", { class: "card form grid-form", "aria-labelledby": "refund-title" },
    h("h2", { id: "refund-title" }, t("refunds.formTitle")),
    field(t("refunds.tradeNo"), tradeNo, t("refunds.tradeNoHint")),
    field(t("refunds.reason"), reason, t("refunds.reasonHint")),
    h("div", { class: "wide" }, h("label", { class: "check", for: allowNegative.id }, allowNegative, t("refunds.allowNegative")),
      h("small", { class: "hint" }, ` ${t("refunds.allowNegativeHint")}`)),
    h("div", { class: "wide" }, alert, result),
    h("div", { class: "actions wide" }, h("button", { type: "submit", class: "primary", dataset: { action: "refund" } }, t("refunds.submit"))));
  onSubmit(form, alert, async () => {
    result.clear();
    const body = { tradeNo: tradeNo.value.trim(), reason: reason.value.trim(), allowNegative: allowNegative.checked };
    if (!confirm(t("refunds.confirm", { tradeNo: body.tradeNo }))) return;
    const r = await api("/payments/refunds", { method: "POST", body });
    result.show(t("refunds.result", { refundNo: r.refundNo, amt: fmtMoney(r.amt), tradeNo: r.tradeNo, status: t(`refunds.s.${r.status}`) }));
    result.dataset.status = r.status;
    show(r);
  });

  return h("section", { class: "wide-page" },
    heading(t("ops.refunds")),
    opsTabs("#/ops/refunds"),
    form,
    h("div", { class: "field inline" }, h("label", { for: filter.id }, t("findings.show")), filter),
    h("section", { class: "card" },
      table([t("runs.id"), t("refunds.refundNo"), t("refunds.tradeNo"), t("refunds.biz"), t("refunds.amt"), t("refunds.reason"),
        t("status"), t("refunds.requestedBy"), t("findings.detail"), t("refunds.refundedAt"), t("time")], tbody,
      { class: "list refunds", dataset: { test: "refunds" } }),
      emptyNote, more, listAlert));
}

// ---- instances ------------------------------------------------------------------------------

export async function instances(ctx) {
  const load = (signal) => Promise.all([
    api("/admin/instances", { signal }),
    api("/readyz", { raw: true, signal }),
  ]);
  let first;
  try { first = await load(ctx.signal); } catch (err) { throw notAdmin(err); }

  const tbody = h("tbody");
  const ready = h("div", { class: "ready" });
  const alert = alertBox();
  const dependency = (v) => h("span", { class: ["badge", v === "up" ? "ok" : v === "not configured" ? "" : "bad"] }, v ?? "—");
  const details = (d) => {
    if (!d || typeof d !== "object" || !Object.keys(d).length) return "—";
    return h("ul", { class: "kv" }, Object.entries(d).map(([k, v]) =>
      h("li", null, h("span", { class: "k" }, k), ": ", typeof v === "string" ? v : JSON.stringify(v))));
  };
  const paint = ([inst, rz]) => {
    const self = inst?.self;
    tbody.replaceChildren(...(inst?.instances || []).map((i) => h("tr", { dataset: { instance: i.id }, class: i.id === self ? "self" : null },
      h("td", { class: "mono" }, i.id, i.id === self ? h("span", { class: "badge" }, t("instances.this")) : null),
      h("td", null, i.role ?? "—"),
      h("td", null, i.mode ?? "—"),
      h("td", null, i.version ?? "—"),
      h("td", null, i.startedAt ? fmtTime(i.startedAt, { seconds: true }) : "—"),
      h("td", null, i.seenAt ? fmtRelative(i.seenAt, Date.now()) : "—"),
      h("td", null, dependency(i.database)),
      h("td", null, dependency(i.redis)),
      h("td", null, details(i.details)))));
    const d = rz.body?.data || {};
    ready.replaceChildren(
      h("p", null, h("strong", null, t("instances.readyz")), " ",
        h("span", { class: ["badge", rz.status === 200 ? "ok" : "bad"], dataset: { test: "readyz" } },
          rz.status === 200 ? t("instances.ready") : t("instances.notReady", { status: rz.status }))),
      h("dl", { class: "facts" },
        h("dt", null, t("instances.mode")), h("dd", null, d.mode ?? "—"),
        h("dt", null, t("instances.database")), h("dd", null, dependency(d.database)),
        h("dt", null, t("instances.redis")), h("dd", null, dependency(d.redis)),
        h("dt", null, t("instances.details")), h("dd", null, details(d.details))),
      h("p", { class: "meta" }, t("instances.updated", { time: fmtTime(Date.now(), { seconds: true }) })));
  };
  paint(first);
  every(ctx, 5000, async () => {
    try { paint(await load(ctx.signal)); alert.clear(); } catch (err) { if (!isAbort(err)) alert.show(errorText(err)); }
  });

  return h("section", { class: "wide-page" },
    heading(t("ops.instances")),
    opsTabs("#/ops/instances"),
    alert,
    h("section", { class: "card" }, h("h2", null, t("instances.thisOne")), ready),
    h("section", { class: "card" },
      table([t("instances.id"), t("instances.role"), t("instances.mode"), t("instances.version"), t("instances.started"),
        t("instances.seen"), t("instances.database"), t("instances.redis"), t("instances.details")], tbody, { class: "list instances" })));
}
