//! The OpenAPI document (`webook::openapi`): the committed `docs/openapi.json` is the document
//! the handlers describe, the running app serves it at `GET /openapi.json`, and every operation
//! it describes is routed by the running app — a request to it never gets the answer of an
//! unknown route (404 "no such route") or of an unknown method (405).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::PathBuf;

use platform::{config::DatabaseKind, testing::TestDb};
use reqwest::{header, Method, StatusCode};
use serde_json::Value;
use webook::{schema::MIGRATIONS, testing::TestApp};

/// Set to `1` to rewrite `docs/openapi.json` instead of comparing it.
const UPDATE: &str = "WEBOOK_UPDATE_SNAPSHOTS";

fn snapshot_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json")
}

fn generated() -> String {
    webook::openapi::render(&webook::app::openapi().unwrap()).unwrap()
}

#[test]
fn the_committed_document_is_the_one_the_handlers_describe() {
    let generated = generated();
    let path = snapshot_path();
    if std::env::var(UPDATE).is_ok_and(|value| value == "1") {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(old, new)| old != new)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "docs/openapi.json is not the document the handlers describe (first difference at \
             line {}: committed {:?}, generated {:?}).\nRegenerate it with `cargo run -- openapi \
             > docs/openapi.json` (or run this test with {UPDATE}=1) and review the diff.",
            line + 1,
            committed.lines().nth(line).unwrap_or("<end>"),
            generated.lines().nth(line).unwrap_or("<end>"),
        );
    }
}

/// The console's version and one of its files, as its page names them
/// (`/assets/<version>/<file>`).
async fn an_asset(app: &TestApp) -> (String, String) {
    let page = app
        .client
        .get(app.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let at = page.find("/assets/").expect("the page names its assets");
    let rest = &page[at + "/assets/".len()..];
    let end = rest.find(['"', '\'']).unwrap();
    let (version, file) = rest[..end].split_once('/').unwrap();
    (version.to_owned(), file.to_owned())
}

#[tokio::test]
async fn every_documented_operation_is_routed_and_the_document_is_served() {
    let db = TestDb::new(DatabaseKind::Sqlite, &MIGRATIONS).await;
    // `/debug/*` is documented: served with `debug_endpoints` on.
    let app = TestApp::spawn_with(db, |config| config.debug_endpoints = true).await;

    let served = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(
        served.headers()[header::CONTENT_TYPE].to_str().unwrap(),
        "application/json"
    );
    let document: Value = serde_json::from_str(&served.text().await.unwrap()).unwrap();
    assert_eq!(document, webook::app::openapi().unwrap());
    assert_eq!(document["openapi"], "3.1.0");

    let (version, file) = an_asset(&app).await;
    let operations = webook::openapi::operations(&document);
    assert!(operations.len() > 60, "{operations:?}");
    let mut unrouted = Vec::new();
    for (method, path) in &operations {
        let concrete: Vec<String> = path
            .split('/')
            .map(|segment| match segment {
                "{version}" => version.clone(),
                "{path}" => file.clone(),
                param if param.starts_with('{') => "1".to_owned(),
                fixed => fixed.to_owned(),
            })
            .collect();
        let url = app.url(&concrete.join("/"));
        let response = app
            .client
            .request(Method::from_bytes(method.as_bytes()).unwrap(), &url)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        let no_route = status == StatusCode::NOT_FOUND && body.contains("no such route");
        if no_route || status == StatusCode::METHOD_NOT_ALLOWED {
            unrouted.push(format!("{method} {path} ({url}): {status} {body}"));
        }
    }
    assert!(
        unrouted.is_empty(),
        "documented but not routed: {unrouted:#?}"
    );

    // And the check would see a route that is not there.
    let missing = app
        .client
        .get(app.url("/articles/nosuch/1"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert!(missing.text().await.unwrap().contains("no such route"));
}
