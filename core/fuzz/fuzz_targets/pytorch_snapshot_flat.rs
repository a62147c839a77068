//! Fuzz target, differential: a pickle's trace entries read flat give the columns (or the
//! error) the general machine gives.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| memlens_fuzz::flat_reads_match_the_machine(data));
