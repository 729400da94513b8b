//! The console's files: read once at start-up into a [`Bundle`] — each file's bytes, its
//! gzipped copy and content type — under one version, a hash of every file's path and content.
//!
//! Files are served at `/assets/<version>/<path>` with a year's `immutable` cache lifetime: a
//! changed file changes the version, so every path changes with it (cache busting without
//! renaming files, and relative `import`s between modules keep working). `index.html` is the
//! one file served at `/`; its `{{assets}}` placeholders become `/assets/<version>`.
//!
//! Release builds embed the folder in the binary ([`rust_embed`]); debug builds read it from
//! the source tree at start-up, so editing a page needs a restart, not a rebuild.

use std::{collections::HashMap, io::Write};

use anyhow::Context;
use axum::body::Bytes;
use sha2::{Digest, Sha256};

/// The folder, embedded.
#[derive(rust_embed::Embed)]
#[folder = "src/console/assets/"]
#[exclude = "*.md"]
struct Files;

/// The placeholder in `index.html` replaced by the assets' path prefix.
const ASSETS_PLACEHOLDER: &str = "{{assets}}";
/// Files smaller than this are sent as they are: gzip would save less than its framing.
const GZIP_MIN_BYTES: usize = 256;

/// One file, ready to send.
#[derive(Debug, Clone)]
pub struct Asset {
    /// Its bytes.
    pub bytes: Bytes,
    /// The same bytes gzipped (best compression, done once), when that is smaller.
    pub gzip: Option<Bytes>,
    /// `Content-Type`.
    pub content_type: &'static str,
}

/// Every file of the console under one version.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// Hex digest (16 characters) of every path and content: the path segment of the files.
    pub version: String,
    /// `index.html` with its placeholders filled in.
    pub index: Asset,
    /// The other files by path relative to the folder (`app.js`, `pages/home.js`).
    pub files: HashMap<String, Asset>,
}

impl Bundle {
    /// Reads, hashes and compresses every file (CPU work, once, at start-up).
    pub fn load() -> anyhow::Result<Self> {
        let mut paths: Vec<String> = Files::iter().map(|path| path.into_owned()).collect();
        paths.sort();
        let mut digest = Sha256::new();
        let mut contents = Vec::with_capacity(paths.len());
        for path in paths {
            let file =
                Files::get(&path).with_context(|| format!("console file {path} vanished"))?;
            digest.update(path.as_bytes());
            digest.update([0]);
            digest.update(&file.data);
            digest.update([0]);
            contents.push((path, file.data.into_owned()));
        }
        let version = hex::encode(&digest.finalize()[..8]);
        let prefix = format!("/assets/{version}");
        let mut index = None;
        let mut files = HashMap::with_capacity(contents.len());
        for (path, bytes) in contents {
            if path == "index.html" {
                let text = String::from_utf8(bytes).context("index.html is not UTF-8")?;
                let page = text.replace(ASSETS_PLACEHOLDER, &prefix).into_bytes();
                index = Some(asset(&path, page)?);
            } else {
                let asset = asset(&path, bytes)?;
                files.insert(path, asset);
            }
        }
        Ok(Self {
            version,
            index: index.context("the console has no index.html")?,
            files,
        })
    }
}

fn asset(path: &str, bytes: Vec<u8>) -> anyhow::Result<Asset> {
    let content_type = content_type(path);
    let gzip = if compressible(content_type) && bytes.len() >= GZIP_MIN_BYTES {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&bytes)?;
        let compressed = encoder.finish()?;
        (compressed.len() < bytes.len()).then(|| Bytes::from(compressed))
    } else {
        None
    };
    Ok(Asset {
        bytes: Bytes::from(bytes),
        gzip,
        content_type,
    })
}

/// The `Content-Type` of a console file, by extension.
fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, extension)| extension) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

fn compressible(content_type: &str) -> bool {
    content_type.starts_with("text/")
        || content_type == "image/svg+xml"
        || content_type == "application/json"
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_has_an_index_pointing_at_its_versioned_files() {
        let bundle = Bundle::load().unwrap();
        assert_eq!(bundle.version.len(), 16);
        let index = std::str::from_utf8(&bundle.index.bytes).unwrap();
        assert!(!index.contains(ASSETS_PLACEHOLDER));
        let prefix = format!("/assets/{}/", bundle.version);
        let referenced: Vec<&str> = index
            .split(&prefix)
            .skip(1)
            .map(|rest| rest.split('"').next().unwrap())
            .collect();
        assert!(referenced.contains(&"app.js"), "{index}");
        for path in referenced {
            assert!(bundle.files.contains_key(path), "index names {path}");
        }
    }

    #[test]
    fn text_files_are_gzipped_once_and_decompress_to_themselves() {
        let bundle = Bundle::load().unwrap();
        let app = &bundle.files["app.js"];
        assert_eq!(app.content_type, "text/javascript; charset=utf-8");
        let gzip = app.gzip.as_ref().expect("app.js is worth compressing");
        let mut plain = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gzip[..]), &mut plain)
            .unwrap();
        assert_eq!(plain, app.bytes);
    }

    #[test]
    fn no_file_runs_inline_script_or_inline_style() {
        // The policy (`script-src 'self'; style-src 'self'`) would refuse them in the browser;
        // this finds them before a page silently breaks. (Requests to other origins are refused
        // by `connect-src`/`img-src 'self'`, and the browser tests fail on any violation.)
        for path in Files::iter() {
            let file = Files::get(&path).unwrap();
            let Ok(text) = std::str::from_utf8(&file.data) else {
                continue;
            };
            if path.ends_with(".html") {
                assert!(!text.contains("<script>"), "{path}: inline <script>");
                assert!(!text.contains(" style=\""), "{path}: style attribute");
                assert!(!text.contains(" onclick="), "{path}: inline handler");
            }
            if path.ends_with(".js") {
                assert!(!text.contains("eval("), "{path}: eval");
                assert!(!text.contains("new Function"), "{path}: new Function");
            }
        }
    }
}
