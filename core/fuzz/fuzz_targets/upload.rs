//! Fuzz target: an upload's query string and multipart body, parsed as the server does.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| memlens_fuzz::upload(data));
