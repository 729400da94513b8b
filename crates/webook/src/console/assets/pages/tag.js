// pages/tag.js — #/tag/:id : the published articles carrying a tag, newest first, with "more".
// The API knows only the tag's id: its name is the one remembered when a tag link was shown.

import { h } from "../dom.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import { pager, articleItem, emptyItem, heading, tagName } from "../ui.js";

export async function tag(ctx) {
  const id = Number(ctx.params[0]);
  const name = tagName(id);
  const load = (cursor, signal) => api(`/tags/${id}/articles`, { query: { cursor, limit: 20 }, signal });
  const first = await load(null, ctx.signal);
  const list = h("ul", { class: "articles", dataset: { test: "tag-articles" } });
  const p = pager(list, (cursor) => load(cursor), (a) => articleItem(a));
  for (const a of first.items || []) list.append(articleItem(a));
  if (!(first.items || []).length) list.append(emptyItem(t("tag.empty")));
  p.setNext(first.next);
  return h("section", null,
    heading(name ? `#${name}` : t("tag.title", { id })),
    h("section", { class: "card" }, list, p.el));
}
