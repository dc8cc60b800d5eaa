//! Bodies of the fuzz targets, shared by `fuzz/` and by the tests that replay
//! the committed corpora, so a regression can never land silently.

use crate::log::frame::{decode_frame, decode_header, find_next_frame, HEADER_LEN};
use crate::record;

/// Arbitrary bytes through the segment, frame and record decoders: each
/// either decodes or returns an error, and never panics.
pub fn decode(data: &[u8]) {
    let _ = decode_header(data);
    let _ = record::decode(data);
    let mut at = HEADER_LEN;
    while let Ok(frame) = decode_frame(data, 1, at, 1 << 20) {
        if let Some(payload) = data.get(frame.payload_start() as usize..frame.end() as usize) {
            let _ = record::decode(payload);
        }
        at = frame.end();
    }
    let _ = find_next_frame(data, 1, at, 1 << 20);
}
