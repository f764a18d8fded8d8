//! What runs on an operator's laptop or in the tests, never in Envoy: the access log read
//! ([`access_log`]), summed up ([`report`], `toolsift report`) and read into the fleet's
//! calibration ([`calibrate`], `toolsift calibrate`), and the retrieval evaluation ([`eval`],
//! `toolsift eval` and the quality floor). Native only: `lib.rs` leaves this folder out of the
//! `.wasm` with one `cfg`.

pub mod access_log;
pub mod calibrate;
pub mod eval;
pub mod report;
