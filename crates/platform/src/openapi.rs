//! The pieces of the OpenAPI document every feature shares: the `{code, msg, data}` envelope as
//! a schema, the security schemes, and the conventions every operation follows.
//!
//! Each feature describes its own handlers with `#[utoipa::path(...)]` and derives
//! `utoipa::ToSchema` on the types they take and answer; a `utoipa::OpenApi` derive in its
//! `http.rs` lists them, and its [`crate::feature::Feature::openapi`] hands that fragment to the
//! application, which merges the platform's ([`crate::ops::openapi`]) and every feature's and
//! finishes the whole with [`apply_conventions`]. A success body is written
//! `body = Envelope<T>`, where `T` is the handler's `data` (the type in its `Reply<T>` or
//! `ReplyWithMsg<T>`), `Envelope<Null>` for `data: null`. What every route shares is added once
//! here rather than on each handler: the error answers ([`ErrorEnvelope`], HTTP statuses of
//! `API.md` → Conventions) by what an operation declares — parameters or a body can be refused
//! with 400, an operation needing [`ACCESS_TOKEN`] can answer 401 and 403 — and 500/503 on
//! every one. [`course_routes`] marks the fragment of a router behind
//! [`crate::http::course_answers`].

use std::borrow::Cow;

use utoipa::{
    openapi::{
        extensions::ExtensionsBuilder,
        path::Operation,
        response::ResponseBuilder,
        schema::{AnyOfBuilder, ObjectBuilder, Schema, Type},
        security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
        Components, ContentBuilder, OpenApi, PathItem, RefOr,
    },
    PartialSchema, ToSchema,
};

use crate::http::{ACCESS_TOKEN_HEADER, REFRESH_TOKEN_HEADER};

/// The security scheme of routes that need a signed-in caller: `Authorization: Bearer <access
/// token>` (`security(("access_token" = []))` on a handler).
pub const ACCESS_TOKEN: &str = "access_token";
/// The security scheme of `POST /users/refresh_token`: the refresh token as the bearer.
pub const REFRESH_TOKEN: &str = "refresh_token";
/// The security scheme of `/metrics` on the API port for clients outside
/// `metrics_allowed_networks`: `Authorization: Bearer <metrics_token>`.
pub const METRICS_TOKEN: &str = "metrics_token";

/// A successful JSON answer: the envelope with `code` 0 and the route's `data`.
// What `Reply<T>` and `ReplyWithMsg<T>` render (a test compares the fields).
#[derive(ToSchema)]
#[schema(bound = "T: ToSchema")]
pub struct Envelope<T> {
    /// 0: success.
    #[schema(example = 0)]
    pub code: i32,
    /// `ok`, or what happened in the caller's language (`Accept-Language`).
    pub msg: String,
    /// The answer.
    pub data: T,
}

/// `data: null`: the answer carries nothing beyond its code and message (`Envelope<Null>`).
pub struct Null;

impl PartialSchema for Null {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new().schema_type(Type::Null).into()
    }
}

impl ToSchema for Null {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Null")
    }
}

/// An answer that is not a success: a non-zero business code (`API.md` → Conventions: 4
/// invalid input, 5 system error, 401001 not logged in, 401002 wrong email or password, 403001
/// wrong client, 403002 not allowed, 404001 no such object, 409001 already exists, 429001 too
/// many requests), the message in the caller's language, and no data. Business outcomes answer
/// HTTP 200 with it; protocol failures the HTTP status their response names.
#[derive(ToSchema)]
#[schema(as = Error)]
pub struct ErrorEnvelope {
    /// The business code, never 0.
    #[schema(example = 404001)]
    pub code: i32,
    /// What went wrong, safe to show, in the caller's language.
    pub msg: String,
    /// Always `null`.
    pub data: Null,
}

/// Marks every operation of `doc` as one of the course's routes (`API.md` → Conventions): a
/// rate-limit refusal answers HTTP 200 with code 429001 and `Retry-After`, as the course's
/// frontend reads only the body of 2xx answers. For the fragment of a router that carries
/// [`crate::http::course_answers`].
pub fn course_routes(mut doc: OpenApi) -> OpenApi {
    for item in doc.paths.paths.values_mut() {
        for operation in operations_mut(item) {
            let note = "A course route: a rate-limit refusal answers HTTP 200 with code 429001 \
                        and `Retry-After` (the course's frontend reads 2xx bodies only).";
            operation.description = Some(match operation.description.take() {
                Some(description) if !description.is_empty() => format!("{description}\n\n{note}"),
                _ => note.to_owned(),
            });
            operation.extensions = Some(
                ExtensionsBuilder::new()
                    .add("x-course-route", serde_json::Value::Bool(true))
                    .build(),
            );
        }
    }
    doc
}

/// Lets every JSON success body of `doc`'s operations (HTTP 200: an `Envelope<T>`, or the bare
/// object of `GET /users/profile`) also be an [`ErrorEnvelope`]: a business outcome (invalid
/// input, not allowed, no such object, …) answers HTTP 200 with a non-zero code. For every
/// fragment but the operations routes', which answer none.
pub fn business_errors_in_200(doc: &mut OpenApi) {
    for item in doc.paths.paths.values_mut() {
        for operation in operations_mut(item) {
            let Some(RefOr::T(response)) = operation.responses.responses.get_mut("200") else {
                continue;
            };
            let Some(content) = response.content.get_mut("application/json") else {
                continue;
            };
            let named = matches!(&content.schema, Some(RefOr::Ref(reference))
                    if reference.ref_location.starts_with("#/components/schemas/"));
            if !named {
                continue;
            }
            if let Some(success) = content.schema.take() {
                content.schema = Some(
                    AnyOfBuilder::new()
                        .item(success)
                        .item(utoipa::openapi::Ref::from_schema_name(ErrorEnvelope::name()))
                        .into(),
                );
            }
        }
    }
}

/// Every operation of a path item, whatever its method.
pub fn operations_mut(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.options.as_mut(),
        item.head.as_mut(),
        item.patch.as_mut(),
        item.trace.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// Adds what every operation of the merged document shares: the security schemes, the error
/// envelope and the error answers (module docs), and the token headers' descriptions.
pub fn apply_conventions(doc: &mut OpenApi) {
    let components = doc.components.get_or_insert_with(Components::default);
    let bearer = |description: &str| {
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .bearer_format("JWT")
                .description(Some(description))
                .build(),
        )
    };
    components.security_schemes.insert(
        ACCESS_TOKEN.to_owned(),
        bearer(&format!(
            "The access token of a sign-in (response header `{ACCESS_TOKEN_HEADER}`), HS256, \
             30 minutes, bound to the User-Agent it was issued to: 401 (code 401001) when \
             missing, invalid, expired or revoked, 403 (code 403001) from another User-Agent."
        )),
    );
    components.security_schemes.insert(
        REFRESH_TOKEN.to_owned(),
        bearer(&format!(
            "The refresh token of a sign-in (response header `{REFRESH_TOKEN_HEADER}`), 7 \
             days; each refresh rotates it, and reusing an old one revokes the session."
        )),
    );
    components.security_schemes.insert(
        METRICS_TOKEN.to_owned(),
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "`metrics_token` of the configuration, for clients outside \
                     `metrics_allowed_networks`",
                ))
                .build(),
        ),
    );
    let mut schemas = Vec::new();
    <ErrorEnvelope as ToSchema>::schemas(&mut schemas);
    schemas.push((ErrorEnvelope::name().into_owned(), ErrorEnvelope::schema()));
    for (name, schema) in schemas {
        components.schemas.entry(name).or_insert(schema);
    }
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                        ErrorEnvelope::name(),
                    ))))
                    .build(),
            )
            .build()
    };
    let answers = [
        (
            "400",
            "BadRequest",
            error(
                "The body is not valid JSON for the route or too large, or a path or query \
                 parameter does not parse (code 4).",
            ),
        ),
        (
            "401",
            "Unauthorized",
            error("No valid access token: missing, invalid, expired or revoked (code 401001)."),
        ),
        (
            "403",
            "WrongClient",
            error("The token was issued to another User-Agent (code 403001): sign in again."),
        ),
        (
            "500",
            "SystemError",
            error("A failure of ours (code 5); the cause is logged, never sent."),
        ),
        (
            "503",
            "Unavailable",
            error(
                "A dependency is down, or the request ran past `request_timeout` (code 5): \
                 retry.",
            ),
        ),
    ];
    let components = doc.components.get_or_insert_with(Components::default);
    for (_, name, response) in &answers {
        components
            .responses
            .insert((*name).to_owned(), RefOr::T(response.clone()));
    }
    for item in doc.paths.paths.values_mut() {
        for operation in operations_mut(item) {
            let secured = operation.security.as_ref().is_some_and(|requirements| {
                requirements.iter().any(|requirement| {
                    serde_json::to_value(requirement)
                        .ok()
                        .and_then(|value| value.get(ACCESS_TOKEN).cloned())
                        .is_some()
                })
            });
            let takes_input = operation.request_body.is_some()
                || operation
                    .parameters
                    .as_ref()
                    .is_some_and(|parameters| !parameters.is_empty());
            for (status, name, _) in &answers {
                let applies = match *status {
                    "400" => takes_input,
                    "401" | "403" => secured,
                    _ => true,
                };
                if applies && !operation.responses.responses.contains_key(*status) {
                    operation.responses.responses.insert(
                        (*status).to_owned(),
                        RefOr::Ref(utoipa::openapi::Ref::from_response_name(*name)),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeSet;

    use axum::{body::to_bytes, response::IntoResponse};

    use super::*;
    use crate::error::{AppError, Msg, Reply};

    async fn keys_of(response: axum::response::Response) -> BTreeSet<String> {
        let body = to_bytes(response.into_body(), 1 << 16).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        body.as_object().unwrap().keys().cloned().collect()
    }

    fn properties_of(schema: RefOr<Schema>) -> (BTreeSet<String>, BTreeSet<String>) {
        let schema = serde_json::to_value(schema).unwrap();
        let names = |value: &serde_json::Value| -> BTreeSet<String> {
            match value {
                serde_json::Value::Object(map) => map.keys().cloned().collect(),
                serde_json::Value::Array(items) => items
                    .iter()
                    .map(|item| item.as_str().unwrap().to_owned())
                    .collect(),
                _ => BTreeSet::new(),
            }
        };
        (names(&schema["properties"]), names(&schema["required"]))
    }

    #[tokio::test]
    async fn the_envelope_schemas_have_every_field_replies_and_errors_render() {
        let reply = keys_of(Reply(7).into_response()).await;
        let (properties, required) = properties_of(<Envelope<i64> as PartialSchema>::schema());
        assert_eq!(properties, reply);
        assert_eq!(required, reply);
        let error = keys_of(AppError::NotFound(Msg::new("no", "无")).into_response()).await;
        let (properties, required) = properties_of(ErrorEnvelope::schema());
        assert_eq!(properties, error);
        assert_eq!(required, error);
    }

    #[test]
    fn operations_get_the_shared_error_answers_by_what_they_declare() {
        use utoipa::openapi::{
            path::{HttpMethod, OperationBuilder, ParameterBuilder, PathItem},
            security::SecurityRequirement,
            PathsBuilder,
        };
        let item = |operation: OperationBuilder| PathItem::new(HttpMethod::Get, operation);
        let mut doc = utoipa::openapi::OpenApiBuilder::new()
            .paths(
                PathsBuilder::new()
                    .path("/public", item(OperationBuilder::new()))
                    .path(
                        "/secured",
                        item(
                            OperationBuilder::new()
                                .security(SecurityRequirement::new(ACCESS_TOKEN, [""; 0]))
                                .parameter(ParameterBuilder::new().name("id")),
                        ),
                    ),
            )
            .build();
        apply_conventions(&mut doc);
        let statuses = |path: &str| -> Vec<String> {
            let item = doc.paths.paths[path].clone();
            item.get.unwrap().responses.responses.into_keys().collect()
        };
        assert_eq!(statuses("/public"), ["500", "503"]);
        assert_eq!(statuses("/secured"), ["400", "401", "403", "500", "503"]);
        let components = doc.components.unwrap();
        assert!(components.schemas.contains_key("Error"));
        assert!(components.security_schemes.contains_key(ACCESS_TOKEN));
    }

    #[test]
    fn a_named_success_body_may_also_be_a_business_error_and_an_inline_one_stays() {
        use utoipa::openapi::{
            path::{HttpMethod, OperationBuilder, PathItem},
            PathsBuilder,
        };
        let answering = |schema: RefOr<Schema>| {
            let response = ResponseBuilder::new()
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(schema)).build(),
                )
                .build();
            PathItem::new(
                HttpMethod::Get,
                OperationBuilder::new().response("200", response),
            )
        };
        let mut doc = utoipa::openapi::OpenApiBuilder::new()
            .paths(
                PathsBuilder::new()
                    .path(
                        "/named",
                        answering(utoipa::openapi::Ref::from_schema_name("Envelope_i64").into()),
                    )
                    .path("/inline", answering(String::schema())),
            )
            .build();
        business_errors_in_200(&mut doc);
        let schema = |path: &str| {
            let doc = serde_json::to_value(&doc).unwrap();
            doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
                .clone()
        };
        assert_eq!(
            schema("/named"),
            serde_json::json!({"anyOf": [
                {"$ref": "#/components/schemas/Envelope_i64"},
                {"$ref": "#/components/schemas/Error"},
            ]})
        );
        assert_eq!(schema("/inline"), serde_json::json!({"type": "string"}));
    }
}
