// pages/search.js — #/search?q= : articles (highlighted title and snippet) and users, each list
// with its own "more" (its cursor); a 503 while the index is rebuilt is a friendly message.

import { h, decodeHtml, highlight } from "../dom.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { input, pager, emptyItem, time, userLink, errorText, heading } from "../ui.js";

const LIMIT = 10;

export async function search(ctx) {
  const q = (ctx.query.get("q") || "").trim();
  const box = input("q", { type: "search", value: q, placeholder: t("search.placeholder"), autocomplete: "off" });
  box.id = "search-q";
  const form = h("form", { class: "search-form", role: "search" },
    h("label", { for: box.id, class: "sr-only" }, t("search.label")),
    box,
    h("button", { type: "submit", class: "primary" }, t("search.go")));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const v = box.value.trim();
    ctx.navigate(v ? `#/search?q=${encodeURIComponent(v)}` : "#/search");
  });
  const page = h("section", { class: "search-page" }, heading(q ? t("search.titleFor", { q }) : t("search.title")), form);
  if (!q) return page;

  let data;
  try {
    data = await api("/search", { query: { q, type: "all", limit: LIMIT }, signal: ctx.signal });
  } catch (err) {
    if (err.status === 503) {
      page.append(h("div", { class: "alert info", role: "alert" }, t("search.rebuilding"), " ", h("span", { class: "muted" }, errorText(err))));
      return page;
    }
    if (err.status && err.status !== 401) {
      page.append(h("div", { class: "alert", role: "alert" }, errorText(err)));
      return page;
    }
    throw err;
  }

  const artList = h("ul", { class: "articles", dataset: { test: "search-articles" } });
  const artPager = pager(artList, async (cursor) => (await api("/search", { query: { q, type: "article", cursor, limit: LIMIT } })).articles, hitItem);
  for (const a of data.articles?.items || []) artList.append(hitItem(a));
  if (!(data.articles?.items || []).length) artList.append(emptyItem(t("search.noArticles")));
  artPager.setNext(data.articles?.next);

  const userList = h("ul", { class: "users", dataset: { test: "search-users" } });
  const userPager = pager(userList, async (cursor) => (await api("/search", { query: { q, type: "user", cursor, limit: LIMIT } })).users, userHit);
  for (const u of data.users?.items || []) userList.append(userHit(u));
  if (!(data.users?.items || []).length) userList.append(emptyItem(t("search.noUsers")));
  userPager.setNext(data.users?.next);

  page.append(h("div", { class: "columns" },
    h("section", { class: "card col-main", "aria-labelledby": "sa-title" },
      h("h2", { id: "sa-title" }, t("search.articles")), artList, artPager.el),
    h("section", { class: "card col-side", "aria-labelledby": "su-title" },
      h("h2", { id: "su-title" }, t("search.users")), userList, userPager.el)));
  return page;
}

function hitItem(a) {
  const title = a.highlight?.title ? highlight(a.highlight.title) : a.title || t("untitled");
  const snippet = a.highlight?.content ? highlight(a.highlight.content) : decodeHtml(a.abstract || "");
  return h("li", { class: "article-item", dataset: { id: a.id } },
    h("a", { class: "article-title", href: `#/article/${a.id}` }, title),
    h("p", { class: "abstract" }, snippet),
    h("p", { class: "meta" },
      a.author ? [userLink(a.author), " · "] : null,
      time(a.ctime),
      ` · ${t("count.likes", { n: a.likeCnt ?? 0 })}`,
      (a.tags || []).length ? [" · ", (a.tags || []).map((n) => h("span", { class: "tag" }, `#${typeof n === "string" ? n : n.name}`))] : null));
}

function userHit(u) {
  return h("li", { class: "user-item", dataset: { id: u.id } },
    h("a", { href: `#/user/${u.id}` }, u.nickname || `user${u.id}`),
    u.aboutMe ? h("p", { class: "abstract" }, u.aboutMe) : null);
}
