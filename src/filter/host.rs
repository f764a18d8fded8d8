//! The proxy-wasm ABI, called directly: the filter's one module with `unsafe`.
//!
//! Why: proxy-wasm 0.2.5 (the newest on crates.io) panics inside its own `hostcalls`, `Result`
//! forms included. Header getters decode with `String::from_utf8(..).unwrap()`, so one
//! non-UTF-8 byte in a client's header traps the VM; most calls `panic!` on a host status they
//! do not expect. A trap fails the request, reloads the VM and loses every cache. So every host
//! call the filter makes goes through here: bytes in and out, and every status other than `Ok`
//! an `Err`, never a panic.
//!
//! Two host calls stay with the SDK, and why that is safe:
//! - `dispatch_http_call` ([`dispatch`]): the SDK's dispatcher must register the call's token to
//!   route the answer to the right context (an unknown token panics in the dispatcher). Envoy's
//!   `http_call` answers `Ok`, `BadArgument` (unknown cluster, missing pseudo-headers) or
//!   `InternalFailure`, which the SDK turns into `Err`; `InvalidMemoryAccess` needs a bad pointer,
//!   which safe Rust slices never are. Header values are `&str`, built by the filter.
//! - The dispatcher's own `set_effective_context(..).unwrap()` before each callback, which the
//!   filter cannot reach.
//!
//! The safety argument for every `unsafe` block is the same: the pointers passed are those of
//! live Rust slices and locals for the duration of the call, and memory the host returns was
//! allocated by the SDK's `proxy_on_memory_allocate` (a boxed `[u8]` of exactly the returned
//! size, alignment 1), which [`owned`] takes back as a `Vec<u8>` of that length and capacity.

#![allow(unsafe_code)]

use crate::pairs::{self, HeaderMap};
use std::ptr::{null, null_mut};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// The ABI's statuses are `u32` here, not the SDK's `Status` enum: a value outside an enum's
// variants would be undefined behaviour, and a host may return any value.
#[link(wasm_import_module = "env")]
unsafe extern "C" {
    fn proxy_log(level: u32, data: *const u8, size: usize) -> u32;
    fn proxy_get_current_time_nanoseconds(out: *mut u64) -> u32;
    fn proxy_set_tick_period_milliseconds(period: u32) -> u32;
    fn proxy_get_buffer_bytes(
        buffer: u32,
        start: usize,
        max_size: usize,
        out_data: *mut *mut u8,
        out_size: *mut usize,
    ) -> u32;
    fn proxy_set_buffer_bytes(
        buffer: u32,
        start: usize,
        size: usize,
        data: *const u8,
        data_size: usize,
    ) -> u32;
    fn proxy_get_header_map_pairs(map: u32, out_data: *mut *mut u8, out_size: *mut usize) -> u32;
    fn proxy_get_header_map_value(
        map: u32,
        key: *const u8,
        key_size: usize,
        out_data: *mut *mut u8,
        out_size: *mut usize,
    ) -> u32;
    fn proxy_replace_header_map_value(
        map: u32,
        key: *const u8,
        key_size: usize,
        value: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_add_header_map_value(
        map: u32,
        key: *const u8,
        key_size: usize,
        value: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_remove_header_map_value(map: u32, key: *const u8, key_size: usize) -> u32;
    fn proxy_get_property(
        path: *const u8,
        path_size: usize,
        out_data: *mut *mut u8,
        out_size: *mut usize,
    ) -> u32;
    fn proxy_set_property(
        path: *const u8,
        path_size: usize,
        value: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_get_shared_data(
        key: *const u8,
        key_size: usize,
        out_data: *mut *mut u8,
        out_size: *mut usize,
        out_cas: *mut u32,
    ) -> u32;
    fn proxy_set_shared_data(
        key: *const u8,
        key_size: usize,
        value: *const u8,
        value_size: usize,
        cas: u32,
    ) -> u32;
    fn proxy_continue_stream(stream: u32) -> u32;
    fn proxy_send_local_response(
        status: u32,
        details: *const u8,
        details_size: usize,
        body: *const u8,
        body_size: usize,
        headers: *const u8,
        headers_size: usize,
        grpc_status: i32,
    ) -> u32;
    fn proxy_define_metric(kind: u32, name: *const u8, name_size: usize, out_id: *mut u32) -> u32;
    fn proxy_increment_metric(id: u32, offset: i64) -> u32;
    fn proxy_record_metric(id: u32, value: u64) -> u32;
    fn proxy_set_effective_context(context: u32) -> u32;
}

/// A host status other than `Ok`.
pub use crate::lifecycle::proxy::Status as HostError;

pub type HostResult<T> = Result<T, HostError>;

fn status(code: u32) -> HostResult<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(HostError(code))
    }
}

/// Takes back memory the host returned (see the module comment).
///
/// # Safety
/// `data` must be null, or the pointer the host wrote after allocating `size` bytes through
/// `proxy_on_memory_allocate`, not yet taken back.
unsafe fn owned(data: *mut u8, size: usize) -> Vec<u8> {
    if data.is_null() {
        return Vec::new();
    }
    // SAFETY: see above; the SDK's allocator gives exactly `size` bytes, alignment 1.
    unsafe { Vec::from_raw_parts(data, size, size) }
}

/// The header maps the filter reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Headers {
    Request = 0,
    Response = 2,
    CallResponse = 6,
}

/// The buffers the filter reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Buffer {
    RequestBody = 0,
    ResponseBody = 1,
    CallResponseBody = 4,
    PluginConfiguration = 7,
}

/// The two directions of an HTTP stream, for [`resume`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Stream {
    Request = 0,
    Response = 1,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum MetricKind {
    Counter = 0,
    Gauge = 1,
    Histogram = 2,
}

/// The value of header `name`, as bytes; `None` when absent or when the map cannot be read.
pub fn header(map: Headers, name: &str) -> Option<Vec<u8>> {
    let (mut data, mut size) = (null_mut(), 0);
    // SAFETY: `name` is live; the out-pointers are locals (module comment).
    let code = unsafe {
        proxy_get_header_map_value(map as u32, name.as_ptr(), name.len(), &mut data, &mut size)
    };
    // SAFETY: the host wrote `data`/`size` (or left them null/0).
    let value = unsafe { owned(data, size) };
    (code == 0).then_some(value)
}

/// Every header of `map`, as bytes, read in place; empty when the map cannot be read.
pub fn headers(map: Headers) -> HeaderMap {
    let (mut data, mut size) = (null_mut(), 0);
    // SAFETY: the out-pointers are locals.
    let code = unsafe { proxy_get_header_map_pairs(map as u32, &mut data, &mut size) };
    // SAFETY: the host wrote `data`/`size` (or left them null/0).
    let bytes = unsafe { owned(data, size) };
    if code != 0 {
        return HeaderMap::default();
    }
    HeaderMap::new(bytes)
}

/// Sets header `name` to `value`, replacing any value it had.
pub fn set_header(map: Headers, name: &str, value: &[u8]) -> HostResult<()> {
    // SAFETY: both slices are live for the call.
    status(unsafe {
        proxy_replace_header_map_value(
            map as u32,
            name.as_ptr(),
            name.len(),
            value.as_ptr(),
            value.len(),
        )
    })
}

/// Adds a value to header `name` (a second line when it is present).
pub fn add_header(map: Headers, name: &str, value: &[u8]) -> HostResult<()> {
    // SAFETY: both slices are live for the call.
    status(unsafe {
        proxy_add_header_map_value(
            map as u32,
            name.as_ptr(),
            name.len(),
            value.as_ptr(),
            value.len(),
        )
    })
}

pub fn remove_header(map: Headers, name: &str) -> HostResult<()> {
    // SAFETY: `name` is live for the call.
    status(unsafe { proxy_remove_header_map_value(map as u32, name.as_ptr(), name.len()) })
}

/// `max_size` bytes of `buffer` from `start` (fewer when it is shorter); empty when absent.
pub fn buffer(buffer: Buffer, start: usize, max_size: usize) -> HostResult<Vec<u8>> {
    let (mut data, mut size) = (null_mut(), 0);
    // SAFETY: the out-pointers are locals.
    let code =
        unsafe { proxy_get_buffer_bytes(buffer as u32, start, max_size, &mut data, &mut size) };
    // SAFETY: the host wrote `data`/`size` (or left them null/0).
    let bytes = unsafe { owned(data, size) };
    match code {
        0 => Ok(bytes),
        // NotFound: no such buffer (no body), which reads as empty.
        1 => Ok(Vec::new()),
        other => Err(HostError(other)),
    }
}

/// Replaces `size` bytes of `buffer` from `start` with `bytes`. Envoy accepts `start` 0 (the
/// first `size` bytes are replaced) or `start` at the end (appended); anything else is
/// `BadArgument`.
pub fn set_buffer(buffer: Buffer, start: usize, size: usize, bytes: &[u8]) -> HostResult<()> {
    // SAFETY: `bytes` is live for the call.
    status(unsafe {
        proxy_set_buffer_bytes(buffer as u32, start, size, bytes.as_ptr(), bytes.len())
    })
}

/// The property at `path` (`["xds", "cluster_name"]`), as bytes.
pub fn property(path: &[&str]) -> Option<Vec<u8>> {
    let path = path.join("\0");
    let (mut data, mut size) = (null_mut(), 0);
    // SAFETY: `path` is live; the out-pointers are locals.
    let code = unsafe { proxy_get_property(path.as_ptr(), path.len(), &mut data, &mut size) };
    // SAFETY: the host wrote `data`/`size` (or left them null/0).
    let value = unsafe { owned(data, size) };
    (code == 0).then_some(value)
}

/// Sets the property `name` of this stream. Envoy keeps it as filter state under
/// `wasm.<name>`, which access logs print with `%FILTER_STATE(wasm.<name>:PLAIN)%`.
pub fn set_property(name: &str, value: &[u8]) -> HostResult<()> {
    // SAFETY: both slices are live for the call.
    status(unsafe { proxy_set_property(name.as_ptr(), name.len(), value.as_ptr(), value.len()) })
}

/// The shared-data value under `key` and its CAS token; `(None, None)` when absent or
/// unreadable.
pub fn shared_data(key: &str) -> (Option<Vec<u8>>, Option<u32>) {
    let (mut data, mut size, mut cas) = (null_mut(), 0, 0);
    // SAFETY: `key` is live; the out-pointers are locals.
    let code =
        unsafe { proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut size, &mut cas) };
    // SAFETY: the host wrote `data`/`size` (or left them null/0).
    let value = unsafe { owned(data, size) };
    if code != 0 {
        return (None, None);
    }
    (Some(value), (cas != 0).then_some(cas))
}

/// Stores `value` under `key`; with `cas`, only if the value has not changed since it was read
/// ([`HostError::CAS_MISMATCH`] otherwise).
pub fn set_shared_data(key: &str, value: &[u8], cas: Option<u32>) -> HostResult<()> {
    // SAFETY: both slices are live for the call.
    status(unsafe {
        proxy_set_shared_data(
            key.as_ptr(),
            key.len(),
            value.as_ptr(),
            value.len(),
            cas.unwrap_or(0),
        )
    })
}

/// Lets a paused direction of the current stream go on.
pub fn resume(stream: Stream) -> HostResult<()> {
    // SAFETY: no pointers.
    status(unsafe { proxy_continue_stream(stream as u32) })
}

/// Answers the current request locally (Envoy then runs the response filters on it).
pub fn send_response(status_code: u32, headers: &[(&str, &[u8])], body: &[u8]) -> HostResult<()> {
    let headers = pairs::encode(headers);
    // SAFETY: `body` and `headers` are live for the call; no details string.
    status(unsafe {
        proxy_send_local_response(
            status_code,
            null(),
            0,
            body.as_ptr(),
            body.len(),
            headers.as_ptr(),
            headers.len(),
            -1,
        )
    })
}

/// Sends an HTTP request to `cluster` (through the SDK: see the module comment); the answer
/// comes to the calling context's `on_http_call_response`.
pub fn dispatch(
    cluster: &str,
    headers: Vec<(&str, &str)>,
    body: &[u8],
    timeout: Duration,
) -> HostResult<u32> {
    proxy_wasm::hostcalls::dispatch_http_call(cluster, headers, Some(body), Vec::new(), timeout)
        .map_err(|s| HostError(s as u32))
}

pub fn now() -> Option<SystemTime> {
    let mut nanos = 0u64;
    // SAFETY: the out-pointer is a local.
    let code = unsafe { proxy_get_current_time_nanoseconds(&mut nanos) };
    (code == 0).then(|| UNIX_EPOCH + Duration::from_nanos(nanos))
}

/// Calls the root context's `on_tick` every `period` (zero stops it). Envoy applies a period set
/// from a request's context to its root context.
pub fn set_tick_period(period: Duration) -> HostResult<()> {
    let millis = u32::try_from(period.as_millis()).unwrap_or(u32::MAX);
    // SAFETY: no pointers.
    status(unsafe { proxy_set_tick_period_milliseconds(millis) })
}

/// Makes later host calls act on the stream context `context` (from the root context).
pub fn set_effective_context(context: u32) -> HostResult<()> {
    // SAFETY: no pointers.
    status(unsafe { proxy_set_effective_context(context) })
}

pub fn define_metric(kind: MetricKind, name: &str) -> HostResult<u32> {
    let mut id = 0;
    // SAFETY: `name` is live; the out-pointer is a local.
    status(unsafe { proxy_define_metric(kind as u32, name.as_ptr(), name.len(), &mut id) })?;
    Ok(id)
}

pub fn increment_metric(id: u32, by: u64) -> HostResult<()> {
    // SAFETY: no pointers.
    status(unsafe { proxy_increment_metric(id, i64::try_from(by).unwrap_or(i64::MAX)) })
}

pub fn record_metric(id: u32, value: u64) -> HostResult<()> {
    // SAFETY: no pointers.
    status(unsafe { proxy_record_metric(id, value) })
}

/// proxy-wasm's log levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
enum Level {
    Trace = 0,
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
    Critical = 5,
}

fn log(level: Level, message: &str) {
    // SAFETY: `message` is live for the call. A refused log line is dropped.
    let _ = unsafe { proxy_log(level as u32, message.as_ptr(), message.len()) };
}

/// The plugin whose callback runs, as the VM's one logger heads and filters its lines: several
/// plugins may share a VM (the same `vm_config`), and Envoy's own head (`wasm log <name>
/// <root_id>`) tells them apart only when their names differ.
#[derive(Clone, Debug)]
pub struct Plugin {
    /// `[<stat_prefix>] `, or nothing without one.
    head: Option<std::rc::Rc<str>>,
    level: log::LevelFilter,
}

impl Default for Plugin {
    /// No plugin yet: lines without a head, at the default level.
    fn default() -> Plugin {
        Plugin {
            head: None,
            level: log::LevelFilter::Info,
        }
    }
}

impl Plugin {
    /// The plugin of `stat_prefix` logging at `level`; the VM's logger is let through to
    /// `level` (each line is then checked against its own plugin's).
    pub fn new(stat_prefix: Option<&str>, level: log::LevelFilter) -> Plugin {
        if level > log::max_level() {
            log::set_max_level(level);
        }
        Plugin {
            head: stat_prefix.map(|p| format!("[{p}] ").into()),
            level,
        }
    }
}

thread_local! {
    /// The plugin of the callback that runs (a VM runs one callback at a time).
    static CURRENT: std::cell::RefCell<Plugin> = std::cell::RefCell::new(Plugin::default());
}

/// Makes `plugin` the one whose callback runs: the log lines that follow are its own.
pub fn enter(plugin: &Plugin) {
    CURRENT.with(|current| {
        if let Ok(mut current) = current.try_borrow_mut() {
            current.clone_from(plugin);
        }
    });
}

/// Whether the running plugin logs at `level`, and `message` headed with its name.
fn current(level: log::Level, message: impl FnOnce() -> String) -> Option<String> {
    CURRENT.with(|current| {
        let plugin = current.try_borrow().ok()?;
        if level > plugin.level {
            return None;
        }
        Some(match &plugin.head {
            Some(head) => format!("{head}{}", message()),
            None => message(),
        })
    })
}

/// The `log` crate's records, written to Envoy's log (the SDK's logger unwraps the host's
/// answer), headed with the running plugin's `stat_prefix` and at its level.
struct Logger;

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let level = match record.level() {
            log::Level::Trace => Level::Trace,
            log::Level::Debug => Level::Debug,
            log::Level::Info => Level::Info,
            log::Level::Warn => Level::Warn,
            log::Level::Error => Level::Error,
        };
        if let Some(line) = current(record.level(), || record.args().to_string()) {
            log(level, &line);
        }
    }

    fn flush(&self) {}
}

static LOGGER: Logger = Logger;

/// Installs the logger at `level` and a panic hook that writes the panic to Envoy's log at
/// critical before the VM traps (`panic = "abort"`): a trap is then never silent.
pub fn init_logging(level: log::LevelFilter) {
    if log::set_logger(&LOGGER).is_ok() {
        std::panic::set_hook(Box::new(|info| {
            let message = || format!("toolsift panicked: {info}");
            let line = current(log::Level::Error, message).unwrap_or_else(message);
            log(Level::Critical, &line);
        }));
    }
    log::set_max_level(level);
}
