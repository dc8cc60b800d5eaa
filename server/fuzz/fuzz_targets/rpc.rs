#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ctxlog_server::fuzzing::rpc(data));
