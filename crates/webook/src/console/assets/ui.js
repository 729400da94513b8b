// ui.js — building blocks shared by the pages: labelled fields, error boxes (role=alert),
// form submission with a disabled submit button, "more" pagers, article list items, time and
// money display. Pages compose these; none of them calls the API on its own.

import { h, decodeHtml, uid } from "./dom.js";
import { t, fmtTime, fmtRelative } from "./i18n.js";
import { isAbort } from "./api.js";

/** A labelled form field. `control` is an <input>/<textarea>/<select>; it gets an id. */
export function field(label, control, hint) {
  if (!control.id) control.id = uid(control.name || "f");
  let hintEl = null;
  if (hint) {
    hintEl = h("small", { class: "hint", id: `${control.id}-hint` }, hint);
    control.setAttribute("aria-describedby", hintEl.id);
  }
  return h("div", { class: "field" }, h("label", { for: control.id }, label), control, hintEl);
}

export function input(name, attrs = {}) {
  return h("input", { name, type: "text", autocomplete: "off", ...attrs });
}

export function textarea(name, attrs = {}) {
  return h("textarea", { name, rows: 4, ...attrs });
}

export function select(name, options, attrs = {}) {
  return h("select", { name, ...attrs },
    options.map(([value, label]) => h("option", { value }, label)));
}

/** An error box: hidden until show(msg). role=alert so screen readers announce it. */
export function alertBox() {
  const el = h("div", { class: "alert", role: "alert", hidden: true });
  el.show = (msg) => { el.textContent = msg; el.hidden = false; };
  el.clear = () => { el.textContent = ""; el.hidden = true; };
  return el;
}

/** A polite status line (saved, sent, …). */
export function statusLine() {
  const el = h("p", { class: "status", role: "status", "aria-live": "polite" });
  el.show = (msg) => { el.textContent = msg; };
  el.clear = () => { el.textContent = ""; };
  return el;
}

/** The message to show for an error thrown by api() or by a page. */
export function errorText(err) {
  if (err && typeof err.message === "string" && err.message) return err.message;
  return t("err.unknown");
}

/**
 * Wires a <form>: Enter submits, the submit buttons are disabled while `handler(submitter)`
 * runs, an error goes to `alert` (the API's msg). The handler may return a promise.
 */
export function onSubmit(form, alert, handler) {
  form.noValidate = true;
  let busy = false;
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (busy) return;
    busy = true;
    const submitter = e.submitter || form.querySelector("button[type=submit]");
    const buttons = [...form.querySelectorAll("button[type=submit]")];
    const hadFocus = document.activeElement;
    buttons.forEach((b) => { b.disabled = true; });
    form.setAttribute("aria-busy", "true");
    alert?.clear();
    try {
      await handler(submitter);
    } catch (err) {
      if (!isAbort(err) && !signInFirst(err)) alert?.show(errorText(err));
    } finally {
      busy = false;
      buttons.forEach((b) => { b.disabled = false; });
      form.removeAttribute("aria-busy");
      if (hadFocus && hadFocus.isConnected && document.activeElement === document.body) hadFocus.focus();
    }
  });
  return form;
}

/**
 * When `err` says the caller must sign in (a visitor liking, commenting, following or
 * rewarding; a session that ended), goes to the login page, which comes back here after: true.
 */
function signInFirst(err) {
  if (err?.status !== 401 && err?.code !== 401001) return false;
  location.assign(`#/login?next=${encodeURIComponent(here())}`);
  return true;
}

/** A button that runs `fn` with itself disabled meanwhile; errors go to `alert`. */
export function actionButton(label, action, fn, alert, attrs = {}) {
  const btn = h("button", { type: "button", dataset: { action }, ...attrs }, label);
  btn.addEventListener("click", async () => {
    if (btn.disabled) return;
    btn.disabled = true;
    alert?.clear();
    try { await fn(btn); } catch (err) { if (!isAbort(err) && !signInFirst(err)) alert?.show(errorText(err)); } finally {
      btn.disabled = false;
    }
  });
  return btn;
}

/**
 * A keyset pager: `load(cursor)` → {items, next}; `renderItem(item)` → node, appended to `list`.
 * Returns {button, alert, setNext(next)}; the button (data-action=more) hides on the last page.
 */
export function pager(list, load, renderItem, { label = t("more") } = {}) {
  const alert = alertBox();
  let next = null;
  const button = h("button", { type: "button", class: "more", dataset: { action: "more" }, hidden: true }, label);
  button.addEventListener("click", async () => {
    if (button.disabled || next == null) return;
    button.disabled = true;
    alert.clear();
    try {
      const page = await load(next);
      if ((page.items || []).length) list.querySelector(":scope > .empty")?.remove();
      for (const item of page.items || []) list.appendChild(renderItem(item));
      setNext(page.next);
    } catch (err) {
      if (!isAbort(err)) alert.show(errorText(err));
    } finally { button.disabled = false; }
  });
  function setNext(n) { next = n ?? null; button.hidden = next == null; }
  return { button, alert, setNext, el: h("div", { class: "pager" }, button, alert) };
}

/** A <time> with the local date and time; `seconds` adds seconds. */
export function time(ms, { seconds = false, relative = false } = {}) {
  if (ms == null) return h("span", { class: "muted" }, "—");
  const d = new Date(ms);
  const text = fmtTime(ms, { seconds }) + (relative ? ` (${fmtRelative(ms)})` : "");
  return h("time", { datetime: d.toISOString(), title: d.toString() }, text);
}

export function userLink(user, attrs = {}) {
  if (!user) return h("span", { class: "muted" }, t("comment.deletedAuthor"));
  return h("a", { href: `#/user/${user.id}`, ...attrs }, user.name || user.nickname || `user${user.id}`);
}

/** One article in a list: title link, abstract (escaped by the API → text), author, counts. */
export function articleItem(a, { showAuthor = true } = {}) {
  return h("li", { class: "article-item", dataset: { id: a.id } },
    h("a", { class: "article-title", href: `#/article/${a.id}` }, a.title || t("untitled")),
    a.abstract ? h("p", { class: "abstract" }, decodeHtml(a.abstract)) : null,
    h("p", { class: "meta" },
      showAuthor && a.author ? [userLink(a.author), " · "] : null,
      time(a.ctime),
      a.likeCnt != null ? ` · ${t("count.likes", { n: a.likeCnt })}` : null,
      a.commentCnt != null ? ` · ${t("count.comments", { n: a.commentCnt })}` : null));
}

export function empty(text) { return h("p", { class: "empty muted" }, text); }

/** The "nothing here" line of a list, as an item of the list itself: the list stays visible
 * (an empty <ul> has no size) and the pager removes it when items arrive. */
export function emptyItem(text) { return h("li", { class: "empty muted" }, text); }

/** A table inside a horizontally scrolling wrapper. Every cell gets its column's name as
 * data-label (also for rows added later), so that on phones the CSS can show each row as a
 * small card of "label: value" lines instead. */
export function table(headers, body, attrs = {}) {
  const labels = headers.map((x) => (typeof x === "string" ? x : ""));
  const label = () => {
    for (const tr of body.rows) {
      [...tr.cells].forEach((td, i) => {
        if (td.colSpan === 1 && labels[i] && !td.dataset.label) td.dataset.label = labels[i];
      });
    }
  };
  label();
  new MutationObserver(label).observe(body, { childList: true });
  return h("div", { class: "table-wrap" },
    h("table", attrs,
      h("thead", null, h("tr", null, headers.map((x) => h("th", { scope: "col" }, x)))),
      body));
}

/** Sub-navigation tabs: [[hash, label], …]; the current one gets aria-current=page. */
export function tabs(items, current) {
  return h("nav", { class: "tabs", "aria-label": t("nav.section") },
    items.map(([href, label]) => h("a", { href, "aria-current": href === current ? "page" : null }, label)));
}

/** A page heading: focused after navigation so keyboard and screen-reader users land on it. */
export function heading(text, level = 1) {
  return h(`h${level}`, { tabindex: "-1", class: "page-title" }, text);
}

/** A link to a tag's topic (#/topic/:name): the articles of every author who uses that tag. */
export function tagLink(tag) {
  return h("a", { class: "tag", href: `#/topic/${encodeURIComponent(tag.name)}` }, `#${tag.name}`);
}


/** The route of a public page's clean path (/a/7 → /article/7, /t/rust → /topic/rust), or "/"
 * for any other path. */
export function routeOfPath(pathname) {
  const m = /^\/(a|u|t)\/([^/]+)$/.exec(pathname);
  if (!m) return "/";
  return `/${{ a: "article", u: "user", t: "topic" }[m[1]]}/${m[2]}`;
}

/** The current route as a hash (what a sign-in returns to), on a clean path too. */
export function here() {
  return location.hash || `#${routeOfPath(location.pathname)}`;
}
