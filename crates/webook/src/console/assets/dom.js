// dom.js — a tiny element builder and the only places where markup from the API is turned into
// nodes. Everything the API says goes in as text (textContent) except: the article's `content`
// (sanitised by the server, filtered once more here by safeArticleHtml) and search `highlight`
// strings (escaped text with <em> marks, rebuilt here as text + <em> elements, never as HTML).
// Escaped API text (abstracts, comments) is decoded with decodeHtml and then set as text.

// Attributes set as DOM properties rather than with setAttribute.
const PROPS = new Set(["value", "checked", "selected", "indeterminate"]);

/** h("a", {href: "#/", class: "x", dataset: {test: "t"}, onclick: fn}, "text", child, [more]) */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  const late = [];
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "style" || k === "innerHTML" || /^on/.test(k) && typeof v === "string") {
        throw new Error(`h(): refusing attribute ${k}`); // CSP: no inline styles or handlers
      }
      if (k.startsWith("aria-") && v != null) { el.setAttribute(k, String(v)); continue; }
      if (v == null || v === false) continue;
      if (k === "class") el.className = Array.isArray(v) ? v.filter(Boolean).join(" ") : v;
      else if (k === "dataset") {
        for (const [dk, dv] of Object.entries(v)) if (dv != null) el.dataset[dk] = String(dv);
      } else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else if (k === "text") el.textContent = v;
      else if (PROPS.has(k)) late.push([k, v]);
      else if (v === true) el.setAttribute(k, "");
      else el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  for (const [k, v] of late) el[k] = v; // after children: a <select>'s value needs its options
  return el;
}

/** Appends strings (as text), nodes and (nested) arrays; skips null, undefined and false. */
export function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
  return el;
}

const decoder = document.createElement("textarea");

/** Turns HTML-escaped text (`&lt;b&gt;`) back into the text as written. A textarea parses its
 * content as RCDATA: no element is ever created, whatever the string holds. */
export function decodeHtml(s) {
  if (s == null) return "";
  if (!String(s).includes("&")) return String(s);
  decoder.innerHTML = String(s);
  const text = decoder.value;
  decoder.textContent = "";
  return text;
}

/** A search highlight (escaped text with <em>…</em>) as nodes: text plus real <em> elements. */
export function highlight(s) {
  const frag = document.createDocumentFragment();
  let inEm = false;
  for (const part of String(s ?? "").split(/(<em>|<\/em>)/)) {
    if (part === "<em>") { inEm = true; continue; }
    if (part === "</em>") { inEm = false; continue; }
    if (!part) continue;
    const text = decodeHtml(part.replace(/<[^>]*>/g, ""));
    frag.appendChild(inEm ? h("em", null, text) : document.createTextNode(text));
  }
  return frag;
}

const DROP = new Set(["SCRIPT", "STYLE", "LINK", "META", "IFRAME", "OBJECT", "EMBED", "FORM",
  "BASE", "FRAME", "FRAMESET", "NOSCRIPT", "TEMPLATE", "SVG", "MATH"]);

function sameOriginOrData(url) {
  if (/^data:image\//i.test(url)) return true;
  try { return new URL(url, location.href).origin === location.origin; } catch { return false; }
}

/** The article's HTML (already sanitised by the server) as a fragment, parsed inertly in a
 * <template> and filtered once more so that the page's Content-Security-Policy never has to
 * refuse anything: no style attributes, no handlers, no scripts, no images from elsewhere
 * (they become links), external links open in a new tab without an opener. */
export function safeArticleHtml(html) {
  const tpl = document.createElement("template");
  tpl.innerHTML = String(html ?? "");
  const walk = (node) => {
    for (const child of [...node.children]) {
      if (DROP.has(child.tagName.toUpperCase())) { child.remove(); continue; }
      for (const attr of [...child.attributes]) {
        const name = attr.name.toLowerCase();
        if (name === "style" || name.startsWith("on") || name === "srcset" || name === "id" ||
            name === "class" || name === "formaction" || name === "background") {
          child.removeAttribute(attr.name);
        } else if ((name === "href" || name === "src" || name === "xlink:href") &&
                   /^\s*(javascript|vbscript|data:(?!image\/))/i.test(attr.value)) {
          child.removeAttribute(attr.name);
        }
      }
      if (child.tagName === "IMG") {
        const src = child.getAttribute("src") || "";
        if (!sameOriginOrData(src)) {
          const link = h("a", { href: src, target: "_blank", rel: "noopener noreferrer nofollow ugc",
            class: "ext-img" }, child.getAttribute("alt") || src);
          child.replaceWith(link);
          continue;
        }
        child.setAttribute("loading", "lazy");
      }
      if (child.tagName === "A") {
        const href = child.getAttribute("href") || "";
        if (href && !href.startsWith("#") && !sameOriginOrData(href)) {
          child.setAttribute("target", "_blank");
          child.setAttribute("rel", "noopener noreferrer nofollow ugc");
        }
      }
      walk(child);
    }
  };
  walk(tpl.content);
  return tpl.content;
}

/** A fresh id for label/for pairs. */
let seq = 0;
export function uid(prefix = "f") { return `${prefix}-${++seq}`; }
