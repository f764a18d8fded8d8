//! A model of Envoy's response-body buffering, as the response machine sees it, for its unit
//! tests and its fuzz target: what a paused callback keeps stays in the buffer, what a callback
//! lets continue goes to the client; calls are recorded and answered by the caller.

use super::respond::{Answer, Event, Flow, Host, Hybrid, Responder};
use crate::embeddings::MemoryBytes;
use std::cell::{Cell, RefCell};

/// Envoy as the machine sees it: one response's body buffer, the client's side of it, and the
/// calls sent.
#[derive(Default)]
pub struct Envoy {
    /// What Envoy holds (paused callbacks keep it).
    pub buffer: RefCell<Vec<u8>>,
    /// What the client received.
    pub client: RefCell<Vec<u8>>,
    pub headers: RefCell<Vec<(String, String)>>,
    pub follow_ups: RefCell<Vec<String>>,
    pub embeddings: RefCell<Vec<Vec<String>>>,
    pub events: RefCell<Vec<Event>>,
    pub aliases: RefCell<Vec<(String, String)>>,
    /// Bytes the machine read from the buffer.
    pub read: Cell<usize>,
    /// Refuse to send follow-ups (a cluster that does not exist).
    pub refuse_calls: bool,
    /// The store shared by every worker (`search.memory`'s sessions), and its clock.
    pub store: MemoryBytes,
    pub now_seconds: u64,
    /// What was recorded for the access log.
    pub recorded: RefCell<Vec<String>>,
}

impl Host for Envoy {
    type Store = MemoryBytes;

    fn body(&self, start: usize, len: usize) -> Vec<u8> {
        let buffer = self.buffer.borrow();
        let end = (start + len).min(buffer.len());
        let bytes = buffer.get(start.min(end)..end).unwrap_or_default().to_vec();
        self.read.set(self.read.get() + bytes.len());
        bytes
    }

    fn replace_body(&self, len: usize, bytes: &[u8]) {
        let mut buffer = self.buffer.borrow_mut();
        let len = len.min(buffer.len());
        buffer.splice(..len, bytes.iter().copied());
    }

    fn set_header(&self, name: &str, value: &str) {
        let mut headers = self.headers.borrow_mut();
        headers.retain(|(n, _)| n != name);
        headers.push((name.to_owned(), value.to_owned()));
    }

    fn send_follow_up(&self, body: &str) -> Option<u32> {
        if self.refuse_calls {
            return None;
        }
        self.follow_ups.borrow_mut().push(body.to_owned());
        Some(100 + self.follow_ups.borrow().len() as u32)
    }

    fn send_embeddings(&self, inputs: &[&str]) -> Option<u32> {
        self.embeddings
            .borrow_mut()
            .push(inputs.iter().map(|s| s.to_string()).collect());
        Some(900)
    }

    fn count(&self, event: Event) {
        self.events.borrow_mut().push(event);
    }

    fn now_micros(&self) -> Option<u64> {
        Some(0)
    }

    fn hybrid(&self) -> Option<Hybrid<'_, Self::Store>> {
        None
    }

    fn remember_alias(&self, shown: &str, real: &str) {
        self.aliases
            .borrow_mut()
            .push((shown.to_owned(), real.to_owned()));
    }

    fn store(&self) -> &Self::Store {
        &self.store
    }

    fn now_seconds(&self) -> u64 {
        self.now_seconds
    }

    fn record_search(&self, value: &str) {
        self.recorded.borrow_mut().push(value.to_owned());
    }
}

impl Envoy {
    /// A body callback with `chunk` arriving: what continues goes to the client.
    pub fn feed(&self, machine: &mut Responder, chunk: &[u8], end: bool) -> Flow {
        self.buffer.borrow_mut().extend_from_slice(chunk);
        let size = self.buffer.borrow().len();
        let flow = machine.on_body(self, size, end);
        if flow == Flow::Continue {
            self.flush();
        }
        flow
    }

    pub fn flush(&self) {
        let bytes: Vec<u8> = self.buffer.borrow_mut().drain(..).collect();
        self.client.borrow_mut().extend(bytes);
    }

    /// A call answered; a machine that resumes lets the buffer go.
    pub fn answer(&self, machine: &mut Responder, token: u32, answer: Answer) {
        if machine.on_call(self, token, answer) {
            self.flush();
        }
    }

    pub fn client_text(&self) -> String {
        String::from_utf8_lossy(&self.client.borrow()).into_owned()
    }

    pub fn counted(&self, event: Event) -> usize {
        self.events.borrow().iter().filter(|e| **e == event).count()
    }
}
