//! Fuzz target: the `jax_device_memory_profile` importer on arbitrary bytes (never a panic, bounded memory).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| memlens_fuzz::import_as(memlens_api::Format::JaxDeviceMemoryProfile, data));
