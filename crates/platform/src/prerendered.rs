//! JSON answers whose large, constant part is serialised and gzip-compressed once, and whose
//! small, changing part is appended per request.
//!
//! An article's reader view is a few kilobytes of title, content and author that change only
//! when the article is republished, followed by counters and the reader's flags that change all
//! the time. Serialising and gzipping the whole answer per request (a fresh compressor state,
//! zeroed, per response) was a large share of the CPU time of a cached read (docs/
//! PERFORMANCE.md → HTTP → Browse, round two). A [`Prerendered`] keeps the constant prefix
//! twice — as JSON bytes and as raw deflate blocks ended by a sync flush (so they end on a byte
//! boundary, not marked final) — plus the prefix's CRC-32. [`Prerendered::respond`] then
//! answers with
//!
//! - plain: `prefix ‖ tail`;
//! - gzip: the gzip header ‖ the cached deflate blocks ‖ the tail as one final *stored* block ‖
//!   the CRC-32 of `prefix ‖ tail` (the prefix's CRC continued over the tail) and its length —
//!   a valid gzip stream (RFC 1951 allows any sequence of blocks; a stored block references
//!   nothing before it), with no compressor at all on the request path. The tail's few hundred
//!   bytes go uncompressed; that costs 5 bytes of block header over sending them stored.

use std::cell::RefCell;

use axum::{
    body::Bytes,
    http::{header, HeaderValue},
    response::{IntoResponse, Response},
};
use flate2::{Compress, Compression, FlushCompress, Status};

/// Largest payload of one stored deflate block.
const STORED_BLOCK_MAX: usize = u16::MAX as usize;
/// gzip member header: magic, deflate, no flags, no mtime, no extra flags, OS unknown.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// A constant JSON prefix, plain and pre-compressed (module docs); cheap to clone.
#[derive(Debug, Clone)]
pub struct Prerendered {
    plain: Bytes,
    deflated: Bytes,
    /// CRC-32 of `plain`, to be continued over a tail.
    crc: crc32fast::Hasher,
}

impl Prerendered {
    /// Compresses `prefix` at level 1 (as the compression layer does) into deflate blocks that
    /// a tail can follow.
    pub fn new(prefix: Vec<u8>) -> anyhow::Result<Self> {
        let deflated = COMPRESSOR.with(|compressor| {
            let mut compressor = compressor
                .try_borrow_mut()
                .map_err(|_| anyhow::anyhow!("Prerendered::new re-entered"))?;
            let compressor =
                compressor.get_or_insert_with(|| Compress::new(Compression::fast(), false));
            compressor.reset();
            deflate_with_sync_flush(compressor, &prefix)
        })?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&prefix);
        Ok(Self {
            plain: Bytes::from(prefix),
            deflated: Bytes::from(deflated),
            crc,
        })
    }

    /// Bytes held (for a cache's weigher).
    pub fn size(&self) -> usize {
        self.plain.len() + self.deflated.len()
    }

    /// The prefix followed by `tail`, gzipped if `gzip` (module docs).
    pub fn body(&self, tail: &[u8], gzip: bool) -> Bytes {
        if !gzip {
            let mut body = Vec::with_capacity(self.plain.len() + tail.len());
            body.extend_from_slice(&self.plain);
            body.extend_from_slice(tail);
            return Bytes::from(body);
        }
        let blocks = tail.len().div_ceil(STORED_BLOCK_MAX).max(1);
        let mut body = Vec::with_capacity(
            GZIP_HEADER.len() + self.deflated.len() + blocks * 5 + tail.len() + 8,
        );
        body.extend_from_slice(&GZIP_HEADER);
        body.extend_from_slice(&self.deflated);
        let mut chunks = tail.chunks(STORED_BLOCK_MAX).peekable();
        if chunks.peek().is_none() {
            stored_block(&mut body, &[], true);
        }
        while let Some(chunk) = chunks.next() {
            stored_block(&mut body, chunk, chunks.peek().is_none());
        }
        let mut crc = self.crc.clone();
        crc.update(tail);
        body.extend_from_slice(&crc.finalize().to_le_bytes());
        // ISIZE is the length modulo 2^32 (RFC 1952): the truncation is the format's.
        let length = (self.plain.len() + tail.len()) as u32;
        body.extend_from_slice(&length.to_le_bytes());
        Bytes::from(body)
    }

    /// A JSON answer of the prefix and `tail`, gzipped if `gzip` (with `Content-Encoding`, so
    /// the compression layer leaves it alone); always `Vary: accept-encoding`.
    pub fn respond(&self, tail: &[u8], gzip: bool) -> Response {
        let mut response = (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                ),
                (header::VARY, HeaderValue::from_static("accept-encoding")),
            ],
            self.body(tail, gzip),
        )
            .into_response();
        if gzip {
            response
                .headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        response
    }
}

thread_local! {
    /// This thread's compressor, reset for each prefix: a new one allocates and zeroes a few
    /// hundred kilobytes of state, which cost more than compressing a short article.
    static COMPRESSOR: RefCell<Option<Compress>> = const { RefCell::new(None) };
}

/// `input` as raw deflate blocks ended by a sync flush (byte-aligned, not final).
fn deflate_with_sync_flush(compressor: &mut Compress, input: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut deflated = Vec::with_capacity(input.len() / 2 + 64);
    loop {
        let consumed = usize::try_from(compressor.total_in())?;
        let status =
            compressor.compress_vec(&input[consumed..], &mut deflated, FlushCompress::Sync)?;
        // Done once all input is in and the flush left room to spare (zlib's rule for a
        // complete flush).
        let done = usize::try_from(compressor.total_in())? == input.len()
            && deflated.len() < deflated.capacity();
        if done || status == Status::StreamEnd {
            return Ok(deflated);
        }
        deflated.reserve(deflated.capacity().max(64));
    }
}

/// Appends a stored block (byte-aligned: the deflate stream before it ended with a sync flush
/// or a stored block).
fn stored_block(out: &mut Vec<u8>, payload: &[u8], last: bool) {
    let len = u16::try_from(payload.len()).unwrap_or(u16::MAX);
    out.push(u8::from(last)); // BFINAL, BTYPE = 00 (stored), padding to the byte
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(&payload[..usize::from(len)]);
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn gunzip(body: &[u8]) -> Vec<u8> {
        // `GzDecoder` checks the CRC-32 and the length in the trailer.
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(body)
            .read_to_end(&mut plain)
            .unwrap();
        plain
    }

    #[test]
    fn both_forms_are_the_prefix_and_the_tail() {
        let prefix: Vec<u8> = (0..20_000)
            .flat_map(|i| format!("word{} ", i % 97).into_bytes())
            .collect();
        let rendered = Prerendered::new(prefix.clone()).unwrap();
        assert!(
            rendered.deflated.len() < prefix.len() / 3,
            "{}",
            rendered.deflated.len()
        );
        for tail in [
            &b""[..],
            &b"\"readCnt\":7}}"[..],
            &vec![b'x'; STORED_BLOCK_MAX][..],
            &vec![b'y'; 2 * STORED_BLOCK_MAX + 3][..],
        ] {
            let expected = [prefix.as_slice(), tail].concat();
            assert_eq!(rendered.body(tail, false), expected);
            let gzipped = rendered.body(tail, true);
            assert_eq!(gunzip(&gzipped), expected, "tail of {} bytes", tail.len());
        }
    }

    #[test]
    fn the_reused_compressor_starts_afresh_for_each_prefix() {
        let first = Prerendered::new(b"first prefix, first prefix".to_vec()).unwrap();
        let second = Prerendered::new(b"second prefix".to_vec()).unwrap();
        assert_eq!(
            gunzip(&first.body(b"!", true)),
            b"first prefix, first prefix!"
        );
        assert_eq!(gunzip(&second.body(b"?", true)), b"second prefix?");
    }

    #[test]
    fn an_empty_or_incompressible_prefix_still_makes_valid_gzip() {
        let noise: Vec<u8> = (0u32..100_000)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for prefix in [Vec::new(), noise] {
            let rendered = Prerendered::new(prefix.clone()).unwrap();
            let body = rendered.body(b"{}", true);
            assert_eq!(gunzip(&body), [prefix.as_slice(), b"{}"].concat());
        }
    }

    #[test]
    fn the_gzip_answer_says_so() {
        let rendered = Prerendered::new(b"{\"a\":".to_vec()).unwrap();
        let response = rendered.respond(b"1}", true);
        assert_eq!(response.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(response.headers()[header::VARY], "accept-encoding");
        let response = rendered.respond(b"1}", false);
        assert!(response.headers().get(header::CONTENT_ENCODING).is_none());
    }
}
