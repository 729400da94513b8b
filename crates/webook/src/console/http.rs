//! The console's routes: the page at `/` (the one HTML document; pages are `#/…` fragments, so
//! no console path can shadow an API route), its files at `/assets/<version>/<path>`, the QR
//! code of a payment URL (`/console/qr.svg`) and the admins' instance overview
//! (`GET /admin/instances`).
//!
//! Every console answer carries a strict Content-Security-Policy (scripts, styles, images and
//! requests from this origin only; no inline script, no framing), is sent gzipped from the copy
//! made at start-up when the client accepts it, and answers `If-None-Match` with 304.

use platform::caller::{Admin, AdminArea};
use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{
    assets::{Asset, Bundle},
    instances::{InstanceRegistry, InstanceView},
};
use platform::{
    error::{ApiPath, ApiQuery, ApiResult, AppError, Msg, Reply},
    http::{accepts_gzip, etag_matches},
    openapi::Envelope,
};

/// What the console's pages may load and call: this origin only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     manifest-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
/// Versioned files never change under their path.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// The page is revalidated on every load (a cheap 304), so a new version is seen at once.
const REVALIDATE: &str = "no-cache";
/// Longest text a QR code is made of (a WeChat Pay code URL is under 64 characters).
const MAX_QR_TEXT: usize = 512;

/// What the console's handlers reach.
pub struct ConsoleRoutes {
    /// The files.
    pub bundle: Bundle,
    /// Instances and their readiness.
    pub instances: InstanceRegistry,
}

/// What these routes guard: The instances and their readiness (`/admin/instances`); a non-admin's refusal names it.
const ADMIN_AREA: AdminArea = AdminArea::new(
    "only admins may see the instances",
    "只有管理员可以查看实例",
);

/// The routes.
pub fn router(routes: ConsoleRoutes) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/{version}/{*path}", get(file))
        .route("/console/qr.svg", get(qr))
        .route("/admin/instances", get(instances))
        .with_state(Arc::new(routes))
        .layer(axum::Extension(ADMIN_AREA))
}

/// The web console's page (its pages are `#/…` fragments of this one document).
#[utoipa::path(
    get,
    path = "/",
    responses(
        (status = 200, description = "The page, under a strict Content-Security-Policy; \
         `Cache-Control: no-cache`, an `ETag`, gzipped for clients that accept it.",
         content_type = "text/html", body = String),
        (status = 304, description = "`If-None-Match` named its ETag."),
    )
)]
async fn index(State(routes): State<Arc<ConsoleRoutes>>, request: Request) -> Response {
    let etag = format!("\"{}\"", routes.bundle.version);
    send(&routes.bundle.index, &etag, REVALIDATE, request.headers())
}

/// A file of the console under the version the page names (a hash of every file).
#[utoipa::path(
    get,
    path = "/assets/{version}/{path}",
    params(
        ("version" = String, Path, description = "The version the page names."),
        ("path" = String, Path, description = "The file, e.g. `app.js` or `pages/home.js`."),
    ),
    responses(
        (status = 200, description = "The file (`Cache-Control: public, max-age=31536000, \
         immutable`), gzipped for clients that accept it.", content_type = "*/*"),
        (status = 304, description = "`If-None-Match` named its ETag."),
        (status = 404, description = "Another version, or no such file (code 404001).",
         body = platform::openapi::ErrorEnvelope),
    )
)]
async fn file(
    State(routes): State<Arc<ConsoleRoutes>>,
    ApiPath((version, path)): ApiPath<(String, String)>,
    request: Request,
) -> Result<Response, AppError> {
    // Another version's file is not served as this one: a page of an older version asks for
    // files that may no longer fit it; it reloads instead.
    let asset = (version == routes.bundle.version)
        .then(|| routes.bundle.files.get(&path))
        .flatten()
        .ok_or(AppError::NoRoute)?;
    let etag = format!("\"{version}\"");
    Ok(send(asset, &etag, IMMUTABLE, request.headers()))
}

/// `asset` with its caching headers, gzipped when the client accepts it, or 304.
fn send(asset: &Asset, etag: &str, cache_control: &'static str, request: &HeaderMap) -> Response {
    let gzip = asset.gzip.as_ref().filter(|_| accepts_gzip(request));
    // The two representations have ETags of their own.
    let etag = match gzip {
        Some(_) => format!("{}-gzip\"", etag.trim_end_matches('"')),
        None => etag.to_owned(),
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    super::ConsoleShell::security_headers(&mut headers);
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .is_some_and(|wanted| etag_matches(wanted.as_bytes(), etag.as_bytes()));
    if fresh {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    let body = match gzip {
        Some(gzip) => {
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            gzip.clone()
        }
        None => asset.bytes.clone(),
    };
    (headers, body).into_response()
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct QrQuery {
    /// 1–512 bytes (a reward's `codeURL`).
    text: String,
}

/// `GET /console/qr.svg?text=` **(webook)**: the QR code of `text` (a payment's `codeURL`) as
/// SVG, for the reward dialog; the page shows it with `<img>` (allowed by `img-src 'self'`).
#[utoipa::path(
    get,
    path = "/console/qr.svg",
    params(QrQuery),
    responses((status = 200, description = "The QR code (SVG); an envelope with code 4 for \
               an empty or too long `text`.", content_type = "image/svg+xml", body = String))
)]
async fn qr(ApiQuery(query): ApiQuery<QrQuery>) -> Result<Response, AppError> {
    if query.text.is_empty() || query.text.len() > MAX_QR_TEXT {
        return Err(AppError::InvalidInput(Msg::field(
            "text",
            format!("must be 1-{MAX_QR_TEXT} bytes"),
            format!("须为 1-{MAX_QR_TEXT} 字节"),
        )));
    }
    let code = qrcode::QrCode::with_error_correction_level(&query.text, qrcode::EcLevel::M)
        .map_err(|err| {
            AppError::InvalidInput(Msg::field(
                "text",
                err.to_string(),
                format!("无法编码：{err}"),
            ))
        })?;
    let svg = code
        .render::<qrcode::render::svg::Color<'_>>()
        .min_dimensions(200, 200)
        .quiet_zone(true)
        .build();
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "private, max-age=3600"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        ],
        svg,
    )
        .into_response())
}

/// Every instance that reported within the last minute.
#[derive(Serialize, ToSchema)]
struct InstancesView {
    /// The instance that answered.
    #[serde(rename = "self")]
    this: String,
    instances: Vec<InstanceView>,
}

/// `GET /admin/instances` **(webook, admins)**: every instance that reported recently, with the
/// readiness it last saw.
#[utoipa::path(
    get,
    path = "/admin/instances",
    security(("access_token" = [])),
    responses((status = 200, description = "The instances; 403002 for anyone but an admin.",
               body = Envelope<InstancesView>))
)]
async fn instances(
    _admin: Admin,
    State(routes): State<Arc<ConsoleRoutes>>,
) -> ApiResult<InstancesView> {
    Ok(Reply(InstancesView {
        this: routes.instances.id().to_owned(),
        instances: routes.instances.recent().await?,
    }))
}

/// The console's routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(index, file, qr, instances))]
pub struct ConsoleApi;
