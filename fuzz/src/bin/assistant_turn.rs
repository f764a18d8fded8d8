#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| toolsift_fuzz::assistant_turn(data));
