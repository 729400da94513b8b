// pages/tag.js — #/tag/:id : the published articles carrying one author's tag, newest first, with
// "more" (the API knows only the tag's id; the console links tags to their topics);
// #/topic/:name[?sort=hot] : a topic — every author's tags of that name — newest (or most liked)
// first, with its feed and a follow button.

import { h } from "../dom.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import * as session from "../session.js";
import { alertBox, actionButton, pager, articleItem, emptyItem, heading } from "../ui.js";

export async function tag(ctx) {
  const id = Number(ctx.params[0]);
  const load = (cursor, signal) => api(`/tags/${id}/articles`, { query: { cursor, limit: 20 }, signal });
  const first = await load(null, ctx.signal);
  const list = h("ul", { class: "articles", dataset: { test: "tag-articles" } });
  const p = pager(list, (cursor) => load(cursor), (a) => articleItem(a));
  for (const a of first.items || []) list.append(articleItem(a));
  if (!(first.items || []).length) list.append(emptyItem(t("tag.empty")));
  p.setNext(first.next);
  return h("section", null,
    heading(t("tag.title", { id })),
    h("section", { class: "card" }, list, p.el));
}

export async function topic(ctx) {
  const name = ctx.params[0];
  const sort = ctx.query.get("sort") === "hot" ? "hot" : "new";
  const load = (cursor, signal) =>
    api(`/topics/${encodeURIComponent(name)}`, { query: { sort, cursor, limit: 20 }, signal });
  const me = session.current();
  const [first, followedTopics] = await Promise.all([
    load(null, ctx.signal),
    // A visitor follows nothing: asked to sign in when they try.
    me ? api("/topics/followed", { signal: ctx.signal }) : [],
  ]);
  let followed = followedTopics.includes(first.key);
  const alert = alertBox();
  const followBtn = actionButton("", "follow-topic", async () => {
    await api("/topics/follow", { method: "POST", body: { name: first.key, follow: !followed } });
    followed = !followed;
    paint();
  }, alert);
  const paint = () => {
    followBtn.textContent = followed ? t("topic.unfollow") : t("topic.follow");
    followBtn.setAttribute("aria-pressed", String(followed));
    followBtn.classList.toggle("primary", !followed);
  };
  paint();
  const list = h("ul", { class: "articles", dataset: { test: "topic-articles" } });
  const p = pager(list, async (cursor) => (await load(cursor)).articles, (a) => articleItem(a));
  for (const a of first.articles.items || []) list.append(articleItem(a));
  if (!(first.articles.items || []).length) list.append(emptyItem(t("tag.empty")));
  p.setNext(first.articles.next);
  const feed = h("a", { class: "feed", href: `/t/${encodeURIComponent(first.key)}/feed.atom`,
    type: "application/atom+xml" }, t("topic.feed"));
  return h("section", null,
    heading(`#${first.name}`),
    h("p", { class: "meta" }, followBtn, " ", feed),
    h("p", { class: "tabs-inline", dataset: { test: "topic-sort" } },
      ["new", "hot"].map((s, i) => [i ? " · " : null,
        h("a", { href: `#/topic/${encodeURIComponent(first.key)}${s === "hot" ? "?sort=hot" : ""}`,
          "aria-current": s === sort ? "page" : null }, t(`topic.sort.${s}`))])),
    alert,
    h("section", { class: "card" }, list, p.el));
}
