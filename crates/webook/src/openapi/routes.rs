//! The document and the routers agree, checked on the source: every `.route("PATH", METHODS)`
//! written in `crates/webook/src` and `crates/platform/src` (outside `#[cfg(test)]` modules) is
//! an operation of the OpenAPI document, and every operation there is such a route.
//!
//! A route's methods are the method routers of its second argument, read as a chain at its top
//! level: `get(a)`, `post(b).route_layer(l).get(c)`, `get(a).merge(post(b))` (a `merge` is read
//! the same way), with `route_layer`, `layer` and `with_state` passed over; what a handler's
//! closure holds is never looked at. `route_service` serves every method of its path (one
//! documented method is enough). axum's `{param}` is OpenAPI's; its catch-all `{*rest}` is
//! documented as `{rest}`. What the reader does not understand — a path that is not a string
//! literal, `nest`, `on(…)`, a method router it does not know — fails the check with the place,
//! so the check is taught rather than silently passed by.
//!
//! Beside it, each handler's `#[utoipa::path]` says `security(("access_token" = []))` exactly
//! when its signature takes an extractor that authenticates the caller (`AuthUser`, `Writer`,
//! `Admin`): the document's auth requirement follows the code.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

/// The methods axum's `routing` functions are named after.
const METHOD_ROUTERS: [&str; 8] = [
    "get", "post", "put", "delete", "patch", "head", "options", "trace",
];

/// A method that stands for every method (`route_service`, `any`).
const ANY: &str = "*";

/// `(METHOD, /path)` of every route `source` registers (methods upper-case, paths in
/// OpenAPI's spelling), or what could not be read, with its line.
fn registered_routes(source: &str) -> Result<Vec<(String, String)>, Vec<String>> {
    let code = code_mask(source);
    let bytes = source.as_bytes();
    let mut routes = Vec::new();
    let mut problems = Vec::new();
    let line_of = |at: usize| source[..at].matches('\n').count() + 1;
    let mut at = 0;
    while let Some(found) = source[at..].find('.') {
        let dot = at + found;
        at = dot + 1;
        if !code[dot] {
            continue;
        }
        let name_end = dot
            + 1
            + source[dot + 1..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(source.len() - dot - 1);
        let name = &source[dot + 1..name_end];
        if !matches!(name, "route" | "route_service" | "nest" | "nest_service") {
            continue;
        }
        let open = skip_space(source, name_end);
        if bytes.get(open) != Some(&b'(') {
            continue;
        }
        let Some(close) = matching(source, &code, open) else {
            problems.push(format!("line {}: unbalanced .{name}(", line_of(dot)));
            continue;
        };
        let args = split_top_level(source, &code, open + 1, close);
        let path = args
            .first()
            .and_then(|&(start, end)| string_literal(&source[start..end]));
        let second = args.get(1).map(|&(start, end)| source[start..end].trim());
        match (name, path) {
            ("nest" | "nest_service", _) => problems.push(format!(
                "line {}: .{name}(…) is not understood by this check: teach it",
                line_of(dot)
            )),
            ("route_service", Some(path)) => routes.push((ANY.to_owned(), openapi_path(&path))),
            ("route", Some(path)) => {
                let Some((start, end)) = args.get(1).copied() else {
                    problems.push(format!("line {}: .route without methods", line_of(dot)));
                    continue;
                };
                match methods(source, &code, start, end) {
                    Ok(methods) => routes.extend(
                        methods
                            .into_iter()
                            .map(|method| (method, openapi_path(&path))),
                    ),
                    Err(why) => problems.push(format!("line {}: {why}", line_of(dot))),
                }
            }
            // `.route(x, …)` of something else (a method of our own): a route only when its
            // second argument is a method router.
            (_, None) => {
                let looks_routed = second.is_some_and(|second| {
                    METHOD_ROUTERS
                        .iter()
                        .chain(&["any", "on"])
                        .any(|method| second.starts_with(&format!("{method}(")))
                });
                if looks_routed || name == "route_service" {
                    problems.push(format!(
                        "line {}: the path of .{name}(…) is not a string literal",
                        line_of(dot)
                    ));
                }
            }
            _ => {}
        }
        at = close;
    }
    if problems.is_empty() {
        Ok(routes)
    } else {
        Err(problems)
    }
}

/// The methods of the method-router expression `source[start..end]` (module docs).
fn methods(source: &str, code: &[bool], start: usize, end: usize) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    let bytes = source.as_bytes();
    let mut at = skip_space(source, start);
    let mut first = true;
    while at < end {
        if !first {
            if bytes[at] != b'.' {
                return Err(format!("cannot read {:?}", source[start..end].trim()));
            }
            at = skip_space(source, at + 1);
        }
        first = false;
        let name_end = at
            + source[at..end]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(end - at);
        let mut name = &source[at..name_end];
        let mut open = skip_space(source, name_end);
        if let (Some(bare), true) = (name.strip_suffix("::"), source[open..end].starts_with('<')) {
            // A turbofish: up to its closing `>`.
            let Some(close) = source[open..end].find('>') else {
                return Err(format!("cannot read {:?}", source[start..end].trim()));
            };
            name = bare;
            open = skip_space(source, open + close + 1);
        }
        let name = name.rsplit("::").next().unwrap_or_default();
        if bytes.get(open) != Some(&b'(') {
            return Err(format!("cannot read {:?}", source[start..end].trim()));
        }
        let Some(close) = matching(source, code, open) else {
            return Err("unbalanced parentheses".to_owned());
        };
        match name {
            method if METHOD_ROUTERS.contains(&method) => found.push(method.to_uppercase()),
            "any" => found.push(ANY.to_owned()),
            "merge" => found.extend(methods(source, code, open + 1, close)?),
            "route_layer" | "layer" | "with_state" => {}
            other => return Err(format!("the method router {other}(…) is not understood")),
        }
        at = skip_space(source, close + 1);
    }
    if found.is_empty() {
        return Err(format!("no methods in {:?}", source[start..end].trim()));
    }
    Ok(found)
}

/// axum's path spelling in OpenAPI's: `{*rest}` and `:param` become `{rest}` and `{param}`.
fn openapi_path(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if let Some(rest) = segment.strip_prefix("{*") {
                format!("{{{rest}")
            } else if let Some(name) = segment.strip_prefix(':') {
                format!("{{{name}}}")
            } else {
                segment.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// For every byte of `source`: whether it is code (not a comment, not inside a string or char
/// literal), with `#[cfg(test)]` modules counted as not code.
fn code_mask(source: &str) -> Vec<bool> {
    let bytes = source.as_bytes();
    let mut code = vec![true; bytes.len()];
    let mut at = 0;
    while at < bytes.len() {
        let rest = &source[at..];
        let skip = if rest.starts_with("//") {
            rest.find('\n').unwrap_or(rest.len())
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            let mut end = 0;
            while end < rest.len() {
                if rest[end..].starts_with("/*") {
                    depth += 1;
                    end += 2;
                } else if rest[end..].starts_with("*/") {
                    depth -= 1;
                    end += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    end += 1;
                }
            }
            end
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].find('"').unwrap_or(0);
            let closing = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            body + rest[body..]
                .find(&closing)
                .map_or(rest.len() - body, |end| end + closing.len())
        } else if rest.starts_with('"') {
            let mut end = 1;
            while end < rest.len() && rest.as_bytes()[end] != b'"' {
                end += if rest.as_bytes()[end] == b'\\' { 2 } else { 1 };
            }
            (end + 1).min(rest.len())
        } else if let Some(escaped) = rest.strip_prefix("'\\") {
            escaped.find('\'').map_or(1, |end| end + 3)
        } else if rest.starts_with('\'') && rest.chars().nth(2) == Some('\'') {
            rest.chars().take(3).map(char::len_utf8).sum()
        } else if rest.starts_with("#[cfg(test)]") {
            // A test module: to its closing brace. Other items under the attribute are short
            // and hold no routes.
            let after = skip_space(source, at + "#[cfg(test)]".len());
            if source[after..].starts_with("mod ") {
                match source[after..].find(['{', ';']) {
                    Some(brace) if source.as_bytes()[after + brace] == b'{' => {
                        let mask = code_mask(&source[after + brace..]);
                        matching(&source[after + brace..], &mask, 0)
                            .map_or(rest.len(), |close| after - at + brace + close + 1)
                    }
                    _ => 0,
                }
            } else {
                0
            }
        } else {
            0
        };
        if skip == 0 {
            at += rest.chars().next().map_or(1, char::len_utf8);
        } else {
            code[at..at + skip]
                .iter_mut()
                .for_each(|byte| *byte = false);
            // A string literal is not code, but its quotes are kept readable by callers.
            at += skip;
        }
    }
    code
}

/// The index of the `)` (or `}`) that closes the bracket at `open`, counting code only.
fn matching(source: &str, code: &[bool], open: usize) -> Option<usize> {
    let bytes = source.as_bytes();
    let mut depth = 0usize;
    for at in open..bytes.len() {
        if !code[at] {
            continue;
        }
        match bytes[at] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}

/// The top-level, comma-separated pieces of `source[start..end]`, as ranges.
fn split_top_level(source: &str, code: &[bool], start: usize, end: usize) -> Vec<(usize, usize)> {
    let bytes = source.as_bytes();
    let mut pieces = Vec::new();
    let mut depth = 0usize;
    let mut from = start;
    for at in start..end {
        if !code[at] {
            continue;
        }
        match bytes[at] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                pieces.push((from, at));
                from = at + 1;
            }
            _ => {}
        }
    }
    if source[from..end].trim().is_empty() {
        pieces
    } else {
        pieces.push((from, end));
        pieces
    }
}

/// The text of `piece` when it is one plain string literal.
fn string_literal(piece: &str) -> Option<String> {
    let piece = piece.trim();
    let inner = piece.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains(['"', '\\'])).then(|| inner.to_owned())
}

fn skip_space(source: &str, from: usize) -> usize {
    from + source[from..]
        .find(|c: char| !c.is_whitespace())
        .unwrap_or(source.len() - from)
}

/// The extractors that authenticate a handler's caller with the access token.
const AUTHENTICATING: [&str; 3] = ["AuthUser", "Writer", "Admin"];

/// Handlers of `source` whose `#[utoipa::path]` and signature disagree about the access
/// token: one takes an authenticating extractor ([`AUTHENTICATING`]) and the other does not
/// say `security(("access_token" = []))`, or the reverse; or one takes a `Reader` (a token
/// optional: visitors may read) and the other does not say `security((), ("access_token" =
/// []))`, or the reverse.
fn security_mismatches(source: &str) -> Vec<String> {
    let code = code_mask(source);
    let mut problems = Vec::new();
    for (at, _) in source.match_indices("#[utoipa::path(") {
        if !code[at] {
            continue;
        }
        let open = at + "#[utoipa::path".len();
        let Some(close) = matching(source, &code, open) else {
            continue;
        };
        let attribute = &source[open..close];
        let Some(function) = source[close..].find("fn ").map(|found| close + found) else {
            continue;
        };
        let name_end = function
            + 3
            + source[function + 3..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or_default();
        let name = &source[function + 3..name_end];
        let Some(params_end) = matching(source, &code, name_end) else {
            continue;
        };
        let words =
            source[name_end..params_end].split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        let (authenticates, reads) = words.fold((false, false), |(auth, reads), word| {
            (
                auth || AUTHENTICATING.contains(&word),
                reads || word == "Reader",
            )
        });
        let says = attribute.contains("\"access_token\"");
        let optional = attribute.contains("security((),");
        let problem = if reads {
            (!(says && optional)).then_some(
                "reads for visitors (a Reader) but its #[utoipa::path] has no \
                 security((), (\"access_token\" = []))",
            )
        } else if authenticates {
            (!says || optional).then_some(
                "authenticates its caller but its #[utoipa::path] has no \
                 security((\"access_token\" = []))",
            )
        } else {
            says.then_some(
                "its #[utoipa::path] asks for the access token but it takes no AuthUser, \
                 Writer, Admin or Reader",
            )
        };
        if let Some(problem) = problem {
            problems.push(format!("{name}: {problem}"));
        }
    }
    problems
}

/// What differs between the routes `registered` and the operations `documented`.
fn differences(
    registered: &BTreeSet<(String, String)>,
    documented: &BTreeSet<(String, String)>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (method, path) in registered {
        let known = if method == ANY {
            documented.iter().any(|(_, documented)| documented == path)
        } else {
            documented.contains(&(method.clone(), path.clone()))
        };
        if !known {
            problems.push(format!(
                "{method} {path} is routed but not in the OpenAPI document: add \
                 #[utoipa::path] to its handler and list it in its feature's OpenApi derive"
            ));
        }
    }
    for (method, path) in documented {
        let routed = registered.contains(&(method.clone(), path.clone()))
            || registered.contains(&(ANY.to_owned(), path.clone()));
        if !routed {
            problems.push(format!(
                "{method} {path} is in the OpenAPI document but no router registers it"
            ));
        }
    }
    problems
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_route_is_documented_and_every_documented_operation_is_routed() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut registered = BTreeSet::new();
    let mut unreadable = Vec::new();
    for dir in [manifest.join("src"), manifest.join("../platform/src")] {
        for file in rust_files(&dir) {
            let source = std::fs::read_to_string(&file).unwrap();
            match registered_routes(&source) {
                Ok(routes) => registered.extend(routes),
                Err(problems) => unreadable.extend(
                    problems
                        .into_iter()
                        .map(|problem| format!("{}: {problem}", file.display())),
                ),
            }
        }
    }
    assert!(unreadable.is_empty(), "{unreadable:#?}");
    // Far fewer would mean the reader missed the way routes are written now.
    assert!(
        registered.len() > 60,
        "only {} routes found",
        registered.len()
    );
    let documented = super::operations(&super::document(crate::features::FEATURES).unwrap());
    let problems = differences(&registered, &documented);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn a_handler_says_it_needs_the_access_token_exactly_when_it_authenticates() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    let mut described = 0;
    for file in rust_files(&manifest.join("src")) {
        let source = std::fs::read_to_string(&file).unwrap();
        described += source.matches("#[utoipa::path(").count();
        problems.extend(
            security_mismatches(&source)
                .into_iter()
                .map(|problem| format!("{}: {problem}", file.display())),
        );
    }
    assert!(described > 60, "only {described} handlers described");
    assert!(problems.is_empty(), "{problems:#?}");

    let source = r#"
        #[utoipa::path(get, path = "/a", security(("access_token" = [])))]
        async fn a(State(s): State<S>, user: AuthUser) -> R {}
        #[utoipa::path(post, path = "/b")]
        async fn b(Writer(user): Writer, ApiJson(x): ApiJson<X>) -> R {}
        #[utoipa::path(get, path = "/c", security(("access_token" = [])))]
        async fn c(ApiQuery(q): ApiQuery<Q>) -> R {}
        #[utoipa::path(get, path = "/d")]
        async fn d(_admin: Admin, area: AdminArea) -> R {}
        #[utoipa::path(get, path = "/e", security((), ("access_token" = [])))]
        async fn e(Reader(caller): Reader) -> R {}
        #[utoipa::path(get, path = "/f", security(("access_token" = [])))]
        async fn f(_reader: Reader) -> R {}
        #[utoipa::path(get, path = "/g", security((), ("access_token" = [])))]
        async fn g(user: AuthUser) -> R {}
    "#;
    assert_eq!(
        security_mismatches(source),
        [
            "b: authenticates its caller but its #[utoipa::path] has no \
             security((\"access_token\" = []))",
            "c: its #[utoipa::path] asks for the access token but it takes no AuthUser, Writer, \
             Admin or Reader",
            "d: authenticates its caller but its #[utoipa::path] has no \
             security((\"access_token\" = []))",
            "f: reads for visitors (a Reader) but its #[utoipa::path] has no \
             security((), (\"access_token\" = []))",
            "g: authenticates its caller but its #[utoipa::path] has no \
             security((\"access_token\" = []))",
        ]
    );
}

#[test]
fn the_check_sees_chained_merged_and_wildcard_routes_and_names_what_is_missing() {
    let source = r#"
        pub fn router() -> Router {
            // .route("/commented", get(nothing))
            Router::new()
                .route("/a/{id}", get(a).post(b))
                .route(
                    "/jobs",
                    get(list).merge(post(create).route_layer(idempotent)),
                )
                .route("/tags", post(create).route_layer(idempotent).get(owned))
                .route("/files/{version}/{*path}", axum::routing::get(file))
                .route("/m", get(move |state: State<X>| async move { x.get(1); post(2) }))
                .route_service("/svc", service)
        }
        fn elsewhere() { self.route(held, &state); let s = ".route(\"/in_a_string\", get(x))"; }
        #[cfg(test)]
        mod tests {
            fn probe() -> Router { Router::new().route("/only/in/tests", get(probe)) }
        }
    "#;
    let routes: BTreeSet<_> = registered_routes(source).unwrap().into_iter().collect();
    let route = |method: &str, path: &str| (method.to_owned(), path.to_owned());
    let expected: BTreeSet<_> = [
        route("GET", "/a/{id}"),
        route("POST", "/a/{id}"),
        route("GET", "/jobs"),
        route("POST", "/jobs"),
        route("POST", "/tags"),
        route("GET", "/tags"),
        route("GET", "/files/{version}/{path}"),
        route("GET", "/m"),
        route("*", "/svc"),
    ]
    .into_iter()
    .collect();
    assert_eq!(routes, expected);

    // A route added without documentation, and documentation of a route that is gone.
    let mut documented = expected.clone();
    documented.remove(&route("POST", "/jobs"));
    documented.remove(&route("*", "/svc"));
    documented.insert(route("GET", "/svc"));
    documented.insert(route("DELETE", "/gone"));
    assert_eq!(
        differences(&routes, &documented),
        [
            "POST /jobs is routed but not in the OpenAPI document: add #[utoipa::path] to its \
             handler and list it in its feature's OpenApi derive",
            "DELETE /gone is in the OpenAPI document but no router registers it",
        ]
    );

    // What it cannot read fails, naming the line.
    let unreadable =
        registered_routes("r.route(PATH, get(x));\nr.nest(\"/v1\", api);").unwrap_err();
    assert_eq!(
        unreadable,
        [
            "line 1: the path of .route(…) is not a string literal",
            "line 2: .nest(…) is not understood by this check: teach it",
        ]
    );
}
