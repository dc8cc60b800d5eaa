//! Fuzz target `decode`: see `ctxlog::fuzzing::decode` for the property it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ctxlog::fuzzing::decode(data));
