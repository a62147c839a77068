//! Fuzz target: the `serving_log` importer on arbitrary bytes (never a panic, bounded memory).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| memlens_fuzz::import_as(memlens_api::Format::ServingLog, data));
