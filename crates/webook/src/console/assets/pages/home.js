// pages/home.js — #/ : the hot list (public, with the time it was computed), the latest published
// articles (GET /articles/pub) and, for a logged-in reader, their feed (GET /feed), each with
// "more". Anonymous visitors get the hot list, the latest articles (unless the site requires a
// login to read), a search box and an invitation to log in.

import { h, decodeHtml } from "../dom.js";
import { api, apiWithHeaders } from "../api.js";
import { t } from "../i18n.js";
import * as session from "../session.js";
import { pager, articleItem, emptyItem, time, userLink, errorText, input, heading } from "../ui.js";

// The page's h1 for screen readers and the outline; the header's logo already shows the name.
const homeHeading = () => { const h1 = heading(t("home.title")); h1.classList.add("sr-only"); return h1; };

const settle = (p) => p.then((v) => ({ ok: true, v }), (e) => ({ ok: false, e }));

export async function home(ctx) {
  const me = session.current();
  const { signal } = ctx;
  const [hot, latest, feed] = await Promise.all([
    settle(apiWithHeaders("/ranking/top", { query: { limit: 20 }, signal })),
    settle(api("/articles/pub", { query: { limit: 10 }, signal })),
    me ? settle(api("/feed", { query: { limit: 20 }, signal })) : null,
  ]);
  // A visitor refused the latest articles (the site requires a login to read) still gets the rest.
  for (const r of [hot, latest, feed]) if (r && !r.ok && (r.e?.name === "AbortError" || (me && r.e?.status === 401))) throw r.e;

  const searchBox = input("q", { type: "search", placeholder: t("search.placeholder"), "aria-label": t("search.label") });
  const searchForm = h("form", { class: "search-inline", role: "search" }, searchBox,
    h("button", { type: "submit" }, t("search.go")));
  searchForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const q = searchBox.value.trim();
    if (q) ctx.navigate(`#/search?q=${encodeURIComponent(q)}`);
  });

  const main = h("div", { class: "columns" });
  const left = h("div", { class: "col-main" });
  const right = h("aside", { class: "col-side" });
  main.append(left, right);

  // Hot list.
  const hotList = h("ol", { class: "hot", dataset: { test: "hot" } });
  const computedAt = h("span", { dataset: { test: "computed-at" } });
  const hotSection = h("section", { class: "card", "aria-labelledby": "hot-title" },
    h("h2", { id: "hot-title" }, t("home.hot")),
    h("p", { class: "meta" }, t("home.computedAt"), " ", computedAt));
  if (hot.ok) {
    const at = Number(hot.v.headers.get("x-ranking-computed-at"));
    computedAt.append(at ? time(at, { seconds: true }) : "—");
    for (const a of hot.v.data || []) {
      hotList.append(h("li", null,
        h("a", { href: `#/article/${a.id}` }, a.title || t("untitled")),
        h("span", { class: "meta" }, ` ${a.author?.name ?? ""} · ${t("count.likes", { n: a.likeCnt ?? 0 })}`)));
    }
    if (!(hot.v.data || []).length) hotList.append(emptyItem(t("home.hotEmpty")));
    hotSection.append(hotList);
  } else {
    computedAt.append("—");
    hotSection.append(hotList, h("div", { class: "alert", role: "alert" },
      hot.e?.status === 503 ? t("home.hotNotYet") : errorText(hot.e)));
  }

  // Latest.
  const latestList = h("ul", { class: "articles", dataset: { test: "latest" } });
  const latestSection = h("section", { class: "card", "aria-labelledby": "latest-title" },
    h("h2", { id: "latest-title" }, t("home.latest")), latestList);
  if (latest.ok) {
    const p = pager(latestList, (cursor) => api("/articles/pub", { query: { cursor, limit: 10 } }), (a) => articleItem(a));
    for (const a of latest.v.items || []) latestList.append(articleItem(a));
    if (!(latest.v.items || []).length) latestList.append(emptyItem(t("home.latestEmpty")));
    p.setNext(latest.v.next);
    latestSection.append(p.el);
  } else {
    latestSection.append(h("div", { class: "alert", role: "alert" }, errorText(latest.e)));
  }

  if (!me) {
    left.append(
      h("section", { class: "card intro" },
        h("h2", null, t("home.welcome")),
        h("p", null, t("home.anonymous")),
        h("p", { class: "actions" },
          h("a", { class: "button primary", href: "#/login" }, t("nav.login")),
          h("a", { class: "button", href: "#/signup" }, t("nav.signup")))),
      ...(latest.ok ? [latestSection] : []),
      hotSection);
    right.append(h("section", { class: "card" }, h("h2", null, t("nav.search")), searchForm));
    return h("section", null, homeHeading(), main);
  }

  // Feed.
  const feedList = h("ul", { class: "feed", dataset: { test: "feed" } });
  const feedSection = h("section", { class: "card", "aria-labelledby": "feed-title" },
    h("h2", { id: "feed-title" }, t("home.feed")), feedList);
  if (feed.ok) {
    const p = pager(feedList, (cursor) => api("/feed", { query: { cursor, limit: 20 } }), feedItem);
    for (const item of feed.v.items || []) feedList.append(feedItem(item));
    if (!(feed.v.items || []).length) feedList.append(emptyItem(t("home.feedEmpty")));
    p.setNext(feed.v.next);
    feedSection.append(p.el);
  } else {
    feedSection.append(h("div", { class: "alert", role: "alert" }, errorText(feed.e)));
  }

  left.append(latestSection, feedSection);
  right.append(h("section", { class: "card" }, h("h2", null, t("nav.search")), searchForm), hotSection);
  return h("section", null, homeHeading(), main);
}

/** One feed item: who did what, with the article or comment concerned. */
function feedItem(item) {
  const actor = userLink(item.actor);
  const art = item.article ? h("a", { href: `#/article/${item.article.id}` }, item.article.title || t("untitled")) : null;
  let line;
  switch (item.type) {
    case "article": line = t.parts("feed.article", { actor, article: art }); break;
    case "like": line = t.parts("feed.like", { actor, article: art || t("feed.yourArticle") }); break;
    case "follow": line = t.parts("feed.follow", { actor }); break;
    case "comment": line = art ? t.parts("feed.commentOn", { actor, article: art }) : t.parts("feed.comment", { actor }); break;
    default: line = [actor, ` ${item.type}`];
  }
  return h("li", { class: `feed-item feed-${item.type}`, dataset: { id: item.id, type: item.type } },
    h("p", null, line),
    item.type === "article" && item.article?.abstract ? h("p", { class: "abstract" }, decodeHtml(item.article.abstract)) : null,
    item.comment ? h("blockquote", { class: "quote" }, decodeHtml(item.comment.content)) : null,
    h("p", { class: "meta" }, time(item.ctime)));
}
