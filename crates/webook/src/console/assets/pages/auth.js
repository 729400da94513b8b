// pages/auth.js — #/signup (email, password, confirmPassword; then logs in) and #/login
// (email + password, or an SMS code: phone → send code → code). After a login the cached
// identity (name, uid, admin) is read once: GET /users/profile and the admin probe GET /jobs.

import { h } from "../dom.js";
import { api } from "../api.js";
import { t } from "../i18n.js";
import * as session from "../session.js";
import { field, input, alertBox, statusLine, onSubmit, heading } from "../ui.js";

/** The name the nav shows for a profile (`GET /users/profile`, a bare object). */
export function displayName(p) {
  if (!p) return "";
  return p.Nickname || p.Email || p.Phone || (p.Id ? `user${p.Id}` : "");
}

/** Admin probe: GET /jobs answers 200 for admins, 403 for everyone else. */
export async function probeAdmin(signal) {
  try { await api("/jobs", { signal }); return true; } catch { return false; }
}

/** Reads who we are after a login and caches it for the nav. */
export async function refreshIdentity(signal) {
  const [profile, admin] = await Promise.all([
    api("/users/profile", { bare: true, signal }).catch(() => null),
    probeAdmin(signal),
  ]);
  const patch = { admin };
  if (profile) { patch.uid = profile.Id; patch.name = displayName(profile); }
  session.update(patch);
}

function nextHash(query) {
  const next = query.get("next") || "";
  return /^#\/(?!\/)/.test(next) && !next.startsWith("#/login") && !next.startsWith("#/signup") ? next : "#/";
}

async function loginWith(path, body) {
  await api(path, { method: "POST", body, auth: false });
  await refreshIdentity();
}

export async function signup(ctx) {
  const alert = alertBox();
  const email = input("email", { type: "email", autocomplete: "email", required: true, inputmode: "email" });
  const password = input("password", { type: "password", autocomplete: "new-password", required: true });
  const confirm = input("confirmPassword", { type: "password", autocomplete: "new-password", required: true });
  const form = h("form", { class: "card form" },
    field(t("auth.email"), email),
    field(t("auth.password"), password, t("auth.passwordHint")),
    field(t("auth.confirmPassword"), confirm),
    alert,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, t("auth.signup"))));
  onSubmit(form, alert, async () => {
    const body = { email: email.value.trim(), password: password.value, confirmPassword: confirm.value };
    await api("/users/signup", { method: "POST", body, auth: false });
    await loginWith("/users/login", { email: body.email, password: body.password });
    ctx.navigate(nextHash(ctx.query));
  });
  return h("section", { class: "narrow" },
    heading(t("auth.signupTitle")),
    form,
    h("p", null, t("auth.haveAccount"), " ", h("a", { href: "#/login" }, t("auth.login"))));
}

export async function login(ctx) {
  const next = nextHash(ctx.query);

  const alert = alertBox();
  const email = input("email", { type: "email", autocomplete: "username", required: true, inputmode: "email" });
  const password = input("password", { type: "password", autocomplete: "current-password", required: true });
  const form = h("form", { class: "card form", "aria-labelledby": "login-email-title" },
    h("h2", { id: "login-email-title" }, t("auth.withEmail")),
    field(t("auth.email"), email),
    field(t("auth.password"), password),
    alert,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, t("auth.login"))));
  onSubmit(form, alert, async () => {
    await loginWith("/users/login", { email: email.value.trim(), password: password.value });
    ctx.navigate(next);
  });

  // SMS: one form; "send code" is its own button, Enter sends the code while the code is empty.
  const smsAlert = alertBox();
  const smsStatus = statusLine();
  const phone = input("phone", { type: "tel", autocomplete: "tel", inputmode: "tel", required: true });
  const code = input("code", { inputmode: "numeric", autocomplete: "one-time-code", maxlength: 6, required: true });
  const send = h("button", { type: "button", dataset: { action: "send-code" } }, t("auth.sendCode"));
  let countdown = null;
  ctx.onLeave(() => clearInterval(countdown));
  const sendCode = async () => {
    smsAlert.clear();
    smsStatus.clear();
    send.disabled = true;
    let cooling = false;
    try {
      const res = await api("/users/login_sms/code/send", { method: "POST", body: { phone: phone.value.trim() }, auth: false, raw: true });
      const body = res.body || {};
      if (body.code === 0) {
        smsStatus.show(body.msg || t("auth.codeSent"));
        cooling = true;
        let left = 60;
        send.textContent = t("auth.resendIn", { n: left });
        countdown = setInterval(() => {
          left -= 1;
          if (left <= 0) { clearInterval(countdown); send.disabled = false; send.textContent = t("auth.sendCode"); } else {
            send.textContent = t("auth.resendIn", { n: left });
          }
        }, 1000);
        code.focus();
      } else {
        smsAlert.show(body.msg || t("err.http", { status: res.status }));
      }
    } catch (err) {
      smsAlert.show(err.message);
    } finally {
      if (!cooling) send.disabled = false;
    }
  };
  send.addEventListener("click", sendCode);
  const smsForm = h("form", { class: "card form", "aria-labelledby": "login-sms-title" },
    h("h2", { id: "login-sms-title" }, t("auth.withSms")),
    field(t("auth.phone"), phone, t("auth.phoneHint")),
    h("div", { class: "actions" }, send),
    smsStatus,
    field(t("auth.code"), code),
    smsAlert,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, t("auth.loginWithCode"))));
  onSubmit(smsForm, smsAlert, async () => {
    if (!code.value.trim()) { if (!send.disabled) await sendCode(); return; }
    await loginWith("/users/login_sms", { phone: phone.value.trim(), code: code.value.trim() });
    ctx.navigate(next);
  });

  return h("section", { class: "narrow" },
    heading(t("auth.loginTitle")),
    form,
    smsForm,
    h("p", null, t("auth.noAccount"), " ", h("a", { href: "#/signup" }, t("auth.signup"))));
}
