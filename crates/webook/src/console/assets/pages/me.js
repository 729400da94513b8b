// pages/me.js — the logged-in user's own pages: #/me (profile view and edit), #/me/articles
// (their articles, every status, paged by offset) and #/me/account (balance, ledger entries,
// rewards sent and received).

import { h } from "../dom.js";
import { api } from "../api.js";
import { t, fmtMoney } from "../i18n.js";
import * as session from "../session.js";
import { field, input, textarea, alertBox, statusLine, onSubmit, time, table, empty, tabs, heading, errorText } from "../ui.js";
import { displayName, probeAdmin } from "./auth.js";

const meTabs = (current) => tabs([
  ["#/me", t("me.profile")],
  ["#/me/articles", t("me.articles")],
  ["#/me/account", t("me.account")],
], current);

export async function me(ctx) {
  // The admin probe rides along (≤ 2 calls): this page refreshes what the nav knows.
  const [p, admin] = await Promise.all([
    api("/users/profile", { bare: true, signal: ctx.signal }),
    probeAdmin(ctx.signal),
  ]);
  session.update({ uid: p.Id, name: displayName(p), admin });

  const alert = alertBox();
  const status = statusLine();
  const nickname = input("nickname", { value: p.Nickname || "", maxlength: 64, autocomplete: "nickname" });
  const birthday = input("birthday", { type: "date", value: p.Birthday || "", max: new Date().toISOString().slice(0, 10) });
  const aboutMe = textarea("aboutMe", { rows: 5, maxlength: 1024, value: p.AboutMe || "" });
  const form = h("form", { class: "card form" },
    h("h2", null, t("me.edit")),
    field(t("me.nickname"), nickname),
    field(t("me.birthday"), birthday, t("me.birthdayHint")),
    field(t("me.aboutMe"), aboutMe),
    alert, status,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, t("save"))));
  onSubmit(form, alert, async () => {
    status.clear();
    const body = { nickname: nickname.value.trim(), birthday: birthday.value, aboutMe: aboutMe.value };
    await api("/users/edit", { method: "POST", body });
    session.update({ name: body.nickname || p.Email || p.Phone || `user${p.Id}` });
    status.show(t("me.saved"));
  });

  const dl = h("dl", { class: "facts" },
    h("dt", null, t("me.id")), h("dd", null, String(p.Id)),
    h("dt", null, t("auth.email")), h("dd", null, p.Email || "—"),
    h("dt", null, t("auth.phone")), h("dd", null, p.Phone || "—"));
  return h("section", null,
    heading(t("me.title")),
    meTabs("#/me"),
    h("div", { class: "columns" },
      h("div", { class: "col-main" }, form),
      h("aside", { class: "col-side" },
        h("section", { class: "card" }, h("h2", null, t("me.account")), dl,
          h("p", null, h("a", { href: `#/user/${p.Id}` }, t("me.publicPage")))))));
}

const PAGE = 20;
const STATUS = { 1: "status.draft", 2: "status.published", 3: "status.withdrawn" };

export async function myArticles(ctx) {
  let offset = 0;
  const first = await api("/articles/list", { method: "POST", body: { offset, limit: PAGE }, signal: ctx.signal });
  const tbody = h("tbody", { dataset: { test: "my-articles" } });
  const row = (a) => h("tr", { dataset: { id: a.id, status: a.status } },
    h("td", null, h("a", { href: `#/write/${a.id}` }, a.title || t("untitled"))),
    h("td", null, h("span", { class: `badge s${a.status}` }, t(STATUS[a.status] || "status.unknown"))),
    h("td", null, time(a.utime)),
    h("td", { class: "row-actions" },
      h("a", { href: `#/write/${a.id}` }, t("edit")),
      a.status === 2 ? [" · ", h("a", { href: `#/article/${a.id}` }, t("view"))] : null));
  for (const a of first || []) tbody.append(row(a));
  const alert = alertBox();
  const more = h("button", { type: "button", class: "more", dataset: { action: "more" }, hidden: (first || []).length < PAGE }, t("more"));
  more.addEventListener("click", async () => {
    more.disabled = true;
    alert.clear();
    try {
      offset += PAGE;
      const page = await api("/articles/list", { method: "POST", body: { offset, limit: PAGE } });
      for (const a of page || []) tbody.append(row(a));
      more.hidden = (page || []).length < PAGE || offset + PAGE > 10000;
    } catch (err) { offset -= PAGE; alert.show(errorText(err)); } finally { more.disabled = false; }
  });
  return h("section", null,
    heading(t("me.articles")),
    meTabs("#/me/articles"),
    h("p", null, h("a", { class: "button primary", href: "#/write" }, t("nav.write"))),
    h("section", { class: "card" },
      (first || []).length
        ? table([t("editor.title"), t("status"), t("updated"), ""], tbody, { class: "list" })
        : empty(t("me.noArticles")),
      more, alert));
}

const REWARD_STATUS = { RewardStatusInit: "reward.s.init", RewardStatusPayed: "reward.s.paid", RewardStatusFailed: "reward.s.failed" };

export async function account(ctx) {
  const { signal } = ctx;
  const [acct, sent, received] = await Promise.all([
    api("/account", { query: { limit: 20 }, signal }),
    api("/rewards", { query: { role: "sent", limit: 10 }, signal }),
    api("/rewards", { query: { role: "received", limit: 10 }, signal }),
  ]);

  const entryRow = (e) => h("tr", { dataset: { id: e.id } },
    h("td", null, time(e.ctime)),
    h("td", { class: ["num", e.amt < 0 ? "neg" : "pos"] }, (e.amt > 0 ? "+" : "") + fmtMoney(e.amt)),
    h("td", null, e.memo || `${e.biz} ${e.bizId}`));

  const rewardRow = (r) => h("tr", { dataset: { rid: r.rid, status: r.status } },
    h("td", null, time(r.ctime)),
    h("td", null, r.article ? h("a", { href: `#/article/${r.article.id}` }, r.article.title || t("untitled")) : "—"),
    h("td", { class: "num" }, fmtMoney(r.amt)),
    h("td", null, t(REWARD_STATUS[r.status] || "status.unknown")));

  const section = (title, testId, first, headers, rowFn, load) => {
    const tbody = h("tbody", { dataset: { test: testId } });
    for (const x of first.items || []) tbody.append(rowFn(x));
    const alert = alertBox();
    let next = first.next ?? null;
    const more = h("button", { type: "button", class: "more", dataset: { action: "more" }, hidden: next == null }, t("more"));
    more.addEventListener("click", async () => {
      more.disabled = true;
      alert.clear();
      try {
        const page = await load(next);
        for (const x of page.items || []) tbody.append(rowFn(x));
        next = page.next ?? null;
        more.hidden = next == null;
      } catch (err) { alert.show(errorText(err)); } finally { more.disabled = false; }
    });
    return h("section", { class: "card" }, h("h2", null, title),
      table(headers, tbody, { class: "list" }),
      (first.items || []).length ? null : empty(t("none")), more, alert);
  };

  return h("section", null,
    heading(t("me.account")),
    meTabs("#/me/account"),
    h("section", { class: "card balance-card" },
      h("p", { class: "muted" }, t("account.balance")),
      h("p", { class: "balance", dataset: { test: "balance" } }, fmtMoney(acct.balance ?? 0))),
    section(t("account.entries"), "entries", acct.entries || { items: [] }, [t("time"), t("account.amount"), t("account.memo")], entryRow,
      async (cursor) => (await api("/account", { query: { cursor, limit: 20 } })).entries),
    section(t("account.sent"), "rewards-sent", sent, [t("time"), t("account.article"), t("account.amount"), t("status")], rewardRow,
      (cursor) => api("/rewards", { query: { role: "sent", cursor, limit: 10 } })),
    section(t("account.received"), "rewards-received", received, [t("time"), t("account.article"), t("account.amount"), t("status")], rewardRow,
      (cursor) => api("/rewards", { query: { role: "received", cursor, limit: 10 } })));
}
