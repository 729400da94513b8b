// pages/editor.js — #/write (new) and #/write/:id (the author's draft): title, plain-text
// content (blank-line paragraphs ↔ <p>, escaped), comma-separated tags (created with POST /tags,
// attached after a save or publish), Save draft, Publish (then the reader view) and Withdraw.

import { h } from "../dom.js";
import { api, newKey, ApiError } from "../api.js";
import { t } from "../i18n.js";
import { field, input, textarea, alertBox, statusLine, onSubmit, actionButton, heading, errorText } from "../ui.js";

const escape = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

/** Plain text → HTML: blank-line-separated paragraphs become <p>, single line breaks <br>. */
export function textToHtml(text) {
  return text.replace(/\r\n?/g, "\n").split(/\n[ \t]*\n\s*/)
    .map((p) => p.replace(/^\n+|\s+$/g, ""))
    .filter((p) => p.trim())
    .map((p) => `<p>${escape(p).replace(/\n/g, "<br>")}</p>`)
    .join("\n");
}

const BLOCK = /^(P|DIV|H[1-6]|LI|BLOCKQUOTE|PRE|UL|OL|TABLE|THEAD|TBODY|TR|TD|TH|SECTION|ARTICLE|HEADER|FOOTER|FIGURE|FIGCAPTION|HR|DL|DT|DD|ASIDE)$/;

/** Stored HTML → plain text paragraphs; `rich` tells whether formatting was dropped. */
export function htmlToText(html) {
  const tpl = document.createElement("template");
  tpl.innerHTML = html || "";
  const paras = [];
  let cur = "";
  let rich = false;
  const flush = () => {
    const p = cur.split("\n").map((l) => l.replace(/^[ \t]+|[ \t]+$/g, "")).join("\n").replace(/^\n+|\n+$/g, "");
    if (p.trim()) paras.push(p);
    cur = "";
  };
  const walk = (node, pre) => {
    for (const n of node.childNodes) {
      if (n.nodeType === Node.TEXT_NODE) cur += pre ? n.data : n.data.replace(/\s+/g, " ");
      else if (n.nodeType === Node.ELEMENT_NODE) {
        const tag = n.tagName;
        if (tag === "BR") cur += "\n";
        else if (BLOCK.test(tag)) {
          if (tag !== "P") rich = true;
          flush(); walk(n, pre || tag === "PRE"); flush();
        } else {
          rich = true;
          if (tag === "IMG") cur += n.getAttribute("alt") ? `[${n.getAttribute("alt")}]` : "";
          else walk(n, pre);
        }
      }
    }
  };
  walk(tpl.content, false);
  flush();
  return { text: paras.join("\n\n"), rich };
}

/** "rust, Web ,rust" → ["rust", "Web"] (trimmed, duplicates by lower case dropped). */
export function parseTags(s) {
  const seen = new Set();
  const out = [];
  for (const raw of (s || "").split(/[,，、]/)) {
    const name = raw.trim();
    const key = name.toLowerCase();
    if (name && !seen.has(key)) { seen.add(key); out.push(name); }
  }
  return out;
}

const STATUS = { 1: "status.draft", 2: "status.published", 3: "status.withdrawn" };

export async function editor(ctx) {
  let id = ctx.params[0] ? Number(ctx.params[0]) : null;
  let status = 0;
  let loaded = { title: "", content: "", tags: [] };
  let rich = false;
  if (id) {
    const [art, tags] = await Promise.all([
      api(`/articles/detail/${id}`, { signal: ctx.signal }),
      api("/tags/biz", { query: { biz: "article", bizId: id }, signal: ctx.signal }).catch(() => []),
    ]);
    const conv = htmlToText(art.content);
    rich = conv.rich;
    status = art.status;
    loaded = { title: art.title || "", content: conv.text, tags: (tags || []).map((x) => x.name) };
  }
  let lastTags = loaded.tags.map((n) => n.toLowerCase()).join("\n");

  const alert = alertBox();
  const note = statusLine();
  const title = input("title", { value: loaded.title, maxlength: 256, class: "title-input", autocomplete: "off" });
  const content = textarea("content", { rows: 18, value: loaded.content, class: "content-input" });
  const tagsIn = input("tags", { value: loaded.tags.join(", "), autocomplete: "off" });
  const badge = h("span", { class: "badge", dataset: { test: "status" } });
  const paintStatus = () => {
    badge.textContent = status ? t(STATUS[status] || "status.unknown") : t("status.new");
    badge.className = `badge s${status}`;
    withdraw.hidden = !id || status === 3;
  };

  const withdraw = actionButton(t("editor.withdraw"), "withdraw", async () => {
    if (!confirm(t("editor.confirmWithdraw"))) return;
    await api("/articles/withdraw", { method: "POST", body: { id } });
    status = 3;
    paintStatus();
    note.show(t("editor.withdrawn"));
  }, alert, { class: "danger" });

  const form = h("form", { class: "card form editor" },
    field(t("editor.title"), title),
    field(t("editor.content"), content, t("editor.contentHint")),
    rich ? h("p", { class: "alert info" }, t("editor.richWarning")) : null,
    field(t("editor.tags"), tagsIn, t("editor.tagsHint")),
    alert, note,
    h("div", { class: "actions" },
      h("button", { type: "submit", dataset: { action: "save" } }, t("editor.save")),
      h("button", { type: "submit", class: "primary", dataset: { action: "publish" } }, t("editor.publish")),
      withdraw));
  paintStatus();

  onSubmit(form, alert, async (submitter) => {
    const publish = submitter?.dataset.action === "publish";
    note.clear();
    const body = { title: title.value.trim(), content: textToHtml(content.value) };
    if (id) body.id = id;
    id = await api(publish ? "/articles/publish" : "/articles/edit", { method: "POST", body, idem: newKey() });
    status = publish ? 2 : 1;
    paintStatus();
    if (location.hash !== `#/write/${id}`) history.replaceState(null, "", `#/write/${id}`);
    try {
      await saveTags(id);
    } catch (err) {
      throw new ApiError(err.status, err.code, t("editor.tagsFailed", { msg: errorText(err) }));
    }
    if (publish) { ctx.navigate(`#/article/${id}`); return; }
    note.show(t("editor.saved", { time: new Date().toLocaleTimeString() }));
  });

  async function saveTags(articleId) {
    const names = parseTags(tagsIn.value);
    const key = names.map((n) => n.toLowerCase()).join("\n");
    if (key === lastTags) return;
    const tids = await Promise.all(names.map((name) => api("/tags", { method: "POST", body: { name }, idem: newKey() })));
    await api("/tags/attach", { method: "POST", body: { biz: "article", bizId: articleId, tids } });
    lastTags = key;
  }

  return h("section", { class: "editor-page" },
    h("div", { class: "title-row" }, heading(id ? t("editor.editTitle") : t("editor.newTitle")), badge,
      id && status === 2 ? h("a", { href: `#/article/${id}` }, t("view")) : null),
    form);
}
