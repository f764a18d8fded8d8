//! Hybrid ranking's two host dependencies: the vector cache over proxy-wasm shared data (one
//! store for every worker of the VM) and the embeddings call through an Envoy cluster.

use crate::config::Embeddings;
use crate::embeddings::{SharedBytes, request_body};
use proxy_wasm::hostcalls;
use proxy_wasm::types::Status;
use std::time::Duration;

/// proxy-wasm shared data. Any host error reads as a miss or a refused write: the vector is
/// then fetched again, and no request fails for it.
pub struct SharedData;

impl SharedBytes for SharedData {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hostcalls::get_shared_data(key).unwrap_or((None, None))
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        match hostcalls::set_shared_data(key, Some(value), cas) {
            Ok(()) => true,
            Err(Status::CasMismatch) => false,
            Err(status) => {
                log::debug!("set_shared_data failed: {status:?}");
                false
            }
        }
    }
}

/// Sends one embeddings request; the answer comes to the calling context's
/// `on_http_call_response`, or Envoy answers 504 after `timeout_ms`.
pub fn dispatch(e: &Embeddings, inputs: &[&str]) -> Result<u32, Status> {
    let body = request_body(&e.model, inputs, e.dimensions);
    let mut headers: Vec<(&str, &str)> = vec![
        (":method", "POST"),
        (":path", &e.path),
        (":authority", e.authority()),
        ("content-type", "application/json"),
    ];
    headers.extend(e.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    hostcalls::dispatch_http_call(
        &e.cluster,
        headers,
        Some(body.as_bytes()),
        Vec::new(),
        Duration::from_millis(e.timeout_ms as u64),
    )
}
