//! What the tick loop publishes and the HTTP handlers read: the latest snapshot, the export
//! context and readiness. Writers swap whole values; readers never wait on the tick.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use arc_swap::{ArcSwap, ArcSwapOption};
use bytes::Bytes;
use kepler_core::PowerSnapshot;

use crate::context::{AgentStats, ExportContext};
use crate::encode::{encode, encode_live, encode_without_live, Format};
use crate::on_demand::RefreshOnScrape;
use crate::scrape::{ScrapeBody, ScrapeCache};

/// Whether the agent should receive traffic (`/readyz`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    NotReady { reason: String },
}

impl Readiness {
    pub fn not_ready(reason: impl Into<String>) -> Self {
        Readiness::NotReady {
            reason: reason.into(),
        }
    }

    pub fn is_ready(&self) -> bool {
        matches!(self, Readiness::Ready)
    }
}

/// Shared between the tick loop (writer) and the HTTP server (readers).
pub struct AgentState {
    snapshot: ArcSwapOption<PowerSnapshot>,
    context: ArcSwap<ExportContext>,
    /// What the agent says about itself; see [`AgentState::readiness`] for the effective state.
    readiness: ArcSwap<Readiness>,
    buffers: Arc<BufferPool>,
    scrapes: ScrapeCache,
    /// Set when ticks happen on demand (`monitor.interval: 0`).
    refresh: OnceLock<Arc<RefreshOnScrape>>,
    liveness: crate::liveness::Liveness,
}

impl AgentState {
    pub fn new(context: ExportContext) -> Self {
        AgentState {
            snapshot: ArcSwapOption::empty(),
            context: ArcSwap::from_pointee(context),
            readiness: ArcSwap::from_pointee(Readiness::Ready),
            buffers: Arc::new(BufferPool::default()),
            scrapes: ScrapeCache::default(),
            refresh: OnceLock::new(),
            liveness: crate::liveness::Liveness::default(),
        }
    }

    /// Whether the sampling thread still completes ticks, for `/healthz`.
    pub fn liveness(&self) -> &crate::liveness::Liveness {
        &self.liveness
    }

    /// Makes scrapes ask for a tick when the snapshot is stale (`monitor.interval: 0`); set
    /// once, before serving.
    pub fn set_refresh(&self, refresh: Arc<RefreshOnScrape>) {
        let _ = self.refresh.set(refresh);
    }

    pub fn refresh(&self) -> Option<&Arc<RefreshOnScrape>> {
        self.refresh.get()
    }

    /// Publishes one tick's result.
    pub fn publish(&self, snapshot: Arc<PowerSnapshot>, stats: AgentStats) {
        self.snapshot.store(Some(snapshot));
        self.set_agent_stats(stats);
    }

    /// Updates the agent's own counters without a new snapshot (a tick that failed).
    pub fn set_agent_stats(&self, stats: AgentStats) {
        // Cheap clone: the CPU list is shared, the rest is a few short strings.
        self.context.rcu(|c| {
            let mut c = ExportContext::clone(c);
            c.agent = stats;
            c
        });
    }

    /// Sets what the agent says about its readiness (e.g. not ready while its meter fails).
    pub fn set_readiness(&self, readiness: Readiness) {
        self.readiness.store(Arc::new(readiness));
    }

    /// Effective readiness: not ready until the first snapshot is published (DESIGN §8), and
    /// not ready whenever the agent said so.
    pub fn readiness(&self) -> Readiness {
        let said = self.readiness.load();
        if !said.is_ready() {
            return Readiness::clone(&said);
        }
        if self.snapshot.load().is_none() {
            return Readiness::not_ready("no snapshot computed yet");
        }
        Readiness::Ready
    }

    pub fn snapshot(&self) -> Option<Arc<PowerSnapshot>> {
        self.snapshot.load_full()
    }

    pub fn context(&self) -> Arc<ExportContext> {
        self.context.load_full()
    }

    /// The `/metrics` body for the latest snapshot. Its large part is encoded once per
    /// snapshot and format and shared by every scrape of it (see the `scrape` module); the
    /// bytes live in a pooled buffer that goes back to the pool when the last scrape of that
    /// snapshot is done, so steady-state scrapes neither allocate nor page-fault a fresh
    /// multi-megabyte buffer.
    pub fn scrape(&self, format: Format) -> ScrapeBody {
        let snapshot = self.snapshot.load_full();
        let context = self.context.load_full();
        let (head, rest) = self.scrapes.get(format, snapshot.as_ref(), &context, || {
            let mut buf = self.buffers.take();
            let split = encode_without_live(snapshot.as_deref(), &context, format, &mut buf);
            self.buffers.encoded(buf.len());
            let body = Bytes::from_owner(PooledBuffer {
                buf,
                pool: Arc::downgrade(&self.buffers),
            });
            (body, split)
        });
        let mut live = Vec::new();
        encode_live(&context, format, &mut live);
        ScrapeBody::new(head, Bytes::from(live), rest)
    }

    /// The latest snapshot encoded, in one buffer of its own (for outputs other than HTTP and
    /// for tests); byte for byte what [`AgentState::scrape`] serves.
    pub fn encode(&self, format: Format) -> Bytes {
        let snapshot = self.snapshot.load();
        let context = self.context.load();
        let mut buf = Vec::new();
        encode(snapshot.as_deref(), &context, format, &mut buf);
        Bytes::from(buf)
    }
}

/// A few encode buffers kept for reuse.
#[derive(Default)]
struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
    /// Length of the latest body encoded, what the next one is expected to need.
    last_len: AtomicUsize,
}

impl BufferPool {
    /// Two scrapers (an HA Prometheus pair) is the common case; buffers beyond that are freed, keeping memory bounded.
    const KEEP: usize = 2;
    /// Below this, a buffer larger than needed is not worth a reallocation.
    const SMALL: usize = 64 * 1024;

    /// A cleared buffer sized for a body like the latest one. A buffer that grew with a burst
    /// of processes (megabytes after a fork storm) is cut back to that size: its pages were all
    /// written, so kept whole it would hold the burst's memory for as long as the pool lives.
    /// Reserving the expected size up front also spares the encode a chain of doublings.
    fn take(&self) -> Vec<u8> {
        let expected = self.last_len.load(Ordering::Relaxed);
        let mut buf = {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            free.pop().unwrap_or_default()
        };
        buf.clear();
        if buf.capacity() > 2 * expected.max(Self::SMALL) {
            buf.shrink_to(expected);
        }
        buf.reserve(expected);
        buf
    }

    fn encoded(&self, len: usize) {
        self.last_len.store(len, Ordering::Relaxed);
    }

    fn give_back(&self, buf: Vec<u8>) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if free.len() < Self::KEEP {
            free.push(buf);
        }
    }
}

struct PooledBuffer {
    buf: Vec<u8>,
    pool: Weak<BufferPool>,
}

impl AsRef<[u8]> for PooledBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give_back(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn snapshot() -> Arc<PowerSnapshot> {
        Arc::new(PowerSnapshot {
            tick: 1,
            interval: Duration::from_secs(5),
            usage_ratio: 0.5,
            zones: Vec::new(),
            idle_policy: kepler_core::IdlePolicyState::Ratio,
            processes: Vec::new(),
            containers: Vec::new(),
            pods: Vec::new(),
            vms: Vec::new(),
            features: None,
            platform: Vec::new(),
        })
    }

    #[test]
    fn ready_after_first_snapshot_unless_told_otherwise() {
        let state = AgentState::new(ExportContext::new("n"));
        assert!(!state.readiness().is_ready());
        state.publish(snapshot(), AgentStats::default());
        assert!(state.readiness().is_ready());
        state.set_readiness(Readiness::not_ready("meter lost"));
        assert_eq!(state.readiness(), Readiness::not_ready("meter lost"));
        state.set_readiness(Readiness::Ready);
        assert!(state.readiness().is_ready());
    }

    #[test]
    fn scrapes_of_one_snapshot_share_its_bytes_and_read_health_live() {
        let state = AgentState::new(ExportContext::new("n"));
        let stats = AgentStats {
            last_tick_duration: Duration::from_millis(3),
            ticks: 7,
            ebpf: None,
        };
        state.publish(snapshot(), stats);
        let first = state.scrape(Format::Text004);
        let text = String::from_utf8(first.to_vec()).unwrap();
        assert!(
            text.contains("kepler_agent_ticks_total{node_name=\"n\"} 7\n"),
            "{text}"
        );
        assert_eq!(text.as_bytes(), &state.encode(Format::Text004)[..]);
        let ptrs = |b: &ScrapeBody| b.parts().map(|p| p.as_ptr()).collect::<Vec<_>>();

        // A component registered between scrapes shows up; the shared parts are the same bytes.
        let health = state.context().health.clone();
        health.register(kepler_core::ComponentKind::Meter, "rapl");
        let second = state.scrape(Format::Text004);
        let (a, b) = (ptrs(&first), ptrs(&second));
        assert_eq!((a[0], a[2]), (b[0], b[2]), "the snapshot was encoded again");
        let text2 = String::from_utf8(second.to_vec()).unwrap();
        assert!(text2.contains("component=\"meter\""), "{text2}");
        assert_eq!(text2.as_bytes(), &state.encode(Format::Text004)[..]);

        // Another format is encoded on its own; a new snapshot is encoded again.
        let om = state.scrape(Format::OpenMetrics);
        assert!(String::from_utf8(om.to_vec()).unwrap().ends_with("# EOF\n"));
        state.publish(snapshot(), AgentStats { ticks: 8, ..stats });
        let third = state.scrape(Format::Text004);
        assert_ne!(ptrs(&third)[2], a[2]);
        assert!(String::from_utf8(third.to_vec())
            .unwrap()
            .contains("kepler_agent_ticks_total{node_name=\"n\"} 8\n"));
    }

    /// Counts its reads; each reading's CPU time is the number of reads so far, plus a half.
    #[derive(Debug, Default)]
    struct CountingProcess {
        reads: std::sync::atomic::AtomicU64,
        failing: std::sync::atomic::AtomicBool,
    }

    impl crate::self_process::OwnProcess for CountingProcess {
        fn read(&self) -> std::io::Result<crate::ProcessStats> {
            if self.failing.load(Ordering::Relaxed) {
                return Err(std::io::Error::other("gone"));
            }
            let n = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
            Ok(crate::ProcessStats {
                cpu_seconds: n as f64 + 0.5,
                ..Default::default()
            })
        }
    }

    #[test]
    fn the_agents_own_process_is_read_by_each_scrape_and_not_between() {
        let own = Arc::new(CountingProcess::default());
        let mut context = ExportContext::new("n");
        context.self_collectors.process = true;
        context.own_process = Some(own.clone());
        context
            .health
            .register(kepler_core::ComponentKind::Meter, "rapl");
        let state = AgentState::new(context);
        for _ in 0..5 {
            state.publish(snapshot(), AgentStats::default());
        }
        assert_eq!(own.reads.load(Ordering::Relaxed), 0, "read between scrapes");

        let cpu = |body: ScrapeBody| {
            let text = String::from_utf8(body.to_vec()).unwrap();
            let line = text
                .lines()
                .find(|l| l.starts_with("process_cpu_seconds_total"))
                .map(str::to_owned);
            (line, text)
        };
        // Two scrapes of one snapshot share its encoding, yet each reads the process afresh.
        let (first, _) = cpu(state.scrape(Format::Text004));
        let (second, text) = cpu(state.scrape(Format::Text004));
        assert_eq!(first.as_deref(), Some("process_cpu_seconds_total 1.5"));
        assert_eq!(second.as_deref(), Some("process_cpu_seconds_total 2.5"));
        // In the same place as in a whole encode: after health, before the snapshot.
        let health = text.find("kepler_agent_component_up").unwrap();
        let process = text.find("process_cpu_seconds_total").unwrap();
        let snapshot_part = text.find("kepler_agent_processes").unwrap();
        assert!(health < process && process < snapshot_part, "{text}");

        // A failed reading leaves the families out of that scrape only.
        own.failing.store(true, Ordering::Relaxed);
        let (line, text) = cpu(state.scrape(Format::Text004));
        assert_eq!(line, None);
        assert!(text.contains("kepler_agent_processes"), "{text}");
        own.failing.store(false, Ordering::Relaxed);
        assert_eq!(
            cpu(state.scrape(Format::Text004)).0.as_deref(),
            Some("process_cpu_seconds_total 3.5")
        );
    }

    #[test]
    fn a_pooled_buffer_does_not_keep_the_size_of_a_past_burst() {
        let pool = BufferPool::default();
        let mut big = pool.take();
        big.resize(8 << 20, b'x');
        pool.encoded(big.len());
        pool.give_back(big);
        // The burst is over: bodies are small again.
        pool.encoded(64 << 10);
        let buf = pool.take();
        assert!(buf.is_empty());
        assert!(buf.capacity() >= 64 << 10);
        assert!(
            buf.capacity() <= 2 * (64 << 10),
            "the pooled buffer kept {} bytes",
            buf.capacity()
        );
        // And one encode of a larger body later, the next buffer is sized for it at once.
        pool.give_back(buf);
        pool.encoded(1 << 20);
        assert!(pool.take().capacity() >= 1 << 20);
    }

    #[test]
    fn buffers_go_back_to_the_pool_when_the_last_scrape_is_done() {
        let state = AgentState::new(ExportContext::new("n"));
        state.publish(snapshot(), AgentStats::default());
        let first = state.scrape(Format::Text004);
        let ptr = first.parts().next().unwrap().as_ptr();
        drop(first);
        // A new snapshot: the cache lets go of the old body, whose buffer is reused.
        state.publish(snapshot(), AgentStats::default());
        let second = state.scrape(Format::Text004);
        assert_eq!(second.parts().next().unwrap().as_ptr(), ptr);
    }
}
