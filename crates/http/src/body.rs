//! Every response body goes out through [`Paced`]: in slices small enough that hyper never
//! holds more than one of them per connection on top of the shared buffer, and within a total
//! time, so that a reader that drains a byte now and then cannot keep a response (and the
//! snapshot it was encoded from) alive for long.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use tokio::time::Sleep;

/// Largest data frame handed to hyper. `Bytes::split_to` shares the buffer, so slicing is free.
const SLICE: usize = 64 * 1024;

pub(crate) struct Paced {
    inner: Body,
    /// The rest of a frame larger than [`SLICE`].
    rest: Bytes,
    deadline: Pin<Box<Sleep>>,
    limit: Duration,
}

impl Paced {
    pub(crate) fn new(inner: Body, limit: Duration) -> Paced {
        Paced {
            inner,
            rest: Bytes::new(),
            deadline: Box::pin(tokio::time::sleep(limit)),
            limit,
        }
    }

    fn slice(&mut self) -> Frame<Bytes> {
        let n = self.rest.len().min(SLICE);
        Frame::data(self.rest.split_to(n))
    }
}

impl http_body::Body for Paced {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.deadline.as_mut().poll(cx).is_ready() {
            // An error ends the response and hyper closes the connection.
            return Poll::Ready(Some(Err(axum::Error::new(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("response not read within {:?}", this.limit),
            )))));
        }
        if !this.rest.is_empty() {
            return Poll::Ready(Some(Ok(this.slice())));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) if data.len() > SLICE => {
                    this.rest = data;
                    Poll::Ready(Some(Ok(this.slice())))
                }
                Ok(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // Kept exact when the inner body's is, so hyper still sends Content-Length.
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use http_body::Body as _;
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn large_frames_go_out_in_shared_slices_with_the_size_kept() {
        let data = Bytes::from(vec![7u8; SLICE * 3 + 5]);
        let mut body = Paced::new(Body::from(data.clone()), Duration::from_secs(60));
        assert_eq!(body.size_hint().exact(), Some(data.len() as u64));
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            let chunk = frame.unwrap().into_data().unwrap();
            assert!(chunk.len() <= SLICE);
            // A slice of the same allocation, not a copy.
            let offset = chunk.as_ptr() as usize - data.as_ptr() as usize;
            assert!(offset < data.len());
            got.extend_from_slice(&chunk);
        }
        assert_eq!(got, data);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_not_read_in_time_fails() {
        let data = Bytes::from(vec![1u8; SLICE * 2]);
        let mut body = Paced::new(Body::from(data), Duration::from_secs(60));
        assert!(body.frame().await.unwrap().is_ok());
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert!(body.frame().await.unwrap().is_err());
    }
}
