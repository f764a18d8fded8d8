#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| toolsift_fuzz::question_reading(data));
