// problems.js — a classic script loaded first, before any module: records what goes wrong on the
// page in window.consoleProblems (Content-Security-Policy violations, uncaught errors and
// unhandled promise rejections), so that the browser tests can assert there were none.
"use strict";
(function () {
  var problems = (window.consoleProblems = window.consoleProblems || []);
  var keep = function (text) { if (problems.length < 100) problems.push(String(text)); };
  document.addEventListener("securitypolicyviolation", function (e) {
    keep("CSP " + e.effectiveDirective + " blocked " + (e.blockedURI || "inline") +
      (e.sourceFile ? " at " + e.sourceFile + ":" + e.lineNumber : ""));
  });
  window.addEventListener("error", function (e) {
    keep("error: " + e.message + (e.filename ? " at " + e.filename + ":" + e.lineno : ""));
  });
  window.addEventListener("unhandledrejection", function (e) {
    var r = e.reason;
    if (r && r.name === "AbortError") return; // a page left while its requests ran
    keep("unhandled rejection: " + (r && r.stack ? r.stack : r));
  });
})();
