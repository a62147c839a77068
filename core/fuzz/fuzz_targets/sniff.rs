//! Fuzz target: the format guesser and whichever importer it picks, on arbitrary bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| memlens_fuzz::sniff_and_import(data));
