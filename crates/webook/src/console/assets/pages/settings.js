// pages/settings.js — #/ops/settings (admins): the live settings (API.md → Live settings). Each
// live key in a row: the value in effect on this instance, its start-up value, who set the live
// value and when, an input to change it (Save: PUT /admin/settings/{key}; every instance applies
// it within seconds) and Reset (DELETE: back to the start-up value). A refused value shows the
// server's one-line message under its row; a value this instance does not apply shows why.
// Below, the settings that need a restart (read-only, collapsed) and the audit log of changes
// (GET /admin/settings-log), newest first, paged.

import { h } from "../dom.js";
import { api } from "../api.js";
import { t, fmtTime } from "../i18n.js";
import { input, alertBox, statusLine, onSubmit, actionButton, table, empty, heading } from "../ui.js";
import { opsTabs, notAdmin } from "./ops.js";

/** A value as typed and shown: text as is, anything else as JSON. */
const shown = (v) => (v == null ? "" : typeof v === "string" ? v : JSON.stringify(v));

/** A typed value as the API takes it: JSON when it reads as JSON (10, true, [..]), else text. */
function parsed(text) {
  const s = text.trim();
  try { return JSON.parse(s); } catch { return s; }
}

function settingRow(s, onChange) {
  const alert = alertBox();
  const value = input("value", { value: shown(s.value), class: "mono", "aria-label": t("settings.valueOf", { key: s.key }) });
  const start = h("td", { class: "mono", dataset: { test: "start-value" } });
  const by = h("td", { class: "meta", dataset: { test: "set-by" } });
  const refused = h("div", { class: "error-text", dataset: { test: "refused" } });
  const reset = actionButton(t("settings.reset"), "reset-setting", async () => {
    const view = await api(`/admin/settings/${encodeURIComponent(s.key)}`, { method: "DELETE" });
    paint(view);
    onChange(t("settings.resetDone", { key: s.key }));
  }, alert, { class: "small" });
  const form = h("form", { class: "inline-form", dataset: { key: s.key } },
    value, h("button", { type: "submit", class: "small primary", dataset: { action: "save-setting" } }, t("save")));
  const tr = h("tr", { dataset: { setting: s.key } },
    h("td", { class: "mono" }, s.key),
    h("td", null, form, refused, alert),
    start, by,
    h("td", { class: "row-actions" }, reset));
  function paint(v) {
    s = v;
    tr.dataset.overridden = String(!!v.overridden);
    if (document.activeElement !== value) value.value = shown(v.value);
    start.textContent = shown(v.startValue);
    by.textContent = v.overridden
      ? t("settings.setBy", { who: v.admin === 0 ? v.via : t("settings.admin", { id: v.admin }), time: fmtTime(v.utime) })
      : t("settings.startUp");
    reset.hidden = !v.overridden;
    refused.textContent = v.refused ? t("settings.refusedHere", { why: v.refused }) : "";
  }
  paint(s);
  onSubmit(form, alert, async () => {
    const view = await api(`/admin/settings/${encodeURIComponent(s.key)}`, { method: "PUT", body: { value: parsed(value.value) } });
    value.value = shown(view.value);
    paint(view);
    onChange(t("settings.saved", { key: s.key }));
  });
  return tr;
}

function logRow(e) {
  const who = e.admin === 0 ? e.via : t("settings.admin", { id: e.admin });
  return h("tr", { dataset: { log: e.id, key: e.key } },
    h("td", null, fmtTime(e.ctime, { seconds: true })),
    h("td", { class: "mono" }, e.key),
    h("td", { class: "mono" }, e.oldValue === undefined ? t("settings.startUp") : shown(e.oldValue)),
    h("td", { class: "mono" }, e.newValue === undefined ? t("settings.startUp") : shown(e.newValue)),
    h("td", null, who));
}

export async function settings(ctx) {
  let all;
  try { all = await api("/admin/settings", { signal: ctx.signal }); } catch (err) { throw notAdmin(err); }
  const done = statusLine();
  const logBody = h("tbody", { dataset: { test: "settings-log" } });
  let before = null;
  const loadLog = async (reset) => {
    if (reset) { before = null; logBody.replaceChildren(); }
    const page = await api("/admin/settings-log", { query: { before, limit: 20 } });
    for (const e of page || []) logBody.append(logRow(e));
    if ((page || []).length) before = page[page.length - 1].id;
    more.hidden = (page || []).length < 20;
  };
  const more = h("button", { type: "button", class: "small", dataset: { action: "more-log" } }, t("more"));
  more.addEventListener("click", () => loadLog(false));
  const changed = (text) => { done.show(text); loadLog(true); };

  const live = (all || []).filter((s) => s.live);
  const fixed = (all || []).filter((s) => !s.live);
  const rows = h("tbody", { dataset: { test: "live-settings" } }, live.map((s) => settingRow(s, changed)));
  const restart = h("details", { class: "card" },
    h("summary", null, t("settings.restartOnly", { n: fixed.length })),
    table([t("settings.key"), t("settings.value")], h("tbody", null, fixed.map((s) =>
      h("tr", { dataset: { setting: s.key } }, h("td", { class: "mono" }, s.key), h("td", { class: "mono" }, shown(s.value)))))));
  await loadLog(true);
  return h("section", { class: "wide-page" },
    heading(t("settings.title")),
    opsTabs("#/ops/settings"),
    h("p", { class: "meta" }, t("settings.intro")),
    done,
    live.length ? table([t("settings.key"), t("settings.value"), t("settings.startValue"), t("settings.by"), ""], rows)
      : empty(t("none")),
    restart,
    heading(t("settings.log"), 2),
    table([t("time"), t("settings.key"), t("settings.from"), t("settings.to"), t("settings.by")], logBody),
    more);
}
