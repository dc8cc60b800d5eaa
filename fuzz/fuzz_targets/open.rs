//! Fuzz target `open`: see `ctxlog::fuzzing::open` for the property it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ctxlog::fuzzing::open(data));
