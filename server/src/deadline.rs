//! A request body with a deadline: a client that trickles its body (one byte a second, say) is
//! cut once `Config::read_timeout` has passed since the request's head arrived, so that it
//! cannot hold a connection and a handler for as long as it likes. The handler reading the body
//! sees [`BodyTimeout`] and answers `408` (`ApiError::body`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::BoxError;
use http_body::{Frame, SizeHint};
use tokio::time::Sleep;

/// The error a body past its deadline ends with.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} ms (--read-timeout-ms)", .0.as_millis())]
pub(crate) struct BodyTimeout(pub Duration);

/// `inner`, ending with [`BodyTimeout`] once `limit` has passed.
pub(crate) struct Deadline {
    inner: Body,
    sleep: Pin<Box<Sleep>>,
    limit: Duration,
}

impl Deadline {
    /// `body`, which must arrive within `limit` from now.
    pub(crate) fn wrap(body: Body, limit: Duration) -> Body {
        Body::new(Deadline {
            inner: body,
            sleep: Box::pin(tokio::time::sleep(limit)),
            limit,
        })
    }
}

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        // Bytes already there are taken even past the deadline: only waiting is cut.
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(BoxError::from)));
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTimeout(this.limit)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}
