// pages/article.js — #/article/:id, the reader view: title, author, content (server-sanitised
// HTML), counts, like and collect toggles, tags, comments with threads, replies, deletion and
// paging, and the reward flow (amount in yuan → QR code + payment link → long poll of the
// reward's status until it is paid or failed).

import { h, decodeHtml, safeArticleHtml } from "../dom.js";
import { api, newKey, isAbort, ApiError } from "../api.js";
import { t } from "../i18n.js";
import * as session from "../session.js";
import { alertBox, onSubmit, actionButton, field, input, textarea, time, userLink,
  errorText, empty, heading, tagLink } from "../ui.js";

const REPLIES_PAGE = 20;

export async function article(ctx) {
  const id = Number(ctx.params[0]);
  const { signal } = ctx;
  const me = session.current();
  const [art, tags, comments] = await Promise.all([
    api(`/articles/pub/${id}`, { signal }),
    api("/tags/biz", { query: { biz: "article", bizId: id }, signal }).catch((e) => ({ error: e })),
    api("/comments", { query: { biz: "article", bizId: id, limit: 20 }, signal }).catch((e) => ({ error: e })),
  ]);
  for (const r of [tags, comments]) if (r?.error && (isAbort(r.error) || r.error.status === 401)) throw r.error;
  const mine = me && art.author && me.uid === art.author.id;

  // Counts.
  const counts = {};
  const count = (key, label) => {
    counts[key] = h("span", { class: "num", dataset: { test: key } }, String(art[key] ?? 0));
    return h("span", { class: "count" }, counts[key], " ", label);
  };
  const bump = (key, d) => { art[key] = Math.max(0, (art[key] ?? 0) + d); counts[key].textContent = String(art[key]); };

  // Like and collect.
  const actionAlert = alertBox();
  const likeBtn = actionButton("", "like", async () => {
    const want = !art.liked;
    await api("/articles/pub/like", { method: "POST", body: { id, like: want } });
    if (want !== art.liked) bump("likeCnt", want ? 1 : -1);
    art.liked = want;
    paintToggles();
  }, actionAlert, { class: "toggle" });
  const collectBtn = actionButton("", "collect", async () => {
    const want = !art.collected;
    await api("/articles/pub/collect", { method: "POST", body: { id, cid: 0, collect: want } });
    if (want !== art.collected) bump("collectCnt", want ? 1 : -1);
    art.collected = want;
    paintToggles();
  }, actionAlert, { class: "toggle" });
  function paintToggles() {
    likeBtn.setAttribute("aria-pressed", String(!!art.liked));
    likeBtn.textContent = art.liked ? t("article.liked") : t("article.like");
    collectBtn.setAttribute("aria-pressed", String(!!art.collected));
    collectBtn.textContent = art.collected ? t("article.collected") : t("article.collect");
  }
  paintToggles();

  // Tags.
  const tagBox = h("p", { class: "tags", dataset: { test: "tags" } });
  if (Array.isArray(tags)) {
    for (const tag of tags) {
      tagBox.append(tagLink(tag));
    }
  }

  const content = h("div", { class: "content", dataset: { test: "content" } });
  content.append(safeArticleHtml(art.content));

  const head = h("header", { class: "article-head" },
    heading(art.title),
    h("p", { class: "meta" },
      userLink(art.author, { dataset: { test: "author" }, rel: "author" }), " · ",
      time(art.utime && art.utime !== art.ctime ? art.utime : art.ctime),
      mine ? [" · ", h("a", { href: `#/write/${id}` }, t("article.edit"))] : null));
  // The title element must carry data-test=title.
  head.querySelector("h1").dataset.test = "title";

  const section = h("article", { class: "reader" },
    head,
    tagBox,
    content,
    h("div", { class: "counts" },
      count("readCnt", t("article.reads")),
      count("likeCnt", t("article.likes")),
      count("collectCnt", t("article.collects")),
      count("commentCnt", t("article.comments"))),
    h("div", { class: "actions" }, likeBtn, collectBtn),
    actionAlert);

  // Content first, then the conversation; rewarding is one click away, not a form in every
  // reader's path.
  const parts = [section, commentsSection(id, art, comments, me, bump)];
  if (!mine) parts.push(rewardSection(id, ctx));
  return h("div", { class: "article-page" }, parts);
}

// ---- reward ---------------------------------------------------------------------------------

/** "12.5" → 1250 fen, or null when it is not an amount with at most two decimals. */
export function yuanToFen(text) {
  const m = /^\s*(\d{1,7})(?:[.,](\d{1,2}))?\s*$/.exec(text);
  if (!m) return null;
  return Number(m[1]) * 100 + Number((m[2] || "").padEnd(2, "0"));
}

function rewardSection(id, ctx) {
  const alert = alertBox();
  const amount = input("amount", { inputmode: "decimal", placeholder: "5.00", autocomplete: "off" });
  const result = h("div", { class: "reward-result", hidden: true });
  let poll = null; // AbortController of the current long poll
  ctx.onLeave(() => poll?.abort());
  const form = h("form", { class: "form reward-form" },
    field(t("reward.amount"), amount, t("reward.amountHint")),
    alert,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", dataset: { action: "reward" } }, t("reward.send"))));
  onSubmit(form, alert, async () => {
    const fen = yuanToFen(amount.value);
    if (fen == null) throw new ApiError(0, 4, t("reward.badAmount")); // the range is the API's to check
    poll?.abort();
    const data = await api("/articles/pub/reward", { method: "POST", body: { id, amt: fen }, idem: newKey(), signal: ctx.signal });
    const status = h("p", { class: "reward-status", dataset: { test: "reward-status" }, role: "status", "aria-live": "polite" },
      t("reward.waiting"));
    result.replaceChildren(
      h("img", { src: `/console/qr.svg?text=${encodeURIComponent(absolute(data.codeURL))}`, alt: t("reward.qrAlt"), width: 200, height: 200,
        class: "qr", dataset: { test: "qr" } }),
      h("div", null,
        h("p", null, t("reward.scan", { amount: `¥${(fen / 100).toFixed(2)}` })),
        h("p", null, h("a", { href: data.codeURL, target: "_blank", rel: "noopener", dataset: { test: "pay-link" } }, t("reward.payLink"))),
        status));
    result.hidden = false;
    poll = new AbortController();
    watch(data.rid, status, poll.signal, ctx.signal);
  });
  return h("details", { class: "card reward" },
    h("summary", { dataset: { action: "open-reward" } }, h("h2", { id: "reward-title" }, t("reward.title"))),
    form, result);
}

/** The QR code must hold a URL a phone can open: the fake provider's codeURL is a bare path. */
function absolute(url) {
  try { return new URL(url, location.href).href; } catch { return url; }
}

/** Long-polls POST /reward/detail until the reward is paid or failed (or the page is left). */
async function watch(rid, status, signal, pageSignal) {
  let delay = 1000;
  while (!signal.aborted && !pageSignal.aborted) {
    try {
      const s = await api("/reward/detail", { method: "POST", body: { rid }, signal });
      delay = 1000;
      if (s === "RewardStatusPayed") { status.textContent = t("reward.paid"); status.classList.add("ok"); return; }
      if (s === "RewardStatusFailed") { status.textContent = t("reward.failed"); status.classList.add("bad"); return; }
      // Still waiting: the server held the request up to its long-poll time; ask again at once.
    } catch (err) {
      if (isAbort(err) || signal.aborted) return;
      if (err.status === 401 || err.code === 404001 || err.code === 403002) { status.textContent = errorText(err); return; }
      status.textContent = `${t("reward.waiting")} (${errorText(err)})`;
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 15000);
    }
  }
}

// ---- comments -------------------------------------------------------------------------------

function commentsSection(id, art, first, me, bump) {
  const list = h("div", { class: "comments", dataset: { test: "comments" } });
  const total = h("span", { class: "num" }, String(art.commentCnt ?? 0));
  const listAlert = alertBox();
  const isAuthor = me && art.author && me.uid === art.author.id;
  const ctx = { id, me, isAuthor, bump, total, art };

  const alert = alertBox();
  const box = textarea("comment", { rows: 3, maxlength: 2000, required: true });
  const form = h("form", { class: "form comment-form" },
    field(t("comment.write"), box),
    alert,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", dataset: { action: "comment" } }, t("comment.post"))));
  onSubmit(form, alert, async () => {
    const text = box.value;
    const cid = await api("/comments", { method: "POST", body: { biz: "article", bizId: id, content: text }, idem: newKey() });
    const node = commentNode({ id: cid, bizId: id, author: { id: me.uid, name: me.name }, content: escapeText(text),
      parentId: null, rootId: null, deleted: false, ctime: Date.now(), replies: [], replyCnt: 0 }, ctx);
    list.prepend(node);
    list.querySelector(":scope > .empty")?.remove();
    box.value = "";
    changed(ctx, 1);
  });

  const more = h("button", { type: "button", class: "more", dataset: { action: "more" }, hidden: true }, t("comment.more"));
  let next = null;
  const setNext = (n) => { next = n ?? null; more.hidden = next == null; };
  more.addEventListener("click", async () => {
    more.disabled = true;
    listAlert.clear();
    try {
      const page = await api("/comments", { query: { biz: "article", bizId: id, cursor: next, limit: 20 } });
      for (const c of page.items || []) list.append(commentNode(c, ctx));
      setNext(page.next);
    } catch (err) { listAlert.show(errorText(err)); } finally { more.disabled = false; }
  });

  if (first?.error) listAlert.show(errorText(first.error));
  else {
    for (const c of first.items || []) list.append(commentNode(c, ctx));
    if (!(first.items || []).length) list.append(empty(t("comment.none")));
    setNext(first.next);
  }
  return h("section", { class: "card comments-section", "aria-labelledby": "comments-title" },
    h("h2", { id: "comments-title" }, t("comment.title"), " (", total, ")"),
    form, list, more, listAlert);
}

function escapeText(s) {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}

function changed(ctx, d) {
  ctx.bump("commentCnt", d);
  ctx.total.textContent = String(ctx.art.commentCnt);
}

/** A comment (top-level with its thread, or a reply). */
function commentNode(c, ctx, root = null) {
  const top = root == null;
  const el = h("div", { class: ["comment", top ? "top" : "reply", c.deleted && "deleted"], dataset: { id: c.id } });
  const alert = alertBox();
  const body = h("div", { class: "comment-body" });
  const actions = h("div", { class: "comment-actions" });
  const paint = () => {
    body.replaceChildren(
      h("p", { class: "meta" },
        c.deleted ? h("span", { class: "muted" }, t("comment.deletedAuthor")) : userLink(c.author),
        !top && c.parentId && root && c.parentId !== root.id && c.replyTo ? [" ", t("comment.replyTo", { name: c.replyTo })] : null,
        " · ", time(c.ctime)),
      c.deleted ? h("p", { class: "text muted" }, t("comment.deleted")) : h("p", { class: "text" }, decodeHtml(c.content)));
    actions.replaceChildren();
    if (c.deleted) return;
    actions.append(replyBtn);
    if (ctx.me && (ctx.isAuthor || c.author?.id === ctx.me.uid)) actions.append(delBtn);
  };

  // Reply form, opened by the reply button, placed right under this comment's text.
  const replyHolder = h("div", { class: "reply-holder" });
  const replyBtn = h("button", { type: "button", class: "link", dataset: { action: "reply" }, "aria-expanded": "false" }, t("comment.reply"));
  replyBtn.addEventListener("click", () => {
    if (replyHolder.firstChild) { replyHolder.replaceChildren(); replyBtn.setAttribute("aria-expanded", "false"); return; }
    replyBtn.setAttribute("aria-expanded", "true");
    const ra = alertBox();
    const box = textarea("comment", { rows: 2, maxlength: 2000, required: true });
    const form = h("form", { class: "form reply-form" },
      field(t("comment.replyTo", { name: c.author?.name ?? "" }), box),
      ra,
      h("div", { class: "actions" },
        h("button", { type: "submit", class: "primary" }, t("comment.post")),
        h("button", { type: "button", class: "link", onclick: () => { replyHolder.replaceChildren(); replyBtn.setAttribute("aria-expanded", "false"); replyBtn.focus(); } }, t("cancel"))));
    onSubmit(form, ra, async () => {
      const text = box.value;
      const rid = await api("/comments", { method: "POST", idem: newKey(),
        body: { biz: "article", bizId: ctx.id, content: text, parentId: c.id } });
      const threadRoot = top ? c : root;
      const reply = { id: rid, bizId: ctx.id, author: { id: ctx.me.uid, name: ctx.me.name }, content: escapeText(text),
        parentId: c.id, rootId: threadRoot.id, deleted: false, ctime: Date.now(), replyTo: c.author?.name };
      const thread = top ? el : el.closest(".comment.top");
      thread.querySelector(":scope > .replies").append(commentNode(reply, ctx, threadRoot));
      threadRoot.replyCnt = (threadRoot.replyCnt ?? 0) + 1;
      replyHolder.replaceChildren();
      replyBtn.setAttribute("aria-expanded", "false");
      changed(ctx, 1);
    });
    replyHolder.append(form);
    box.focus();
  });

  const delBtn = actionButton(t("comment.delete"), "delete-comment", async () => {
    await api(`/comments/${c.id}`, { method: "DELETE" });
    changed(ctx, -1);
    const replies = top ? el.querySelector(":scope > .replies") : null;
    if (top && (c.replyCnt > 0 || replies?.children.length)) {
      c.deleted = true; c.author = null; c.content = "";
      el.classList.add("deleted");
      paint();
    } else {
      const thread = top ? null : el.closest(".comment.top");
      el.remove();
      if (thread) {
        // A tombstone whose last reply went away goes too.
        const tr = thread.querySelector(":scope > .replies");
        if (thread.classList.contains("deleted") && !tr.children.length) thread.remove();
      }
    }
  }, alert, { class: "link danger" });

  paint();
  el.append(body, actions, replyHolder, alert);

  if (top) {
    const replies = h("div", { class: "replies" });
    const byId = new Map([[c.id, c.author?.name]]);
    const addReply = (r) => {
      byId.set(r.id, r.author?.name);
      if (r.parentId && r.parentId !== c.id) r.replyTo = byId.get(r.parentId) ?? "";
      replies.append(commentNode(r, ctx, c));
    };
    for (const r of c.replies || []) addReply(r);
    el.append(replies);
    const shown = (c.replies || []).filter((r) => !r.deleted).length;
    if ((c.replyCnt ?? 0) > shown) {
      let cursor = null;
      let started = false;
      const ra = alertBox();
      const more = h("button", { type: "button", class: "link more", dataset: { action: "more" } },
        t("comment.moreReplies", { n: c.replyCnt }));
      more.addEventListener("click", async () => {
        more.disabled = true;
        ra.clear();
        try {
          const page = await api(`/comments/${c.id}/replies`, { query: { cursor: started ? cursor : null, limit: REPLIES_PAGE } });
          if (!started) { replies.replaceChildren(); started = true; }
          for (const r of page.items || []) addReply(r);
          cursor = page.next ?? null;
          if (cursor == null) more.remove(); else more.textContent = t("comment.more");
        } catch (err) { ra.show(errorText(err)); } finally { more.disabled = false; }
      });
      el.append(more, ra);
    }
  }
  return el;
}
