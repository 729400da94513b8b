// app.js — boot, hash router, top nav and session handling of the webook web console.
//
// Structure (plain ES modules, no build step; served from /assets/<hash>/ by the Rust binary,
// index.html loads this file; pages are imported on demand so a load fetches only its page):
//   problems.js   classic script run first: window.consoleProblems (CSP violations, errors)
//   app.js        this file: routes, layout/nav, route life cycle, test hooks
//   api.js        fetch wrapper: JSON envelope, tokens, Accept-Language, refresh-and-retry-once
//   session.js    tokens + cached {uid, name, admin} in localStorage, change listeners
//   i18n.js       t(key) with en/zh dictionaries, language choice, date/money/relative formats
//   dom.js        h(tag, attrs, ...children) builder; decodeHtml, highlight, safeArticleHtml
//   ui.js         shared widgets: fields, alerts, forms, pagers, article items, tables
//   pages/home.js      #/                 hot list, latest, feed
//   pages/article.js   #/article/:id      reader view, likes, collects, tags, comments, reward
//   pages/user.js      #/user/:id         profile, follow, articles, followers/followees
//   pages/search.js    #/search?q=        articles and users
//   pages/tag.js       #/tag/:id          a tag's articles; #/topic/:name a topic (every author's)
//   pages/auth.js      #/signup, #/login  (email+password and SMS code)
//   pages/me.js        #/me, #/me/articles, #/me/account
//   pages/editor.js    #/write, #/write/:id
//   pages/ops.js       #/ops/jobs, #/ops/findings (credit/refund/resolve), #/ops/refunds,
//                      #/ops/instances (admins)
//   pages/events.js    #/ops/events       event consumer groups, parked events: replay, discard (admins)
//   pages/move.js      #/ops/move         online database move SQLite → PostgreSQL (admins)
//   pages/moderation.js #/ops/moderation  review queue (dismiss/hide/restore/delete/suspend/lift),
//                      #/ops/moderation/held (approve/reject), /words (word lists), /log (admins)
//   pages/settings.js  #/ops/settings     live settings: change, reset, restart-only ones, audit log (admins)
//   pages/notifications.js #/notifications  the inbox: kinds rendered, mark read, preferences
//   notify.js          the nav's unread badge, live (SSE read with fetch; polling while it is down),
//                      loaded after the first page has rendered
//
// Routing is by location.hash (so no console path meets an API route). The public site's
// server-rendered pages are this same document at clean paths (/a/:id, /u/:id, /t/:name): with no
// hash, such a path is read as its route (#/article/:id, #/user/:id, #/topic/:name), so the
// console takes over the rendered page; links within it are hashes as everywhere else. A page is
// `async (ctx) => Node`: ctx = {params, query, signal, onLeave(fn), redirect(hash)}; it issues its
// first API calls (in parallel), builds its DOM and returns it; the router mounts it. Leaving a
// route aborts `signal` (pending fetches, long polls) and runs the onLeave callbacks (timers).
// Pages that need a login redirect anonymous users to #/login?next=<hash>.
//
// Hooks for the browser tests: before a route renders, data-ready is removed from <html>; when
// its first paint is done, <html data-page="<name>" data-ready="<n>"> is set (n counts up) and
// performance.mark("console-ready") is recorded ("console-route" when routing starts and
// "console-module" when the page's module is loaded split the load into phases). Page names: home, article, user, search, tag, topic,
// signup, login, me, my-articles, editor, account, jobs, findings, refunds, instances, events, move, moderation,
// held, word-lists, moderation-log, settings, notifications, notfound. The unread badge is [data-test=unread] (its
// data-count the count, data-via "stream" or "poll" as it came, data-polls how many polls answered; hidden
// at 0). Form
// fields are named as the API fields, action buttons carry data-action, displayed values
// data-test (see the pages), errors appear in [role=alert] with the API's msg, confirmations
// (stop a job, withdraw an article, refund a payment) are window.confirm() dialogs, and window.consoleProblems
// lists every CSP violation and uncaught error the page met (empty when all is well).

import { h } from "./dom.js";
import { t, lang, setLang } from "./i18n.js";
import { api, isAbort } from "./api.js";
import * as session from "./session.js";
import { errorText, heading, here, routeOfPath } from "./ui.js";

const page = (name, file, exportName, { auth = false } = {}) => ({ name, file, exportName, auth });

const ROUTES = [
  [/^\/?$/, page("home", "home.js", "home")],
  [/^\/article\/(\d+)$/, page("article", "article.js", "article")],
  [/^\/user\/(\d+)$/, page("user", "user.js", "user")],
  [/^\/search$/, page("search", "search.js", "search")],
  [/^\/tag\/(\d+)$/, page("tag", "tag.js", "tag")],
  [/^\/topic\/(.+)$/, page("topic", "tag.js", "topic")],
  [/^\/signup$/, page("signup", "auth.js", "signup")],
  [/^\/login$/, page("login", "auth.js", "login")],
  [/^\/me$/, page("me", "me.js", "me", { auth: true })],
  [/^\/me\/articles$/, page("my-articles", "me.js", "myArticles", { auth: true })],
  [/^\/me\/account$/, page("account", "me.js", "account", { auth: true })],
  [/^\/write(?:\/(\d+))?$/, page("editor", "editor.js", "editor", { auth: true })],
  [/^\/ops\/jobs$/, page("jobs", "ops.js", "jobs", { auth: true })],
  [/^\/ops\/findings$/, page("findings", "ops.js", "findings", { auth: true })],
  [/^\/ops\/refunds$/, page("refunds", "ops.js", "refunds", { auth: true })],
  [/^\/ops\/instances$/, page("instances", "ops.js", "instances", { auth: true })],
  [/^\/ops\/events$/, page("events", "events.js", "events", { auth: true })],
  [/^\/ops\/move$/, page("move", "move.js", "move", { auth: true })],
  [/^\/ops\/moderation$/, page("moderation", "moderation.js", "queue", { auth: true })],
  [/^\/ops\/moderation\/held$/, page("held", "moderation.js", "held", { auth: true })],
  [/^\/ops\/moderation\/words$/, page("word-lists", "moderation.js", "wordLists", { auth: true })],
  [/^\/ops\/moderation\/log$/, page("moderation-log", "moderation.js", "log", { auth: true })],
  [/^\/ops\/settings$/, page("settings", "settings.js", "settings", { auth: true })],
  [/^\/notifications$/, page("notifications", "notifications.js", "notifications", { auth: true })],
];

const root = document.documentElement;
const header = document.getElementById("top");
const main = document.getElementById("main");
let readyCount = 0;
let current = null; // {controller, leave: [], seq}
let seq = 0;
let firstRoute = true;

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || routeOfPath(location.pathname);
  const q = raw.indexOf("?");
  const path = q < 0 ? raw : raw.slice(0, q);
  const query = new URLSearchParams(q < 0 ? "" : raw.slice(q + 1));
  let decoded = path;
  try { decoded = decodeURIComponent(path); } catch { /* keep as is */ }
  return { path: decoded, query };
}

function match(path) {
  for (const [re, def] of ROUTES) {
    const m = re.exec(path);
    if (m) return { def, params: m.slice(1) };
  }
  return null;
}

function markReady(name) {
  root.dataset.page = name;
  root.dataset.ready = String(++readyCount);
  performance.mark("console-ready");
}

/** Navigates (pushes a history entry) to a hash such as "#/article/3". */
export function navigate(hash) {
  if (location.hash === hash) route(); else location.hash = hash;
}

async function route() {
  const my = ++seq;
  if (current) {
    current.controller.abort();
    for (const fn of current.leave) { try { fn(); } catch { /* ignore */ } }
  }
  const controller = new AbortController();
  const leave = [];
  current = { controller, leave, seq: my };
  delete root.dataset.ready;

  performance.mark("console-route");
  const { path, query } = parseHash();
  const found = match(path);
  renderNav(path);
  const loading = setTimeout(() => { if (seq === my) main.setAttribute("aria-busy", "true"); }, 150);

  let name = "notfound";
  let node;
  try {
    if (!found) {
      node = notFound();
    } else {
      name = found.def.name;
      if (found.def.auth && !session.loggedIn()) {
        clearTimeout(loading);
        location.replace(`#/login?next=${encodeURIComponent(here())}`);
        return;
      }
      const mod = await import(`./pages/${found.def.file}`);
      performance.mark("console-module");
      if (seq !== my) return;
      const ctx = {
        params: found.params,
        query,
        signal: controller.signal,
        onLeave: (fn) => leave.push(fn),
        redirect: (hash) => location.replace(hash),
        navigate,
      };
      node = await mod[found.def.exportName](ctx);
    }
  } catch (err) {
    if (isAbort(err) || seq !== my) return;
    if (err?.status === 401 || err?.code === 401001) {
      session.clear();
      location.replace(`#/login?next=${encodeURIComponent(here())}`);
      return;
    }
    node = h("section", null, heading(t("err.title")), h("div", { class: "alert", role: "alert" }, errorText(err)));
  } finally {
    clearTimeout(loading);
  }
  if (seq !== my || !node) return;
  main.removeAttribute("aria-busy");
  main.replaceChildren(node);
  if (!firstRoute) {
    window.scrollTo(0, 0);
    const title = main.querySelector(".page-title");
    (title || main).focus({ preventScroll: true });
  }
  firstRoute = false;
  const h1 = main.querySelector("h1");
  document.title = h1 ? `${h1.textContent} · webook` : "webook";
  markReady(name);
  if (!notifier) setTimeout(followUnread, 0); // after the first paint, never before it
}

function notFound() {
  return h("section", null,
    heading(t("notfound.title")),
    h("p", null, t("notfound.body")),
    h("p", null, h("a", { href: "#/" }, t("nav.home"))));
}

// ---- nav -----------------------------------------------------------------------------------

function navLink(href, label, path, attrs = {}) {
  const here = href === `#${path}` || (href !== "#/" && `#${path}`.startsWith(`${href}/`));
  return h("a", { href, "aria-current": here ? "page" : null, ...attrs }, label);
}

let navKey = "";
// The unread badge: one element, kept across nav rebuilds; notify.js feeds it.
const unreadBadge = h("span", { class: "badge unread", dataset: { test: "unread", count: "0" }, hidden: true }, "0");
let bell = null; // the nav's link to #/notifications
let unreadCount = 0;
let notifier = null; // notify.js, once loaded

function paintUnread() {
  unreadBadge.textContent = unreadCount > 99 ? "99+" : String(unreadCount);
  unreadBadge.dataset.count = String(unreadCount);
  unreadBadge.hidden = unreadCount <= 0;
  bell?.setAttribute("aria-label", t("nav.notificationsUnread", { n: unreadCount }));
}

function onUnread(count, via) {
  unreadCount = Math.max(0, count);
  if (via) unreadBadge.dataset.via = via; // "stream" or "poll": how the count came (tests)
  if (via === "poll") unreadBadge.dataset.polls = String(Number(unreadBadge.dataset.polls || 0) + 1);
  paintUnread();
}

/** Loads notify.js (once) and follows the signed-in user's unread count; stops at logout. */
async function followUnread() {
  if (!notifier) {
    if (!session.loggedIn()) return;
    try { notifier = await import("./notify.js"); } catch { return; }
  }
  const me = session.current();
  if (me) notifier.start(me.uid, onUnread);
  else { notifier.stop(); onUnread(0); }
}

function renderNav(path = parseHash().path) {
  const me = session.current();
  // Rebuild only when something shown changed (keeps focus and element identity stable).
  const key = JSON.stringify([path, lang(), me && [me.name, me.admin]]);
  if (key === navKey) return;
  navKey = key;
  const links = [navLink("#/", t("nav.home"), path), navLink("#/search", t("nav.search"), path)];
  if (me) {
    links.push(navLink("#/write", t("nav.write"), path));
    if (me.admin) {
      links.push(navLink("#/ops/jobs", t("nav.ops"), path, { dataset: { test: "ops-link" } }),
        navLink("#/ops/move", t("nav.move"), path, { dataset: { test: "move-link" } }));
    }
    bell = navLink("#/notifications", [t("nav.notifications"), unreadBadge], path, { dataset: { test: "notifications-link" } });
    paintUnread();
    links.push(bell);
    links.push(navLink("#/me", me.name || t("nav.me"), path, { dataset: { test: "whoami" }, class: "whoami" }));
    const out = h("button", { type: "button", class: "link", dataset: { action: "logout" } }, t("nav.logout"));
    out.addEventListener("click", logout);
    links.push(out);
  } else {
    links.push(navLink("#/login", t("nav.login"), path), navLink("#/signup", t("nav.signup"), path));
  }
  const other = lang() === "zh" ? "en" : "zh";
  const switcher = h("button", { type: "button", class: "link lang", lang: other, dataset: { action: "lang" },
    title: t("nav.language") }, other === "zh" ? "中文" : "English");
  switcher.addEventListener("click", () => { setLang(other); route(); });
  header.replaceChildren(h("div", { class: "bar" },
    h("a", { class: "brand", href: "#/" }, h("span", { class: "logo", "aria-hidden": "true" }), "webook"),
    h("nav", { class: "nav", "aria-label": t("nav.main") }, links, switcher)));
}

async function logout() {
  try { await api("/users/logout", { method: "POST" }); } catch { /* the tokens go anyway */ }
  session.clear();
  navigate("#/");
}

// ---- boot ----------------------------------------------------------------------------------

// The skip link must not change the hash (that would be a route).
document.getElementById("skip")?.addEventListener("click", (e) => { e.preventDefault(); main.focus(); });
session.onChange(() => { renderNav(); if (notifier) followUnread(); });
window.addEventListener("hashchange", route);
root.lang = lang() === "zh" ? "zh-CN" : "en";
route();
