//! The innermost service: one request on its generated client, built with
//! the message limits (see [`ServiceClient::limited`]).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use tower::Service;

use crate::client::rpcs::{ServiceClient, Unary};

/// Sends `Req` on the shared channel.
pub(super) struct Sender<Req> {
    channel: Channel,
    max_request_bytes: usize,
    max_answer_bytes: usize,
    request: PhantomData<fn(Req)>,
}

impl<Req> Sender<Req> {
    pub(super) fn new(channel: Channel, max_request_bytes: usize, max_answer_bytes: usize) -> Self {
        Sender {
            channel,
            max_request_bytes,
            max_answer_bytes,
            request: PhantomData,
        }
    }
}

impl<Req> Clone for Sender<Req> {
    fn clone(&self) -> Self {
        Sender::new(
            self.channel.clone(),
            self.max_request_bytes,
            self.max_answer_bytes,
        )
    }
}

type Answer<Req> = Result<Response<<Req as Unary>::Response>, Status>;

impl<Req: Unary> Service<Request<Req>> for Sender<Req> {
    type Response = Response<Req::Response>;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Answer<Req>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        // The channel's own readiness is awaited within the call (the
        // generated client does), inside the deadline.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        let client = Req::Client::limited(
            self.channel.clone(),
            self.max_request_bytes,
            self.max_answer_bytes,
        );
        // On the heap: tonic's future is tens of kilobytes, and every caller
        // (each reconcile, each test) would otherwise carry it inline,
        // overflowing a 2 MiB thread stack in debug builds.
        Box::pin(Req::send(client, request))
    }
}
