//! The web console calls only documented routes, checked on its sources: every call of its
//! modules (`console/assets/*.js`, `pages/*.js`) is an operation of the OpenAPI document.
//!
//! The console talks to the server through `api.js`: `api(path, {method, …})` and
//! `apiWithHeaders(path, opts)` (its functions `api` and `apiWithHeaders` wrap `fetch`, and are
//! not calls themselves), and one `fetch("/users/refresh_token", {method: "POST"})`; an image's
//! `src: "/…"` is a GET too. A call's method is the `method:` of its options (GET without one);
//! its path is resolved from the first argument: a string literal, a template literal (each
//! `${…}` a path parameter unless it names a module constant or a helper's argument), a
//! ternary of such, a module constant (`const BASE = "/admin/db-move"`), or a parameter of a
//! named helper (`const post = (path, body) => api(`${BASE}/${path}`, …)`,
//! `async function loginWith(path, body)`) — then every call of that helper in the module
//! gives one. A query string is left out. A templated segment matches any segment of a
//! documented path (a `{param}` or a fixed one: `/follow/${kind}` is `/follow/followees` and
//! `/follow/followers`).
//!
//! A call whose path cannot be resolved fails the test, and so do implausibly few calls: a new
//! way of calling the server must be taught here, not silently skipped.

use std::{collections::BTreeSet, path::Path};

/// One call of the server: `(METHOD, path)` with `{}` for a templated segment, and where.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Call {
    method: String,
    path: String,
    place: String,
}

/// The functions that call the server.
const CALLERS: [&str; 3] = ["api", "apiWithHeaders", "fetch"];
/// The functions of `api.js` that wrap `fetch`: what they call is the call of their caller.
const WRAPPERS: [&str; 2] = ["api", "apiWithHeaders"];

/// For every byte of a JavaScript `source`: whether it is code (not a comment, a string, a
/// template literal or a regular expression).
fn code_mask(source: &str) -> Vec<bool> {
    let bytes = source.as_bytes();
    let mut code = vec![true; bytes.len()];
    let mut at = 0;
    let mut last_code = b';';
    while at < bytes.len() {
        let byte = bytes[at];
        let end = match byte {
            b'/' if bytes.get(at + 1) == Some(&b'/') => {
                source[at..].find('\n').map_or(bytes.len(), |end| at + end)
            }
            b'/' if bytes.get(at + 1) == Some(&b'*') => source[at + 2..]
                .find("*/")
                .map_or(bytes.len(), |end| at + 2 + end + 2),
            // A regular expression where an expression starts (else a division).
            b'/' if b"(,=:[!&|?{};".contains(&last_code) => {
                let mut end = at + 1;
                let mut class = false;
                while end < bytes.len() && (class || bytes[end] != b'/') {
                    match bytes[end] {
                        b'\\' => end += 1,
                        b'[' => class = true,
                        b']' => class = false,
                        _ => {}
                    }
                    end += 1;
                }
                end + 1
            }
            b'"' | b'\'' => {
                let mut end = at + 1;
                while end < bytes.len() && bytes[end] != byte {
                    end += if bytes[end] == b'\\' { 2 } else { 1 };
                }
                end + 1
            }
            b'`' => template_end(source, at),
            _ => at,
        };
        if end == at {
            if !byte.is_ascii_whitespace() {
                last_code = byte;
            }
            at += 1;
        } else {
            let end = end.min(bytes.len());
            code[at..end].iter_mut().for_each(|byte| *byte = false);
            // A literal ends an expression: a `/` after it divides.
            last_code = b'a';
            at = end;
        }
    }
    code
}

/// The index after the template literal that starts at `open` (a backtick).
fn template_end(source: &str, open: usize) -> usize {
    let bytes = source.as_bytes();
    let mut at = open + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'`' => return at + 1,
            b'$' if bytes.get(at + 1) == Some(&b'{') => at = substitution_end(source, at + 1),
            _ => at += 1,
        }
    }
    bytes.len()
}

/// The index after the `}` closing the substitution whose `{` is at `open`.
fn substitution_end(source: &str, open: usize) -> usize {
    let inner = code_mask(&source[open..]);
    matching(&source[open..], &inner, 0).map_or(source.len(), |close| open + close + 1)
}

/// The index of the bracket closing the one at `open`, counting code only.
fn matching(source: &str, code: &[bool], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (at, byte) in source.bytes().enumerate().skip(open) {
        if !code[at] {
            continue;
        }
        match byte {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}

/// The top-level, comma-separated arguments between `open` (a `(`) and its `close`.
fn arguments<'a>(source: &'a str, code: &[bool], open: usize, close: usize) -> Vec<&'a str> {
    let mut pieces = Vec::new();
    let mut depth = 0usize;
    let mut from = open + 1;
    for at in open + 1..close {
        if !code[at] {
            continue;
        }
        match source.as_bytes()[at] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                pieces.push(source[from..at].trim());
                from = at + 1;
            }
            _ => {}
        }
    }
    if !source[from..close].trim().is_empty() {
        pieces.push(source[from..close].trim());
    }
    pieces
}

fn is_identifier_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'$'
}

/// A named function of a module and its parameters: `function name(…)`, or
/// `const name = (…) =>` / `const name = async (…) =>`.
#[derive(Debug)]
struct Function {
    name: String,
    params: Vec<String>,
    /// Where its definition starts.
    at: usize,
    /// Its body, when it is a block (`{ … }`).
    body: Option<(usize, usize)>,
}

fn functions(source: &str, code: &[bool]) -> Vec<Function> {
    let bytes = source.as_bytes();
    let mut found = Vec::new();
    let identifier_at = |from: usize| {
        let end = from
            + source[from..]
                .bytes()
                .take_while(|byte| is_identifier_byte(*byte))
                .count();
        (&source[from..end], end)
    };
    let params_of = |text: &str| {
        text.split(',')
            .map(|param| {
                param
                    .split('=')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_owned()
            })
            .filter(|param| !param.is_empty())
            .collect::<Vec<_>>()
    };
    for (at, _) in source.match_indices("function ") {
        if !code[at] || (at > 0 && is_identifier_byte(bytes[at - 1])) {
            continue;
        }
        let (name, end) = identifier_at(skip_space(source, at + "function ".len()));
        let open = skip_space(source, end);
        if name.is_empty() || bytes.get(open) != Some(&b'(') {
            continue;
        }
        let Some(close) = matching(source, code, open) else {
            continue;
        };
        let brace = skip_space(source, close + 1);
        let body = matching(source, code, brace).map(|end| (brace, end));
        found.push(Function {
            name: name.to_owned(),
            params: params_of(&source[open + 1..close]),
            at,
            body,
        });
    }
    for keyword in ["const ", "let "] {
        for (at, _) in source.match_indices(keyword) {
            if !code[at] || (at > 0 && is_identifier_byte(bytes[at - 1])) {
                continue;
            }
            let (name, end) = identifier_at(skip_space(source, at + keyword.len()));
            let equals = skip_space(source, end);
            if name.is_empty() || bytes.get(equals) != Some(&b'=') {
                continue;
            }
            let mut open = skip_space(source, equals + 1);
            if source[open..].starts_with("async") {
                open = skip_space(source, open + "async".len());
            }
            if bytes.get(open) != Some(&b'(') {
                continue;
            }
            let Some(close) = matching(source, code, open) else {
                continue;
            };
            let arrow = skip_space(source, close + 1);
            if !source[arrow..].starts_with("=>") {
                continue;
            }
            let start = skip_space(source, arrow + 2);
            let body = (bytes.get(start) == Some(&b'{'))
                .then(|| matching(source, code, start).map(|end| (start, end)))
                .flatten();
            found.push(Function {
                name: name.to_owned(),
                params: params_of(&source[open + 1..close]),
                at,
                body,
            });
        }
    }
    found
}

/// `const NAME = "text";` of a module: its string constants.
fn constants(source: &str, code: &[bool]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (at, _) in source.match_indices("const ") {
        if !code[at] {
            continue;
        }
        let rest = &source[at + "const ".len()..];
        let Some((name, value)) = rest.split_once('=') else {
            continue;
        };
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(is_identifier_byte) {
            continue;
        }
        let value = value.trim_start();
        let end = value.find([';', '\n']).unwrap_or(value.len());
        if let Some(text) = string_literal(value[..end].trim()) {
            found.push((name.to_owned(), text));
        }
    }
    found
}

/// The text of a plain `"…"` or `'…'` literal.
fn string_literal(expression: &str) -> Option<String> {
    let quote = expression
        .chars()
        .next()
        .filter(|c| *c == '"' || *c == '\'')?;
    let inner = expression.strip_prefix(quote)?.strip_suffix(quote)?;
    (!inner.contains(quote) && !inner.contains('\\')).then(|| inner.to_owned())
}

fn skip_space(source: &str, from: usize) -> usize {
    from + source[from..]
        .find(|c: char| !c.is_whitespace())
        .unwrap_or(source.len() - from)
}

/// A module's sources and what they define.
struct Module<'a> {
    name: String,
    source: &'a str,
    code: Vec<bool>,
    functions: Vec<Function>,
    constants: Vec<(String, String)>,
}

impl<'a> Module<'a> {
    fn new(name: &str, source: &'a str) -> Self {
        let code = code_mask(source);
        Self {
            name: name.to_owned(),
            functions: functions(source, &code),
            constants: constants(source, &code),
            source,
            code,
        }
    }

    fn line_of(&self, at: usize) -> usize {
        self.source[..at].matches('\n').count() + 1
    }

    /// The calls of function `name` at code positions (not its definition), with their
    /// arguments and positions.
    fn calls_of(&self, name: &str) -> Vec<(usize, Vec<&'a str>)> {
        let bytes = self.source.as_bytes();
        let mut calls = Vec::new();
        for (at, _) in self.source.match_indices(name) {
            let end = at + name.len();
            let before = at.checked_sub(1).map(|before| bytes[before]);
            if !self.code[at]
                || before.is_some_and(|byte| is_identifier_byte(byte) || byte == b'.')
                || bytes.get(end) != Some(&b'(')
                || self.source[..at].trim_end().ends_with("function")
            {
                continue;
            }
            if let Some(close) = matching(self.source, &self.code, end) {
                calls.push((at, arguments(self.source, &self.code, end, close)));
            }
        }
        calls
    }

    /// The paths `expression` (an argument at `at`) may be, with `{}` for what is unknown.
    fn paths(&self, expression: &str, at: usize, depth: usize) -> Result<Vec<String>, String> {
        let expression = expression.trim();
        if depth > 4 {
            return Err(format!("{expression}: helpers nested too deep"));
        }
        if let Some(text) = string_literal(expression) {
            return Ok(vec![text]);
        }
        if let Some((condition, branches)) = split_ternary(expression) {
            let _ = condition;
            let mut paths = self.paths(branches.0, at, depth)?;
            paths.extend(self.paths(branches.1, at, depth)?);
            return Ok(paths);
        }
        if expression.starts_with('`') && expression.ends_with('`') {
            return self.template(&expression[1..expression.len() - 1], at, depth);
        }
        if expression.bytes().all(is_identifier_byte) {
            return self.value_of(expression, at, depth);
        }
        Err(format!("cannot read the path {expression}"))
    }

    /// The texts a template literal's body may be.
    fn template(&self, body: &str, at: usize, depth: usize) -> Result<Vec<String>, String> {
        let mut texts = vec![String::new()];
        let mut rest = body;
        while let Some(start) = rest.find("${") {
            let literal = &rest[..start];
            texts.iter_mut().for_each(|text| text.push_str(literal));
            let close = substitution_end(rest, start + 1);
            let inner = rest[start + 2..close - 1].trim();
            // A constant or a helper's argument when it resolves; anything else (a variable of
            // the page, an expression) is a path parameter.
            let values = Some(inner)
                .filter(|inner| inner.bytes().all(is_identifier_byte))
                .and_then(|inner| self.value_of(inner, at, depth).ok())
                .filter(|values| !values.is_empty())
                .unwrap_or_else(|| vec!["{}".to_owned()]);
            texts = texts
                .iter()
                .flat_map(|text| values.iter().map(move |value| format!("{text}{value}")))
                .collect();
            rest = &rest[close..];
        }
        texts.iter_mut().for_each(|text| text.push_str(rest));
        Ok(texts)
    }

    /// What identifier `name` at `at` may hold: a module constant, or a helper's parameter.
    fn value_of(&self, name: &str, at: usize, depth: usize) -> Result<Vec<String>, String> {
        if let Some((_, value)) = self.constants.iter().find(|(constant, _)| constant == name) {
            return Ok(vec![value.clone()]);
        }
        let helper = self
            .functions
            .iter()
            .filter(|function| function.at < at && function.params.iter().any(|p| p == name))
            .max_by_key(|function| function.at)
            .ok_or_else(|| format!("{name} is neither a constant nor a helper's parameter"))?;
        let index = helper
            .params
            .iter()
            .position(|param| param == name)
            .unwrap_or_default();
        let mut paths = Vec::new();
        for (call, arguments) in self.calls_of(&helper.name) {
            let argument = arguments.get(index).ok_or_else(|| {
                format!(
                    "line {}: {}(…) without its {name}",
                    self.line_of(call),
                    helper.name
                )
            })?;
            paths.extend(self.paths(argument, call, depth + 1)?);
        }
        Ok(paths)
    }

    /// Whether `at` is inside one of `api.js`'s wrappers of `fetch`.
    fn inside_wrapper(&self, at: usize) -> bool {
        self.name == "api.js"
            && self.functions.iter().any(|function| {
                WRAPPERS.contains(&function.name.as_str())
                    && function
                        .body
                        .is_some_and(|(start, end)| start < at && at < end)
            })
    }

    /// Every call of the server in this module.
    fn calls(&self) -> Result<Vec<Call>, Vec<String>> {
        let mut calls = Vec::new();
        let mut problems = Vec::new();
        for caller in CALLERS {
            for (at, arguments) in self.calls_of(caller) {
                if self.inside_wrapper(at) {
                    continue;
                }
                let place = format!("{}:{}", self.name, self.line_of(at));
                let Some(first) = arguments.first() else {
                    problems.push(format!("{place}: {caller}() without a path"));
                    continue;
                };
                let method = arguments
                    .get(1)
                    .and_then(|options| method_of(options))
                    .unwrap_or_else(|| "GET".to_owned());
                match self.paths(first, at, 0) {
                    Ok(paths) => calls.extend(paths.into_iter().map(|path| Call {
                        method: method.clone(),
                        path: without_query(&path),
                        place: place.clone(),
                    })),
                    Err(why) => problems.push(format!("{place}: {why}")),
                }
            }
        }
        // Images the page loads from the server.
        for (at, _) in self.source.match_indices("src:") {
            if !self.code[at] {
                continue;
            }
            let value = self.source[at + "src:".len()..].trim_start();
            let quoted = value.starts_with(['"', '`', '\'']);
            if quoted && value[1..].starts_with('/') {
                let end = value[1..]
                    .find(&value[..1])
                    .map_or(value.len(), |end| end + 2);
                match self.paths(&value[..end], at, 0) {
                    Ok(paths) => calls.extend(paths.into_iter().map(|path| Call {
                        method: "GET".to_owned(),
                        path: without_query(&path),
                        place: format!("{}:{}", self.name, self.line_of(at)),
                    })),
                    Err(why) => problems.push(format!("{}: {why}", self.name)),
                }
            }
        }
        if problems.is_empty() {
            Ok(calls)
        } else {
            Err(problems)
        }
    }
}

/// `condition ? a : b` at the top level of `expression`.
fn split_ternary(expression: &str) -> Option<(&str, (&str, &str))> {
    let code = code_mask(expression);
    let bytes = expression.as_bytes();
    let mut depth = 0usize;
    let mut question = None;
    for (at, byte) in bytes.iter().enumerate() {
        if !code[at] {
            continue;
        }
        match byte {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'?' if depth == 0
                && question.is_none()
                && !matches!(bytes.get(at + 1), Some(b'.' | b'?'))
                && (at == 0 || bytes[at - 1] != b'?') =>
            {
                question = Some(at);
            }
            b':' if depth == 0 => {
                if let Some(question) = question {
                    return Some((
                        &expression[..question],
                        (&expression[question + 1..at], &expression[at + 1..]),
                    ));
                }
            }
            _ => {}
        }
    }
    None
}

/// The `method: "…"` of an options object (upper-case).
fn method_of(options: &str) -> Option<String> {
    let code = code_mask(options);
    let at = options
        .match_indices("method:")
        .find(|(at, _)| code[*at])
        .map(|(at, _)| at)?;
    let value = options[at + "method:".len()..].trim_start();
    let quote = value.chars().next()?;
    let end = value[1..].find(quote)? + 2;
    string_literal(&value[..end]).map(|method| method.to_uppercase())
}

fn without_query(path: &str) -> String {
    path.split('?').next().unwrap_or_default().to_owned()
}

/// Whether the call path `called` (`{}` for a templated segment) is the documented `path`.
fn matches(called: &str, path: &str) -> bool {
    let called: Vec<&str> = called.split('/').collect();
    let documented: Vec<&str> = path.split('/').collect();
    called.len() == documented.len()
        && called.iter().zip(&documented).all(|(called, documented)| {
            *called == "{}"
                || called == documented
                || (documented.starts_with('{') && !called.is_empty())
        })
}

/// The calls of `calls` that no operation of `documented` answers.
fn undocumented<'c>(calls: &'c [Call], documented: &BTreeSet<(String, String)>) -> Vec<&'c Call> {
    calls
        .iter()
        .filter(|call| {
            !documented
                .iter()
                .any(|(method, path)| *method == call.method && matches(&call.path, path))
        })
        .collect()
}

/// Every call of the console's modules.
fn console_calls() -> Vec<Call> {
    let assets = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/console/assets");
    let mut files = Vec::new();
    for dir in [assets.clone(), assets.join("pages")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "js") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut calls = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(&assets).unwrap().display().to_string();
        match Module::new(&name, &source).calls() {
            Ok(found) => calls.extend(found),
            Err(found) => problems.extend(found),
        }
    }
    assert!(
        problems.is_empty(),
        "calls whose path cannot be read: {problems:#?}"
    );
    calls
}

#[test]
fn every_call_of_the_console_is_a_documented_route() {
    let calls = console_calls();
    let distinct: BTreeSet<_> = calls
        .iter()
        .map(|call| (call.method.clone(), call.path.clone()))
        .collect();
    // About 75 calls of about 60 routes when this was written: far fewer means the calling
    // convention changed under this test.
    assert!(
        calls.len() >= 50 && distinct.len() >= 40,
        "only {} calls of {} routes found: has the way the console calls the server changed? \
         {distinct:#?}",
        calls.len(),
        distinct.len()
    );
    let documented = super::operations(&super::document(crate::features::FEATURES).unwrap());
    let missing = undocumented(&calls, &documented);
    assert!(
        missing.is_empty(),
        "the console calls routes the OpenAPI document does not have: {missing:#?}"
    );
}

#[test]
fn the_reader_resolves_helpers_constants_templates_and_ternaries() {
    let source = r#"
        import { api } from "../api.js";
        const BASE = "/admin/db-move";
        // api("/commented/out")
        const post = (path, body) => api(`${BASE}/${path}`, { method: "POST", body });
        async function loginWith(path, body) {
          await api(path, { method: "POST", body, auth: false });
        }
        export async function page(id, publish) {
          const s = "api('/in/a/string')";
          const re = /api\(x/g;
          await post("start", { destination });
          await loginWith("/users/login", {});
          await api(publish ? "/articles/publish" : "/articles/edit", { method: "POST", idem: k });
          await api(`/comments/${c.id}/replies`, { query: { cursor } });
          h("img", { src: `/console/qr.svg?text=${encodeURIComponent(url)}` });
          await api(`/follow/${kind}`, { query: { uid } });
        }
    "#;
    let calls: Vec<(String, String)> = Module::new("t.js", source)
        .calls()
        .unwrap()
        .into_iter()
        .map(|call| (call.method, call.path))
        .collect();
    let call = |method: &str, path: &str| (method.to_owned(), path.to_owned());
    let expected = [
        call("POST", "/admin/db-move/start"),
        call("POST", "/users/login"),
        call("POST", "/articles/publish"),
        call("POST", "/articles/edit"),
        call("GET", "/comments/{}/replies"),
        call("GET", "/follow/{}"),
        call("GET", "/console/qr.svg"),
    ];
    let found: BTreeSet<_> = calls.iter().cloned().collect();
    assert_eq!(found, expected.iter().cloned().collect::<BTreeSet<_>>());

    // A call the document does not have is named; a templated segment matches a parameter
    // and a fixed segment alike.
    let documented: BTreeSet<(String, String)> = [
        call("POST", "/admin/db-move/start"),
        call("POST", "/users/login"),
        call("POST", "/articles/publish"),
        call("GET", "/comments/{id}/replies"),
        call("GET", "/follow/followees"),
        call("GET", "/console/qr.svg"),
    ]
    .into_iter()
    .collect();
    let calls: Vec<Call> = expected
        .iter()
        .map(|(method, path)| Call {
            method: method.clone(),
            path: path.clone(),
            place: String::new(),
        })
        .collect();
    let missing: Vec<_> = undocumented(&calls, &documented)
        .into_iter()
        .map(|call| format!("{} {}", call.method, call.path))
        .collect();
    assert_eq!(missing, ["POST /articles/edit"]);

    // A path it cannot resolve fails.
    let unresolved = Module::new("u.js", "function f() { return api(target.url); }")
        .calls()
        .unwrap_err();
    assert_eq!(unresolved, ["u.js:1: cannot read the path target.url"]);
}
