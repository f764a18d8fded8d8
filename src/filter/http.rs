//! One HTTP stream: Envoy's callbacks handed to the core's [`Stream`], which decides and acts
//! through [`super::envoy::Envoy`]; its [`Flow`] returned to Envoy as the SDK's `Action`, and a
//! call's answer resuming the side the core names.

use super::envoy::Worker;
use super::host;
use crate::lifecycle::{Flow, Resume, Stream};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::rc::Rc;

pub struct Filter {
    /// `None` without a configuration: everything passes through.
    worker: Option<Rc<Worker>>,
    stream: Stream,
}

impl Filter {
    pub fn new(worker: Option<Rc<Worker>>, context_id: u32) -> Filter {
        Filter {
            worker,
            stream: Stream::new(context_id),
        }
    }

    /// Runs a callback of the core's stream with Envoy as its proxy.
    fn run(&mut self, callback: impl FnOnce(&mut Stream, &Worker) -> Flow) -> Action {
        match &self.worker {
            Some(worker) => match callback(&mut self.stream, worker) {
                Flow::Continue => Action::Continue,
                Flow::Pause => Action::Pause,
            },
            None => Action::Continue,
        }
    }
}

impl Context for Filter {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        let Some(worker) = &self.worker else {
            return;
        };
        let (envoy, core) = (worker.envoy(), &worker.core);
        let stream = match self
            .stream
            .on_call(&envoy, core, token_id, num_headers, body_size)
        {
            Resume::Nothing => return,
            Resume::Request => host::Stream::Request,
            Resume::Response => host::Stream::Response,
        };
        if let Err(status) = host::resume(stream) {
            log::warn!("cannot resume the {stream:?}: {status:?}");
        }
    }
}

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        self.run(|s, w| s.on_request_headers(&w.envoy(), &w.core, end_of_stream))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.run(|s, w| s.on_request_body(&w.envoy(), &w.core, body_size, end_of_stream))
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        self.run(|s, w| s.on_request_trailers(&w.envoy(), &w.core))
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        self.run(|s, w| s.on_response_headers(&w.envoy(), &w.core, end_of_stream))
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.run(|s, w| s.on_response_body(&w.envoy(), &w.core, body_size, end_of_stream))
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        self.run(|s, w| s.on_response_trailers(&w.envoy(), &w.core))
    }

    fn on_log(&mut self) {
        if let Some(worker) = &self.worker {
            self.stream.on_log(&worker.envoy(), &worker.core);
        }
    }
}
