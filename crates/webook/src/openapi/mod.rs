//! The HTTP contract as an OpenAPI 3.1 document, built from the handlers' types.
//!
//! Every feature describes its routes in a fragment of its own (a `utoipa::OpenApi` derive in its
//! `http.rs`, handed over by [`Feature::openapi`]); the platform describes its operations routes
//! ([`platform::ops::openapi`]). [`compose`] merges them — each operation tagged with its
//! fragment's name and its `operationId` prefixed with it, a feature's successes allowed to be
//! business errors too ([`platform::openapi::business_errors_in_200`]), two fragments that
//! describe one route or give one schema name two meanings refused — and adds the conventions
//! every route shares ([`platform::openapi::apply_conventions`]). [`document`] turns it into
//! JSON: the schemas utoipa inlines as generic arguments (the `data` of `Envelope<T>`, the items
//! of `Page<T>`) become references to the components they equal, rustdoc links in descriptions
//! become plain code, and every object's keys are sorted. [`render`] writes that as pretty JSON:
//! what `GET /openapi.json` ([`router`]) serves and `webook openapi` prints, and what
//! `docs/openapi.json` holds (a test compares them).
//!
//! The checks that keep it complete live beside it, as tests: `routes.rs` (every route the
//! routers register is documented, and nothing else; a handler needs the access token in the
//! document exactly when it authenticates) and `console.rs` (every call of the web console is a
//! documented route).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context};
use axum::{
    body::Bytes,
    http::{header, HeaderValue},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use platform::feature::Feature;
use utoipa::openapi::{
    info::{InfoBuilder, LicenseBuilder},
    OpenApi, OpenApiBuilder,
};

#[cfg(test)]
mod console;
#[cfg(test)]
mod routes;

/// What the document says about the whole API before its routes (`docs/API.md` has the prose).
const DESCRIPTION: &str = "The HTTP API of webook, a content-community backend. The prose \
contract, with every rule this document cannot express, is docs/API.md.\n\n\
Every JSON answer is the envelope `{code, msg, data}` (`Envelope_*` schemas for successes, \
`Error` otherwise), except where a route says so (`GET /users/profile`, the payment provider's \
notification, pages, assets and this document). `code` 0 is success. Business outcomes \
(validation, wrong password, not the author, no such object, …) answer HTTP 200 with a non-zero \
`code`; protocol failures use HTTP statuses (400, 401, 403 with 403001, 404 no such route, \
405, 429, 503). Rate-limit refusals answer HTTP 429 with code 429001 and `Retry-After`, except \
on the course's routes (`x-course-route`), which answer them with HTTP 200. `msg` is in the \
language `Accept-Language` prefers (English or Chinese); codes never change with it. Times are \
milliseconds since the epoch. Creating POSTs that say so honour `Idempotency-Key`.";

/// The OpenAPI document of the platform's operations routes, this document's own route and every
/// feature's routes, with the shared conventions applied.
pub fn compose(features: &[&dyn Feature]) -> anyhow::Result<OpenApi> {
    let mut doc = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("webook")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(DESCRIPTION))
                .license(Some(LicenseBuilder::new().name("MIT").build()))
                .build(),
        )
        .build();
    let mut owners = Owners::default();
    merge(
        &mut doc,
        &mut owners,
        "operations",
        platform::ops::openapi(),
    )?;
    merge(
        &mut doc,
        &mut owners,
        "openapi",
        <OpenApiDoc as utoipa::OpenApi>::openapi(),
    )?;
    for feature in features {
        let mut fragment = feature.openapi();
        platform::openapi::business_errors_in_200(&mut fragment);
        merge(&mut doc, &mut owners, feature.name(), fragment)?;
    }
    platform::openapi::apply_conventions(&mut doc);
    Ok(doc)
}

/// Which fragment brought each route and component, to name both in a clash.
#[derive(Default)]
struct Owners {
    operations: BTreeMap<String, &'static str>,
    components: BTreeMap<String, &'static str>,
}

/// Adds `fragment` (from `name`) to `doc`: its operations tagged `name` (unless the handler
/// chose a tag) with `operationId` `name_<handler>`, and its components.
fn merge(
    doc: &mut OpenApi,
    owners: &mut Owners,
    name: &'static str,
    mut fragment: OpenApi,
) -> anyhow::Result<()> {
    for (path, item) in std::mem::take(&mut fragment.paths.paths) {
        let mut item = item;
        for operation in platform::openapi::operations_mut(&mut item) {
            if operation.tags.as_ref().is_none_or(Vec::is_empty) {
                operation.tags = Some(vec![name.to_owned()]);
            }
            if let Some(id) = &operation.operation_id {
                operation.operation_id = Some(format!("{name}_{id}"));
            }
        }
        let slot = doc.paths.paths.entry(path.clone()).or_default();
        for (method, mine, theirs) in [
            ("get", &mut slot.get, item.get),
            ("put", &mut slot.put, item.put),
            ("post", &mut slot.post, item.post),
            ("delete", &mut slot.delete, item.delete),
            ("options", &mut slot.options, item.options),
            ("head", &mut slot.head, item.head),
            ("patch", &mut slot.patch, item.patch),
            ("trace", &mut slot.trace, item.trace),
        ] {
            let Some(operation) = theirs else { continue };
            let key = format!("{} {path}", method.to_uppercase());
            if let Some(other) = owners.operations.insert(key.clone(), name) {
                bail!("{key} is described by both {other} and {name}");
            }
            *mine = Some(operation);
        }
    }
    let Some(components) = fragment.components else {
        return Ok(());
    };
    let into = doc.components.get_or_insert_with(Default::default);
    for (schema, definition) in components.schemas {
        match into.schemas.get(&schema) {
            Some(existing) if *existing != definition => {
                let other = owners.components.get(&schema).copied().unwrap_or("?");
                bail!(
                    "schema {schema} means two things, in {other} and in {name}: give one a \
                     name of its own (#[schema(as = …)])"
                );
            }
            Some(_) => {}
            None => {
                owners.components.insert(schema.clone(), name);
                into.schemas.insert(schema, definition);
            }
        }
    }
    into.responses.extend(components.responses);
    into.security_schemes.extend(components.security_schemes);
    Ok(())
}

/// The document of [`compose`] as JSON (module docs): inlined copies of components referenced,
/// keys sorted.
pub fn document(features: &[&dyn Feature]) -> anyhow::Result<serde_json::Value> {
    let doc = compose(features)?;
    let mut value = serde_json::to_value(&doc).context("serialising the OpenAPI document")?;
    reference_inlined_components(&mut value);
    plain_doc_links(&mut value);
    Ok(sorted(value))
}

/// Rustdoc's links in descriptions taken from doc comments (`` [`X`] ``) as plain code
/// (`` `X` ``): they lead nowhere in the document.
fn plain_doc_links(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                match child {
                    Value::String(text) if key == "description" || key == "summary" => {
                        *text = without_doc_links(text);
                    }
                    _ => plain_doc_links(child),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(plain_doc_links),
        _ => {}
    }
}

fn without_doc_links(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("[`") {
        let Some(end) = rest[start..].find("`]").map(|end| start + end) else {
            break;
        };
        let after = &rest[end + 2..];
        plain.push_str(&rest[..start]);
        if after.starts_with('(') || after.starts_with('[') {
            // A Markdown link with a target: kept.
            plain.push_str(&rest[start..end + 2]);
        } else {
            plain.push_str(&rest[start + 1..end + 1]);
        }
        rest = after;
    }
    plain.push_str(rest);
    plain
}

/// `document` as pretty JSON ending with a newline: the bytes of `docs/openapi.json`,
/// `webook openapi` and `GET /openapi.json`.
pub fn render(document: &serde_json::Value) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(document)?;
    text.push('\n');
    Ok(text)
}

/// Replaces every schema in `doc` that equals a component's (an object with properties, or an
/// enumeration) by a reference to it, but for the components themselves.
fn reference_inlined_components(doc: &mut serde_json::Value) {
    use serde_json::Value;
    let Some(Value::Object(schemas)) = doc.pointer("/components/schemas").cloned() else {
        return;
    };
    // The first name in order wins when two components are equal.
    let mut by_text = BTreeMap::new();
    for (name, schema) in &schemas {
        let named = schema.get("properties").is_some()
            || schema.get("enum").is_some()
            || schema.get("oneOf").is_some();
        if named {
            by_text
                .entry(schema.to_string())
                .or_insert_with(|| format!("#/components/schemas/{name}"));
        }
    }
    fn walk(value: &mut Value, by_text: &BTreeMap<String, String>, root: bool) {
        if !root && value.is_object() {
            if let Some(reference) = by_text.get(&value.to_string()) {
                *value = serde_json::json!({ "$ref": reference });
                return;
            }
        }
        match value {
            Value::Object(map) => map
                .values_mut()
                .for_each(|child| walk(child, by_text, false)),
            Value::Array(items) => items
                .iter_mut()
                .for_each(|child| walk(child, by_text, false)),
            _ => {}
        }
    }
    if let Some(Value::Object(schemas)) = doc.pointer_mut("/components/schemas") {
        for schema in schemas.values_mut() {
            walk(schema, &by_text, true);
        }
    }
    if let Some(paths) = doc.get_mut("paths") {
        walk(paths, &by_text, false);
    }
}

/// `value` with every object's keys in order (whatever map serde_json was built with).
fn sorted(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let entries: BTreeMap<String, serde_json::Value> = map
                .into_iter()
                .map(|(key, value)| (key, sorted(value)))
                .collect();
            serde_json::Value::Object(entries.into_iter().collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted).collect())
        }
        other => other,
    }
}

/// The HTTP methods an OpenAPI path item may describe.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Every `(METHOD, /path)` `document` describes (methods upper-case, paths as written there).
pub fn operations(document: &serde_json::Value) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    if let Some(paths) = document.get("paths").and_then(serde_json::Value::as_object) {
        for (path, item) in paths {
            for method in METHODS {
                if item.get(method).is_some() {
                    found.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
    }
    found
}

/// `GET /openapi.json`: the rendered document `json`, as is (no envelope).
pub fn router(json: String) -> Router {
    let body = Bytes::from(json);
    Router::new().route(
        "/openapi.json",
        get(move || {
            let body = body.clone();
            async move { json_response(body) }
        }),
    )
}

fn json_response(body: Bytes) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "openapi",
    responses((status = 200, description = "This OpenAPI 3.1 document, as is (no envelope).",
               content_type = "application/json", body = Object))
)]
#[allow(dead_code)]
fn openapi_json() {}

#[derive(utoipa::OpenApi)]
#[openapi(paths(openapi_json))]
struct OpenApiDoc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_composes_and_every_operation_has_a_unique_id() {
        let doc = super::document(crate::features::FEATURES).unwrap();
        let mut ids = BTreeSet::new();
        for (method, path) in operations(&doc) {
            let operation = &doc["paths"][&path][method.to_lowercase()];
            let id = operation["operationId"].as_str().unwrap().to_owned();
            assert!(ids.insert(id.clone()), "operationId {id} twice");
        }
        assert!(ids.len() > 50, "{ids:?}");
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["info"]["title"], "webook");
        assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn doc_links_become_plain_code() {
        assert_eq!(
            without_doc_links("see [`Page`] and [`x::y`], not [`z`](http://z) or [a]"),
            "see `Page` and `x::y`, not [`z`](http://z) or [a]"
        );
    }

    #[test]
    fn inlined_copies_of_components_become_references() {
        let mut doc = serde_json::json!({
            "components": {"schemas": {
                "Item": {"type": "object", "properties": {"id": {"type": "integer"}}},
                "Envelope_Item": {"type": "object", "properties": {
                    "data": {"type": "object", "properties": {"id": {"type": "integer"}}}
                }},
            }},
            "paths": {"/x": {"get": {"requestBody": {"content": {"application/json": {
                "schema": {"type": "object", "properties": {"id": {"type": "integer"}}}
            }}}}}},
        });
        reference_inlined_components(&mut doc);
        let item = serde_json::json!({"$ref": "#/components/schemas/Item"});
        assert_eq!(
            doc["components"]["schemas"]["Envelope_Item"]["properties"]["data"],
            item
        );
        assert_eq!(
            doc["paths"]["/x"]["get"]["requestBody"]["content"]["application/json"]["schema"],
            item
        );
        assert_eq!(
            doc["components"]["schemas"]["Item"]["properties"]["id"]["type"],
            "integer"
        );
    }

    #[test]
    fn a_route_or_a_schema_described_twice_is_refused() {
        use utoipa::openapi::{
            path::{HttpMethod, OperationBuilder, PathItem},
            schema::ObjectBuilder,
            ComponentsBuilder, PathsBuilder,
        };
        let fragment = |field: &str| {
            OpenApiBuilder::new()
                .paths(PathsBuilder::new().path(
                    "/x",
                    PathItem::new(
                        HttpMethod::Get,
                        OperationBuilder::new().operation_id(Some("x")),
                    ),
                ))
                .components(Some(
                    ComponentsBuilder::new()
                        .schema(
                            "Thing",
                            ObjectBuilder::new().property(field, ObjectBuilder::new()),
                        )
                        .build(),
                ))
                .build()
        };
        let mut doc = OpenApi::default();
        let mut owners = Owners::default();
        merge(&mut doc, &mut owners, "a", fragment("id")).unwrap();
        let twice = merge(&mut doc, &mut owners, "b", fragment("id")).unwrap_err();
        assert_eq!(twice.to_string(), "GET /x is described by both a and b");
        let mut other = fragment("name");
        other.paths = Default::default();
        let clash = merge(&mut doc, &mut owners, "c", other).unwrap_err();
        assert!(clash
            .to_string()
            .starts_with("schema Thing means two things, in a and in c"));
        let tagged = &doc.paths.paths["/x"].get.as_ref().unwrap();
        assert_eq!(tagged.operation_id.as_deref(), Some("a_x"));
        assert_eq!(tagged.tags.as_deref(), Some(&["a".to_owned()][..]));
    }
}
