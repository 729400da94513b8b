// pages/user.js — #/user/:id, an author's page: public profile, follower/followee counts,
// follow/unfollow, their published articles, and the followers/followees lists (tabs, keyset
// paging with "more").

import { h } from "../dom.js";
import { api, newKey } from "../api.js";
import { t } from "../i18n.js";
import * as session from "../session.js";
import { alertBox, actionButton, pager, articleItem, emptyItem } from "../ui.js";

export async function user(ctx) {
  const uid = Number(ctx.params[0]);
  const { signal } = ctx;
  const me = session.current();
  const self = me && me.uid === uid;
  const [profile, stats, check, articles] = await Promise.all([
    api(`/users/${uid}`, { signal }),
    api("/follow/static", { query: { uid }, signal }),
    // A visitor follows nobody: asked to sign in when they try.
    self || !me ? null : api("/follow/check", { query: { followee: uid }, signal }),
    api("/articles/pub", { query: { author: uid, limit: 10 }, signal }),
  ]);

  const followersNum = h("span", { class: "num", dataset: { test: "followers" } }, String(stats.followers ?? 0));
  const followeesNum = h("span", { class: "num", dataset: { test: "followees" } }, String(stats.followees ?? 0));

  const alert = alertBox();
  let followed = !!check?.followed;
  let followBtn = null;
  if (!self) {
    followBtn = actionButton("", "follow", async () => {
      const want = !followed;
      if (want) await api("/follow/follow", { method: "POST", body: { followee: uid }, idem: newKey() });
      else await api("/follow/cancel", { method: "POST", body: { followee: uid } });
      const s = await api("/follow/static", { query: { uid } }).catch(() => null);
      followed = want;
      if (s) followersNum.textContent = String(s.followers ?? 0);
      paint();
    }, alert, { class: "primary" });
  }
  const paint = () => {
    if (!followBtn) return;
    followBtn.textContent = followed ? t("user.unfollow") : t("user.follow");
    followBtn.setAttribute("aria-pressed", String(followed));
    followBtn.classList.toggle("primary", !followed);
  };
  paint();

  // Tabs: articles, followers, followees. The lists load on first opening.
  const panels = {};
  const tabButtons = {};
  const tabBar = h("div", { class: "tabs", role: "tablist", "aria-label": t("user.lists") });
  const show = (key) => {
    for (const [k, p] of Object.entries(panels)) {
      p.hidden = k !== key;
      tabButtons[k].setAttribute("aria-selected", String(k === key));
      tabButtons[k].tabIndex = k === key ? 0 : -1;
    }
    if (!panels[key].loaded) panels[key].load();
  };
  const addTab = (key, label, panel) => {
    panel.id = `panel-${key}`;
    panel.setAttribute("role", "tabpanel");
    const b = h("button", { type: "button", role: "tab", id: `tab-${key}`, "aria-controls": panel.id }, label);
    panel.setAttribute("aria-labelledby", b.id);
    b.addEventListener("click", () => show(key));
    b.addEventListener("keydown", (e) => {
      const keys = Object.keys(panels);
      const i = keys.indexOf(key);
      const j = e.key === "ArrowRight" ? (i + 1) % keys.length : e.key === "ArrowLeft" ? (i + keys.length - 1) % keys.length : -1;
      if (j >= 0) { show(keys[j]); tabButtons[keys[j]].focus(); }
    });
    tabButtons[key] = b;
    panels[key] = panel;
    tabBar.append(b);
  };

  // Articles panel (first page already here).
  const artList = h("ul", { class: "articles", dataset: { test: "articles" } });
  const artPager = pager(artList, (cursor) => api("/articles/pub", { query: { author: uid, cursor, limit: 10 } }),
    (a) => articleItem(a, { showAuthor: false }));
  for (const a of articles.items || []) artList.append(articleItem(a, { showAuthor: false }));
  artPager.setNext(articles.next);
  if (!(articles.items || []).length) artList.append(emptyItem(t("user.noArticles")));
  const artPanel = h("div", null, artList, artPager.el);
  artPanel.loaded = true;
  addTab("articles", t("user.articles"), artPanel);

  for (const kind of ["followers", "followees"]) {
    const list = h("ul", { class: "users", dataset: { test: `${kind}-list` } });
    const load = (cursor) => api(`/follow/${kind}`, { query: { uid, cursor, limit: 20 } });
    const p = pager(list, load, userItem);
    const panel = h("div", { hidden: true }, list, p.el);
    panel.load = async () => {
      panel.loaded = true;
      try {
        const page = await load(null);
        for (const u of page.items || []) list.append(userItem(u));
        if (!(page.items || []).length) list.append(emptyItem(t(`user.no.${kind}`)));
        p.setNext(page.next);
      } catch (err) { p.alert.show(err.message); panel.loaded = false; }
    };
    addTab(kind, t(`user.tab.${kind}`), panel);
  }

  const countBtn = (key, num) => h("button", { type: "button", class: "stat", onclick: () => { show(key); tabButtons[key].focus(); } },
    num, " ", t(`user.${key}`));

  const name = profile.name || profile.nickname || `user${uid}`;
  show("articles");
  return h("section", { class: "profile" },
    h("header", { class: "card profile-head" },
      h("div", null,
        h("h1", { class: "page-title", tabindex: "-1", dataset: { test: "nickname" } }, name),
        profile.aboutMe ? h("p", { class: "about" }, profile.aboutMe) : null,
        h("p", { class: "stats" }, countBtn("followers", followersNum), countBtn("followees", followeesNum)),
        self ? h("p", null, h("a", { href: "#/me" }, t("user.editProfile"))) : null),
      followBtn ? h("div", { class: "actions" }, followBtn) : null,
      alert),
    h("section", { class: "card" }, tabBar, Object.values(panels)));
}

function userItem(u) {
  return h("li", { class: "user-item", dataset: { id: u.id } },
    h("a", { href: `#/user/${u.id}` }, u.nickname || `user${u.id}`),
    u.followed ? h("span", { class: "badge" }, t("user.following")) : null,
    u.aboutMe ? h("p", { class: "abstract" }, u.aboutMe) : null);
}
