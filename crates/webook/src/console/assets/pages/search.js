// pages/search.js — #/search?q= : articles (highlighted title and snippet) and users, each list
// with its own "more" (its cursor); a 503 while the index is rebuilt is a friendly message.
// While typing, the box suggests articles and people (an ARIA combobox, see suggest()).

import { h, decodeHtml, highlight, uid } from "../dom.js";
import { api, isAbort } from "../api.js";
import { t } from "../i18n.js";
import { input, pager, emptyItem, time, userLink, errorText, heading } from "../ui.js";

const LIMIT = 10;
/** Suggestions: the wait after the last keystroke (suggestions count against the same
 * per-address search limit as searches: about one request per pause in typing, not per key),
 * how many answers are kept for going back (Backspace), and how many of each kind are shown. */
const SUGGEST_DELAY_MS = 250;
const SUGGEST_CACHE = 20;
const SUGGEST_ARTICLES = 5;
const SUGGEST_USERS = 3;

export async function search(ctx) {
  const q = (ctx.query.get("q") || "").trim();
  const box = input("q", { type: "search", value: q, placeholder: t("search.placeholder"), autocomplete: "off" });
  box.id = "search-q";
  const suggestions = suggest(box, ctx);
  const form = h("form", { class: "search-form", role: "search" },
    h("label", { for: box.id, class: "sr-only" }, t("search.label")),
    h("div", { class: "search-box" }, box, suggestions.list),
    h("button", { type: "submit", class: "primary" }, t("search.go")));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    suggestions.stop();
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
  const item = (a) => hitItem(a, q);
  const artPager = pager(artList, async (cursor) => (await api("/search", { query: { q, type: "article", cursor, limit: LIMIT } })).articles, item);
  for (const a of data.articles?.items || []) artList.append(item(a));
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

/**
 * Suggestions under `box` as the user types: an ARIA combobox (the box) controlling a listbox
 * of links. Each `input` waits SUGGEST_DELAY_MS for the next one, then asks GET /search with the
 * value as typed — a last word without a trailing space is still being typed and matches as a
 * prefix (and as pinyin) — and aborts the request before it, so an older answer never replaces
 * a newer one. ArrowDown/ArrowUp move the active option, Enter opens it (with none active the
 * form submits as before), Escape and leaving the box close the list, a click opens an option.
 * An error (503 while the index is rebuilt, 429 beyond the rate limit) just hides the list.
 * Returns {list, stop()}; stop() cancels what is pending and closes the list.
 */
function suggest(box, ctx) {
  const list = h("div", { id: uid("search-suggest"), class: "suggestions", role: "listbox",
    "aria-label": t("search.suggestions"), hidden: true, dataset: { test: "search-suggestions" } });
  box.setAttribute("role", "combobox");
  box.setAttribute("aria-autocomplete", "list");
  box.setAttribute("aria-controls", list.id);
  box.setAttribute("aria-expanded", "false");

  let options = [];
  let active = -1;
  let timer = null;
  let pending = null; // the AbortController of the request in flight
  const answers = new Map(); // q → its answer, the last SUGGEST_CACHE of them

  function setActive(i) {
    options[active]?.setAttribute("aria-selected", "false");
    active = i;
    const option = options[active];
    if (option) {
      option.setAttribute("aria-selected", "true");
      box.setAttribute("aria-activedescendant", option.id);
      option.scrollIntoView({ block: "nearest" });
    } else {
      box.removeAttribute("aria-activedescendant");
    }
  }

  function setOpen(open) {
    if (!open) setActive(-1);
    list.hidden = !open;
    box.setAttribute("aria-expanded", String(open));
  }

  function cancel() {
    clearTimeout(timer);
    timer = null;
    pending?.abort();
    pending = null;
  }

  function stop() {
    cancel();
    setOpen(false);
  }

  function show(q, data) {
    const articles = (data?.articles?.items || []).slice(0, SUGGEST_ARTICLES);
    const users = (data?.users?.items || []).slice(0, SUGGEST_USERS);
    // An option chosen with the arrows since the last keystroke stays chosen if it is still there.
    const was = options[active];
    setActive(-1);
    options = [...articles.map(articleOption), ...users.map(userOption)];
    list.replaceChildren(...options);
    list.dataset.q = q;
    setOpen(options.length > 0 && document.activeElement === box);
    if (was && !list.hidden) {
      setActive(options.findIndex((o) => o.dataset.kind === was.dataset.kind && o.dataset.id === was.dataset.id));
    }
  }

  async function load(q) {
    timer = null;
    pending?.abort();
    if (answers.has(q)) {
      pending = null;
      show(q, answers.get(q));
      return;
    }
    const controller = new AbortController();
    pending = controller;
    let data;
    try {
      data = await api("/search", { query: { q, type: "all", limit: SUGGEST_ARTICLES }, signal: controller.signal });
    } catch (err) {
      if (pending !== controller || isAbort(err)) return;
      pending = null;
      show(q, null); // nothing to suggest now: no alert, the box works as before
      return;
    }
    if (pending !== controller) return; // a newer request replaced this one
    pending = null;
    answers.set(q, data);
    if (answers.size > SUGGEST_CACHE) answers.delete(answers.keys().next().value);
    show(q, data);
  }

  function typed() {
    cancel();
    setActive(-1);
    const q = box.value; // as typed: a trailing space says the last word is complete
    if (!q.trim()) {
      show("", null);
      return;
    }
    timer = setTimeout(() => load(q), SUGGEST_DELAY_MS);
  }

  // An input method's composition (pinyin being turned into characters) is asked about once done.
  box.addEventListener("input", (e) => { if (!e.isComposing) typed(); });
  box.addEventListener("compositionend", typed);
  box.addEventListener("keydown", (e) => {
    // 229: a key that an input method handles (Safari's Enter committing a composition).
    if (e.isComposing || e.keyCode === 229 || e.altKey || e.ctrlKey || e.metaKey) return;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      if (!options.length) return;
      e.preventDefault();
      if (list.hidden) setOpen(true);
      const n = options.length;
      if (e.key === "ArrowDown") setActive(active < n - 1 ? active + 1 : 0);
      else setActive(active > 0 ? active - 1 : n - 1);
    } else if (e.key === "Enter") {
      const option = list.hidden ? null : options[active];
      if (!option) return; // the form submits
      e.preventDefault();
      stop();
      ctx.navigate(option.getAttribute("href"));
    } else if (e.key === "Escape" && !list.hidden) {
      e.preventDefault(); // (a search box would also clear itself)
      setOpen(false);
    }
  });
  box.addEventListener("focus", () => {
    if (options.length && list.dataset.q === box.value) setOpen(true);
  });
  box.addEventListener("blur", () => setOpen(false));
  // Pressing on an option keeps the focus in the box (no blur hides the list under the
  // pointer); the click then follows the option's link.
  list.addEventListener("mousedown", (e) => e.preventDefault());
  list.addEventListener("click", (e) => { if (e.target.closest("[role=option]")) stop(); });
  ctx.onLeave(cancel);
  return { list, stop };
}

function suggestion(kind, id, href, label, text) {
  return h("a", { id: uid("suggestion"), class: "suggestion", role: "option", href, tabindex: "-1",
    "aria-selected": "false", dataset: { test: "suggestion", kind, id } },
    h("span", { class: "suggest-kind" }, label),
    h("span", { class: "suggest-text" }, text));
}

function articleOption(a) {
  const title = a.highlight?.title ? highlight(a.highlight.title) : a.title || t("untitled");
  return suggestion("article", a.id, `#/article/${a.id}`, t("search.kindArticle"), title);
}

function userOption(u) {
  return suggestion("user", u.id, `#/user/${u.id}`, t("search.kindUser"), u.nickname || `user${u.id}`);
}

/** Whether tag `name` is what query `q` asked for: a word of the query within the name or the
 * name within the query, compared as the server folds them (NFKC, lower case). A hit found by its
 * tag alone then shows why. */
function tagMatches(name, q) {
  const fold = (text) => String(text).normalize("NFKC").toLowerCase();
  const tag = fold(name);
  const query = fold(q);
  return query.includes(tag) || query.split(/\s+/).some((word) => word && tag.includes(word));
}

function tagOf(n, q) {
  const name = typeof n === "string" ? n : n.name;
  const label = tagMatches(name, q) ? h("em", null, `#${name}`) : `#${name}`;
  return h("a", { class: "tag", href: `#/topic/${encodeURIComponent(name)}` }, label);
}

function hitItem(a, q) {
  const title = a.highlight?.title ? highlight(a.highlight.title) : a.title || t("untitled");
  const snippet = a.highlight?.content ? highlight(a.highlight.content) : decodeHtml(a.abstract || "");
  return h("li", { class: "article-item", dataset: { id: a.id } },
    h("a", { class: "article-title", href: `#/article/${a.id}` }, title),
    h("p", { class: "abstract" }, snippet),
    h("p", { class: "meta" },
      a.author ? [userLink(a.author), " · "] : null,
      time(a.ctime),
      ` · ${t("count.likes", { n: a.likeCnt ?? 0 })}`,
      (a.tags || []).length ? [" · ", (a.tags || []).map((n) => tagOf(n, q))] : null));
}

function userHit(u) {
  return h("li", { class: "user-item", dataset: { id: u.id } },
    h("a", { href: `#/user/${u.id}` }, u.nickname || `user${u.id}`),
    u.aboutMe ? h("p", { class: "abstract" }, u.aboutMe) : null);
}
