//! The `/metrics` body, shared between scrapes of one snapshot.
//!
//! A snapshot's exposition can be megabytes. Encoding it per scrape costs CPU per scraper and,
//! worse, a buffer per connection for as long as the client takes to read it: 300 slow readers
//! held 300 copies (1.2 GB). Here each snapshot is encoded once per format; every scrape of it
//! gets a reference to the same bytes. Only the families read live, health and the agent's own
//! process, are encoded per scrape (a few hundred bytes).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use kepler_core::PowerSnapshot;

use crate::context::ExportContext;
use crate::encode::Format;

/// One scrape's body: the shared part around the families read live.
#[derive(Clone, Debug)]
pub struct ScrapeBody {
    parts: VecDeque<Bytes>,
}

impl ScrapeBody {
    pub(crate) fn new(head: Bytes, live: Bytes, rest: Bytes) -> ScrapeBody {
        ScrapeBody {
            parts: [head, live, rest].into_iter().collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The parts, in order; the first and last are shared with other scrapes of the snapshot.
    pub fn parts(&self) -> impl Iterator<Item = &Bytes> {
        self.parts.iter()
    }

    /// The body in one buffer (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        for p in &self.parts {
            v.extend_from_slice(p);
        }
        v
    }
}

impl http_body::Body for ScrapeBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        loop {
            match self.parts.pop_front() {
                Some(part) if part.is_empty() => continue,
                Some(part) => return Poll::Ready(Some(Ok(Frame::data(part)))),
                None => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.parts.iter().all(Bytes::is_empty)
    }

    // Exact, so the response carries Content-Length as before.
    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len() as u64)
    }
}

/// The encoded part of the latest snapshot, per format.
#[derive(Default)]
pub(crate) struct ScrapeCache {
    entries: Mutex<Vec<Entry>>,
}

struct Entry {
    format: Format,
    // Weak: the cache must not keep an old snapshot alive, and an allocation a Weak points to
    // is not reused, so pointer equality cannot mistake a new snapshot for the old one.
    snapshot: Option<Weak<PowerSnapshot>>,
    context: Weak<ExportContext>,
    body: Bytes,
    split: usize,
}

impl Entry {
    fn is_for(
        &self,
        format: Format,
        snapshot: Option<&Arc<PowerSnapshot>>,
        context: &Arc<ExportContext>,
    ) -> bool {
        let same_snapshot = match (&self.snapshot, snapshot) {
            (None, None) => true,
            (Some(w), Some(s)) => std::ptr::eq(w.as_ptr(), Arc::as_ptr(s)),
            _ => false,
        };
        self.format == format
            && same_snapshot
            && std::ptr::eq(self.context.as_ptr(), Arc::as_ptr(context))
    }
}

impl ScrapeCache {
    /// The shared part for `snapshot` and `context` in `format` (head, rest), encoding it with
    /// `encode` if this is the first scrape of them. Scrapes that arrive while it is encoded
    /// wait for it rather than encode it again.
    pub(crate) fn get(
        &self,
        format: Format,
        snapshot: Option<&Arc<PowerSnapshot>>,
        context: &Arc<ExportContext>,
        encode: impl FnOnce() -> (Bytes, usize),
    ) -> (Bytes, Bytes) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let (body, split) = match entries.iter().find(|e| e.is_for(format, snapshot, context)) {
            Some(e) => (e.body.clone(), e.split),
            None => {
                // Let go of the old body first, so that its buffer can be reused now if no
                // scrape holds it any more.
                entries.retain(|e| e.format != format);
                let (body, split) = encode();
                entries.push(Entry {
                    format,
                    snapshot: snapshot.map(Arc::downgrade),
                    context: Arc::downgrade(context),
                    body: body.clone(),
                    split,
                });
                (body, split)
            }
        };
        let split = split.min(body.len());
        (body.slice(..split), body.slice(split..))
    }
}
