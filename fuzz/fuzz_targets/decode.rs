//! Arbitrary bytes fed to the segment, frame and record decoders never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ctxlog::fuzzing::decode(data));
