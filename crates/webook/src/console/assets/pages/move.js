// pages/move.js — #/ops/move (admins): the online database move from SQLite to PostgreSQL.
// Shows the phase (SrcOnly → SrcFirst → DstFirst → DstOnly), the background task, the copy
// progress of every table, the replication backlog, the last validation and its findings; and
// drives the move: start it with a destination URL, validate (full, or the rows changed in the
// last minutes), fix findings, switch to a neighbouring phase, abort a switch in progress and
// finish (each switch, the abort and the finish after a window.confirm; the finish answers the
// configuration to restart with). A switch runs on the server, not in this page: closing the tab
// does not stop it, and the page shows its stage, members, coordinator and outcome while polling.
// Re-polled every 2 s while visible. The page is built once and updated in place, so a typed
// URL, the focus and the findings pages already loaded stay.

import { h, append } from "../dom.js";
import { api, isAbort, ApiError } from "../api.js";
import { t, fmtTime, fmtRelative, fmtDuration } from "../i18n.js";
import { field, input, alertBox, statusLine, onSubmit, table, heading, errorText } from "../ui.js";
import { opsTabs, notAdmin, every, learnSkew, serverNow } from "./ops.js";

const BASE = "/admin/db-move";
const PHASES = ["SrcOnly", "SrcFirst", "DstFirst", "DstOnly"];

/** t(`${prefix}.${value}`), or the value itself when there is no such text (a newer server). */
function label(prefix, value) {
  const key = `${prefix}.${value}`;
  const s = t(key);
  return s === key ? String(value ?? "—") : s;
}

/** The phases one switch away. None back from DstOnly: the source no longer gets the writes. */
function neighbours(s) {
  const i = PHASES.indexOf(s.phase);
  if (i < 0 || s.phase === "DstOnly") return [];
  const out = i > 0 ? [PHASES[i - 1]] : [];
  if (i > 0 || s.destination) out.push(PHASES[i + 1]);
  return out;
}

async function getStatus(signal) {
  const r = await api(BASE, { raw: true, signal });
  learnSkew(r.headers);
  if (r.body?.code === 0 && r.status < 300) return r.body.data;
  throw notAdmin(new ApiError(r.status, r.body?.code ?? -1, r.body?.msg || t("err.http", { status: r.status })));
}

const post = (path, body) => api(`${BASE}/${path}`, { method: "POST", body });
const set = (el, text) => { if (el.textContent !== text) el.textContent = text; };
const when = (ms) => (ms == null ? "—" : `${fmtTime(ms, { seconds: true })} (${fmtRelative(ms, serverNow())})`);
const num = (v) => (v == null ? "—" : String(v));

export async function move(ctx) {
  const loadFindings = (cursor, signal) => api(`${BASE}/findings`, { query: { cursor, limit: 20 }, signal });
  let first;
  let firstFindings;
  try {
    [first, firstFindings] = await Promise.all([getStatus(ctx.signal), loadFindings(null, ctx.signal)]);
  } catch (err) { throw notAdmin(err); }
  let status = first;
  const pollAlert = alertBox();

  // Phase.
  const phaseTitle = h("h2", { id: "move-phase-title", tabindex: "-1" }, t("move.phaseTitle"));
  const steps = PHASES.map((p) => h("li", { dataset: { step: p } }, label("move.p", p), " ", h("code", null, p)));
  const phaseEl = h("strong", { class: "mono", dataset: { test: "move-phase" } });
  const phaseHelp = h("span", { class: "muted" });
  const sourceEl = h("code", { dataset: { test: "move-source" } });
  const destEl = h("code", { dataset: { test: "move-destination" } });
  const epochEl = h("dd", { dataset: { test: "move-epoch" } });
  const stageEl = h("code", { dataset: { test: "move-stage" } });
  const stageText = h("span", { class: "muted" });
  const stageDt = h("dt", null, t("move.stage"));
  const stageDd = h("dd", null, stageEl, " ", stageText);
  const membersEl = h("dd", { dataset: { test: "move-members" } });
  const coordinatorEl = h("dd", { dataset: { test: "move-coordinator" } });
  const switchFacts = [h("dt", null, t("move.members")), membersEl, h("dt", null, t("move.coordinator")), coordinatorEl];
  const outcomeEl = h("dd", { dataset: { test: "move-outcome" } });
  const outcomeDt = h("dt", null, t("move.outcome"));
  const fencedEl = h("dd", { dataset: { test: "move-fenced" } });

  // Start.
  const startAlert = alertBox();
  const destination = input("destination", { class: "mono", spellcheck: "false", autocapitalize: "off",
    placeholder: "postgres://user:password@host:5432/webook" });
  const startForm = h("form", { class: "card form", "aria-labelledby": "move-start-title", hidden: true },
    h("h2", { id: "move-start-title" }, t("move.startTitle")),
    field(t("move.destination"), destination, t("move.destinationHint")),
    startAlert,
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary", dataset: { action: "move-start" } }, t("move.start"))));
  onSubmit(startForm, startAlert, async () => {
    const s = await post("start", { destination: destination.value.trim() });
    destination.value = ""; // it may hold a password
    paint(s);
    phaseTitle.focus();
  });

  // Task.
  const taskEl = h("p", { dataset: { test: "move-task" } });
  function paintTask(task) {
    if (!task) {
      delete taskEl.dataset.kind;
      delete taskEl.dataset.state;
      set(taskEl, t("move.noTask"));
      return;
    }
    taskEl.dataset.kind = task.kind;
    taskEl.dataset.state = task.state;
    const end = task.endedAt != null
      ? t("move.ended", { time: when(task.endedAt), d: fmtDuration(task.endedAt - task.startedAt) })
      : t("move.runningFor", { d: fmtDuration(serverNow() - task.startedAt) });
    taskEl.replaceChildren();
    append(taskEl, [
      h("strong", null, label("move.task", task.kind)), " ",
      h("span", { class: ["badge", task.state === "done" ? "ok" : task.state === "failed" ? "bad" : "job-waiting"] },
        label("move.ts", task.state)),
      task.message ? [" · ", h("span", { class: task.state === "failed" ? "error-text" : null }, task.message)] : null,
      h("br"),
      h("span", { class: "meta" }, t("move.started", { time: when(task.startedAt) }), " · ", end)]);
  }

  // Tables.
  const tbody = h("tbody");
  const rows = new Map(); // name → {tr, count, bar, done}
  const noTables = h("p", { class: "empty muted" }, t("move.noTables"));
  function paintTables(list) {
    const seen = new Set();
    for (const tb of list) {
      seen.add(tb.name);
      let e = rows.get(tb.name);
      if (!e) {
        e = { count: h("td", { class: "num" }), done: h("td"),
          bar: h("progress", { max: 1, value: 0, "aria-label": t("move.progressOf", { name: tb.name }) }) };
        e.tr = h("tr", { dataset: { test: `move-table-${tb.name}` } },
          h("td", { class: "mono" }, tb.name), e.count, h("td", { class: "bar" }, e.bar), e.done);
        rows.set(tb.name, e);
      }
      const max = Math.max(1, Number(tb.rows) || 0);
      set(e.count, `${num(tb.copied)} / ${num(tb.rows)}`);
      e.bar.max = max;
      e.bar.value = tb.done && !tb.rows ? 1 : Math.min(Number(tb.copied) || 0, max);
      e.bar.title = `${Math.floor((e.bar.value / max) * 100)} %`;
      set(e.done, tb.done ? t("move.tableDone") : t("move.tableCopying"));
      e.tr.dataset.done = tb.done ? "true" : "false";
    }
    for (const [name, e] of rows) if (!seen.has(name)) { e.tr.remove(); rows.delete(name); }
    const want = list.map((tb) => rows.get(tb.name).tr);
    if (want.some((tr, i) => tbody.children[i] !== tr)) tbody.append(...want);
    noTables.hidden = list.length > 0;
  }

  // Replication backlog and validation.
  const dd = (test) => h("dd", { dataset: { test } });
  const pendingSrc = dd("move-pending-source");
  const pendingDst = dd("move-pending-destination");
  const valAt = dd("move-validation-at");
  const valScope = dd("move-validation-scope");
  const valChecked = dd("move-validation-checked");
  const valFindings = dd("move-validation-findings");
  const openFindings = dd("move-open-findings");

  // Actions: one at a time, every action button disabled while one runs.
  const actAlert = alertBox();
  const actStatus = statusLine();
  const buttons = [];
  let busy = false;
  const button = (text, action, fn, done, cls = null) => {
    const b = h("button", { type: "button", class: cls, dataset: { action } }, text);
    b.addEventListener("click", async () => {
      if (busy) return;
      busy = true;
      actAlert.clear();
      actStatus.clear();
      for (const x of buttons) x.disabled = true;
      try {
        const s = await fn();
        if (s) { paint(s); actStatus.show(typeof done === "function" ? done(s) : done); }
      } catch (err) {
        if (!isAbort(err)) actAlert.show(errorText(err));
      } finally {
        busy = false;
        for (const x of buttons) x.disabled = false;
        if (b.hidden) phaseTitle.focus(); // its phase is gone: keep the focus on the page
      }
    });
    buttons.push(b);
    return b;
  };
  const minutes = h("input", { id: "move-since", name: "sinceMinutes", type: "number", min: 1, step: 1, value: 60,
    inputmode: "numeric" });
  const validate = button(t("move.validateFull"), "move-validate", () => post("validate", {}), t("move.validateStarted"));
  const validateSince = button(t("move.validateSince"), "move-validate-incremental", () => {
    const m = Number(minutes.value);
    if (!minutes.value.trim() || !Number.isFinite(m) || m <= 0) throw new ApiError(0, 4, t("move.badMinutes"));
    return post("validate", { since: Math.round(serverNow() - m * 60000) });
  }, t("move.validateStarted"));
  const fix = button(t("move.fix"), "move-fix", () => post("fix", {}), t("move.fixStarted"));
  const checks = h("div", { class: "actions" }, validate,
    h("span", { class: "move-since" }, h("label", { for: minutes.id }, t("move.sinceMinutes")), minutes), validateSince, fix);
  const switches = {};
  for (const p of PHASES) {
    switches[p] = button(t("move.switchTo", { phase: label("move.p", p) }), `move-switch-${p}`, () => {
      if (!confirm(t(`move.confirm.${status.phase}.${p}`))) return null;
      return post("switch", { phase: p });
    }, (s) => t("move.switched", { phase: label("move.p", s.phase) }), p === "DstOnly" ? "danger" : null);
  }
  // Not one of the one-at-a-time actions: it must work while the switch request still waits.
  const abort = h("button", { type: "button", class: "danger", dataset: { action: "move-abort" }, hidden: true }, t("move.abort"));
  abort.addEventListener("click", async () => {
    if (abort.disabled || !confirm(t("move.confirmAbort"))) return;
    abort.disabled = true;
    actAlert.clear();
    try {
      paint(await post("abort", {}));
      actStatus.show(t("move.aborted"));
    } catch (err) {
      if (!isAbort(err)) actAlert.show(errorText(err));
    } finally { abort.disabled = false; }
  });
  const finish = button(t("move.finish"), "move-finish", () => {
    if (!confirm(t("move.confirmFinish"))) return null;
    return post("finish", {});
  }, t("move.finished"), "primary");
  const restart = h("pre", { class: "restart-with", dataset: { test: "move-restart-with" } });
  const restartBox = h("div", { hidden: true }, h("h3", null, t("move.restartWith")),
    h("p", { class: "meta" }, t("move.restartHint")), restart);

  // Findings (keyset pages; reloaded from the first page whenever a task ends).
  const fBody = h("tbody");
  const fAlert = alertBox();
  let fNext = null;
  let fSeq = 0;
  const more = h("button", { type: "button", class: "more", dataset: { action: "move-findings-more" }, hidden: true }, t("more"));
  const findingRow = (f) => h("tr", { dataset: { finding: f.id, state: f.state } },
    h("td", { class: "num" }, num(f.id)),
    h("td", { class: "mono" }, f.table ?? ""),
    h("td", { class: "mono detail" }, f.key ?? ""),
    h("td", { title: f.kind }, label("move.k", f.kind)),
    h("td", null, h("span", { class: `badge f-${f.state}` }, label("move.fs", f.state))),
    h("td", { class: "detail" }, f.detail ?? ""));
  const showFindings = (page, replace) => {
    const items = page.items || [];
    if (replace) fBody.replaceChildren();
    else if (items.length) fBody.querySelector(":scope > .empty-row")?.remove();
    fBody.append(...items.map(findingRow));
    if (!fBody.rows.length) fBody.append(h("tr", { class: "empty-row" }, h("td", { colspan: 6, class: "muted" }, t("move.noFindings"))));
    fNext = page.next ?? null;
    more.hidden = fNext == null;
  };
  more.addEventListener("click", async () => {
    if (more.disabled || fNext == null) return;
    more.disabled = true;
    fAlert.clear();
    const my = fSeq;
    try {
      const page = await loadFindings(fNext, ctx.signal);
      if (my === fSeq) showFindings(page, false);
    } catch (err) { if (!isAbort(err)) fAlert.show(errorText(err)); } finally { more.disabled = false; }
  });
  const reloadFindings = async () => {
    const my = ++fSeq;
    try {
      const page = await loadFindings(null, ctx.signal);
      if (my === fSeq) { fAlert.clear(); showFindings(page, true); }
    } catch (err) { if (!isAbort(err) && my === fSeq) fAlert.show(errorText(err)); }
  };
  const reload = h("button", { type: "button", class: "small", dataset: { action: "move-findings-reload" } }, t("move.reloadFindings"));
  reload.addEventListener("click", async () => {
    if (reload.disabled) return;
    reload.disabled = true;
    try { await reloadFindings(); } finally { reload.disabled = false; }
  });

  let taskKey = null;
  function paint(s) {
    status = s;
    const i = PHASES.indexOf(s.phase);
    steps.forEach((li, j) => {
      li.classList.toggle("past", i >= 0 && j < i);
      if (j === i) li.setAttribute("aria-current", "step"); else li.removeAttribute("aria-current");
    });
    set(phaseEl, s.phase ?? "—");
    set(phaseHelp, label("move.help", s.phase));
    set(sourceEl, s.source || "—");
    set(destEl, s.destination || "—");
    set(epochEl, num(s.epoch));
    stageDt.hidden = stageDd.hidden = !s.stage;
    set(stageEl, s.stage || "");
    set(stageText, s.stage ? label("move.st", s.stage) : "");
    const switching = ["pause", "aborting", "flip"].includes(s.stage);
    for (const el of switchFacts) el.hidden = !switching;
    set(membersEl, (s.members || []).join(", ") || "—");
    const lease = s.leaseUntil ? fmtDuration(Math.max(0, s.leaseUntil - serverNow())) : "";
    set(coordinatorEl, s.coordinator ? `${s.coordinator} (${t("move.leaseLeft", { d: lease })})` : "—");
    outcomeDt.hidden = outcomeEl.hidden = !s.outcome;
    set(outcomeEl, s.outcome || "");
    const fenced = ["source", "destination"].filter((side) => s.fenced?.[side]).map((side) => t(side === "source" ? "move.source" : "move.dest"));
    set(fencedEl, fenced.length ? fenced.join(", ") : t("move.fencedNone"));
    abort.hidden = !switching;
    startForm.hidden = !(s.phase === "SrcOnly" && !s.destination);
    paintTask(s.task);
    paintTables(s.tables || []);
    set(pendingSrc, num(s.pending?.source));
    set(pendingDst, num(s.pending?.destination));
    const v = s.validation;
    set(valAt, v ? when(v.at) : t("move.notValidated"));
    set(valScope, !v ? "—" : v.since == null ? t("move.full") : t("move.since", { time: when(v.since) }));
    set(valChecked, num(v?.checked));
    // A wait for replication ran out: some findings may be rows that were only in flight.
    set(valFindings, v?.replicationBehind ? `${num(v.findings)} (${t("move.behind")})` : num(v?.findings));
    set(openFindings, num(s.openFindings ?? 0));
    checks.hidden = !s.destination;
    const near = neighbours(s);
    for (const p of PHASES) switches[p].hidden = switching || !near.includes(p);
    finish.hidden = s.phase !== "DstOnly" || !!s.restartWith;
    restartBox.hidden = !s.restartWith;
    set(restart, s.restartWith || "");
    // A task that ended (validate, fix) changed the findings: show them from the first page.
    const key = s.task ? `${s.task.kind}|${s.task.startedAt}|${s.task.state}` : "";
    if (taskKey !== null && key !== taskKey && s.task && s.task.state !== "running") reloadFindings();
    taskKey = key;
  }

  paint(first);
  showFindings(firstFindings, true);

  every(ctx, 2000, async () => {
    try { paint(await getStatus(ctx.signal)); pollAlert.clear(); } catch (err) { if (!isAbort(err)) pollAlert.show(errorText(err)); }
  });

  return h("section", { class: "wide-page" },
    heading(t("ops.move")),
    opsTabs("#/ops/move"),
    pollAlert,
    h("section", { class: "card", "aria-labelledby": "move-phase-title" },
      phaseTitle,
      h("ol", { class: "move-steps", "aria-label": t("move.steps") }, steps),
      h("dl", { class: "facts" },
        h("dt", null, t("move.current")), h("dd", null, phaseEl, " ", phaseHelp),
        h("dt", null, t("move.source")), h("dd", null, sourceEl),
        h("dt", null, t("move.dest")), h("dd", null, destEl),
        h("dt", null, t("move.epoch")), epochEl,
        stageDt, stageDd, ...switchFacts,
        outcomeDt, outcomeEl,
        h("dt", null, t("move.fenced")), fencedEl),
      h("p", { class: "meta" }, t("jobs.live"))),
    startForm,
    h("section", { class: "card" }, h("h2", null, t("move.taskTitle")), taskEl),
    h("section", { class: "card" },
      h("h2", null, t("move.tables")),
      table([t("move.table"), t("move.copied"), t("move.progress"), t("status")], tbody, { class: "list move-tables" }),
      noTables),
    h("section", { class: "card" },
      h("h2", null, t("move.syncTitle")),
      h("dl", { class: "facts" },
        h("dt", null, t("move.pendingSource")), pendingSrc,
        h("dt", null, t("move.pendingDestination")), pendingDst,
        h("dt", null, t("move.lastValidation")), valAt,
        h("dt", null, t("move.scope")), valScope,
        h("dt", null, t("move.checked")), valChecked,
        h("dt", null, t("move.found")), valFindings,
        h("dt", null, t("move.openFindings")), openFindings)),
    h("section", { class: "card" },
      h("h2", null, t("move.actions")),
      checks,
      h("div", { class: "actions" }, PHASES.map((p) => switches[p]), abort, finish),
      actAlert, actStatus, restartBox),
    h("section", { class: "card" },
      h("div", { class: "title-row" }, h("h2", null, t("move.findingsTitle")), reload),
      table([t("runs.id"), t("move.table"), t("move.key"), t("move.kind"), t("status"), t("move.detail")], fBody,
        { class: "list findings move-findings" }),
      more, fAlert));
}
