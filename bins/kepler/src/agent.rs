//! Wires configuration, sources, meters, attribution and outputs into the running agent.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kepler_core::{
    AttributionConfig, Attributor, Background, Catalogue, ComponentHealth, ComponentKind, Health,
    MicroJoules, PowerSnapshot, RepeatLog, StopSignal, TerminatedPolicy, UnusableReason,
};
use kepler_exporters::on_demand::Wait;
use kepler_exporters::{
    AgentState, AgentStats, EbpfCounts, ExportContext, Output, OutputError, OwnProcess,
    PrometheusOutput, Publication, Readiness, RefreshOnScrape, Routes, SelfCollectors, SelfReader,
    StdoutOutput,
};
use kepler_http::shutdown_signal;
use kepler_sources::HostFacts;
use tracing::{info, warn};

use crate::config::{Config, DebugCollector};
use crate::sampler::Sampler;
use crate::service::Service;
use crate::setup;

/// Runs the agent until SIGINT or SIGTERM.
pub fn run(config: Config) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;

    let health = Arc::new(Health::new());
    let catalogue = Arc::new(Catalogue::new());
    let host = HostFacts::read(&config.host.procfs, &config.host.sysfs);
    let node_name = setup::node_name(&config, &host);
    let mut context = ExportContext::new(node_name.clone());
    context.levels = config.exporter.prometheus.metrics_level;
    context.build = setup::build_info();
    context.cpu_info = match host.cpus() {
        Ok(cpus) => Arc::from(cpus),
        Err(e) => {
            warn!(error = %e, "cannot read cpuinfo; kepler_node_cpu_info stays empty");
            Arc::from(Vec::new())
        }
    };
    context.health = health.clone();
    let refusals = Arc::new(kepler_http::Refusals::new());
    context.http_refusals = Some(refusals.clone());
    context.self_collectors = self_collectors(&config);
    context.own_process = own_process_reader(context.self_collectors)
        .map(|reader| Arc::new(reader) as Arc<dyn OwnProcess>);
    let state = Arc::new(AgentState::new(context));
    let mut service = Service::new();

    let background = Background::new();
    // The pod informer runs beside the sampler; the classifier asks it for an early poll when
    // a pod's container shows up before the kubelet listed it.
    let nudge = config.kube.enabled.then(|| {
        let informer = kepler_kube::Informer::new(
            config.kube.informer_settings(&node_name),
            catalogue.clone(),
        );
        let nudge = informer.nudge();
        background.push(informer.into_task());
        nudge
    });
    let setup::Usage {
        mut source,
        ebpf_stats,
        ebpf,
    } = setup::usage_source(&config, catalogue.clone(), nudge)?;
    let setup::Selection { meters, attempts } =
        setup::select_meters(&config, &host, &source.features(), &background);
    // Probes that count what nothing reads (softirqs on a node with a power meter) would cost
    // a program run on every event for nothing.
    source.retain_features(&setup::features_needed(&config, &meters));
    report_denied(&health, &ebpf, &attempts);
    // Everything that needed the host's facts has them now; the raw texts need not stay.
    drop(host);
    info!(
        node = %node_name,
        source = source.name(),
        meters = ?meters.iter().map(|m| m.name()).collect::<Vec<_>>(),
        interval = ?config.monitor.interval.0,
        "starting"
    );
    if meters.is_empty() {
        let reason = format!(
            "no power meter available ({}); exporting usage only",
            setup::describe_failures(&attempts)
        );
        warn!("{reason}");
        state.set_readiness(Readiness::not_ready(reason));
    } else {
        let names: Vec<&str> = meters.iter().map(|m| m.name()).collect();
        state.set_readiness(Readiness::not_ready(format!(
            "waiting for the first interval of meter {}",
            names.join(", ")
        )));
    }
    // Models may parse large files (the kernel's BTF is parsed by the eBPF loader child, not
    // here); hand that freed heap back to the system rather than keep it resident.
    release_free_memory();
    let paged_out = crate::startup_code::release();
    tracing::debug!(bytes = paged_out, "start-up code paged out");
    let mut attributor = Attributor::new(attribution_config(&config)).with_catalogue(catalogue);
    if source.counts_from_start() {
        attributor = attributor.counting_from_source_start();
    }
    let limits = config
        .energy_limits()
        .map_err(|m| anyhow::anyhow!("monitor.maxReadingWatts: {m}"))?;
    let sampler = Sampler::new(source, meters, attributor, &health)
        .with_limits(limits)
        .with_features(config.ebpf.export_features);
    start_background(&mut service, &background, &health)?;

    let mut outputs: Vec<Box<dyn Output>> = Vec::new();
    // The state also backs /readyz, which stays served when the Prometheus exporter is off.
    outputs.push(Box::new(PrometheusOutput::new(state.clone())));
    if config.exporter.stdout.enabled {
        outputs.push(Box::new(StdoutOutput));
    }
    let outputs: Vec<(Box<dyn Output>, Arc<ComponentHealth>)> = outputs
        .into_iter()
        .map(|o| {
            let h = health.register(ComponentKind::Output, o.name());
            (o, h)
        })
        .collect();
    // Set when an output's reader went away for good (`--exporter.stdout | head`).
    let reader_gone = Arc::new(tokio::sync::Notify::new());
    let ticker = Ticker {
        state: state.clone(),
        sampler,
        outputs,
        ebpf_stats,
        ticks: 0,
        reader_gone: reader_gone.clone(),
        failed_ticks: RepeatLog::default(),
        started: Instant::now(),
        published: None,
    };
    // `monitor.interval: 0` is upstream's refresh-on-scrape mode, bounded by `staleness`.
    let on_demand = config
        .monitor
        .interval
        .0
        .is_zero()
        .then(|| Arc::new(RefreshOnScrape::new(config.monitor.staleness.0)));
    let schedule = match &on_demand {
        Some(refresh) => {
            state.set_refresh(refresh.clone());
            Schedule::OnScrape(refresh.clone())
        }
        None => {
            state
                .liveness()
                .watch(stall_limit(config.monitor.interval.0));
            Schedule::Every(config.monitor.interval.0)
        }
    };
    service
        .spawn("kepler-sampler", move |stop| {
            sample_loop(ticker, schedule, stop)
        })
        .context("starting the sampling thread")?;

    let served = runtime.block_on(async {
        let web = match &config.web.config_file {
            Some(path) => Some(
                kepler_http::WebConfig::load(path)
                    .with_context(|| format!("web.configFile {}", path.display()))?,
            ),
            None => None,
        };
        let server = kepler_http::Server::bind(&config.web.listen_addresses, web)
            .await
            .context("web.listenAddresses")?
            .with_refusals(refusals);
        let mut router = kepler_exporters::router_with(
            state.clone(),
            Routes {
                metrics: config.exporter.prometheus.enabled,
            },
        );
        if config.debug.pprof.enabled {
            let heap = crate::profiling::activate_heap_profiling().await;
            info!(heap, "serving profiles at /debug/pprof/");
            router = router.merge(crate::profiling::router());
        }
        let stop = async {
            tokio::select! {
                () = shutdown_signal() => {}
                () = reader_gone.notified() => {}
            }
        };
        server.serve(router, stop).await.context("serving HTTP")
    });
    // One shutdown path, whether serving ended by a signal or an error.
    if let Some(refresh) = &on_demand {
        refresh.stop();
    }
    service.shutdown();
    info!("stopped");
    served
}

/// Components the agent may not use for lack of privilege go into the health metrics with
/// their reason, besides the probe: the host has them, and granting access would enable them.
fn report_denied(
    health: &Health,
    ebpf: &Result<String, kepler_core::Unavailable>,
    attempts: &[setup::Attempt],
) {
    if let Err(e) = ebpf {
        if e.denied {
            warn!(reason = %e, "eBPF not permitted; using procfs");
            health.register_unusable(
                ComponentKind::Source,
                "ebpf",
                UnusableReason::PermissionDenied,
            );
        }
    }
    for attempt in attempts {
        if let Err(e) = &attempt.outcome {
            if e.denied {
                warn!(meter = attempt.meter.as_str(), reason = %e, "meter not permitted");
                health.register_unusable(
                    ComponentKind::Meter,
                    attempt.meter.as_str(),
                    UnusableReason::PermissionDenied,
                );
            }
        }
    }
}

/// Starts the background work the opened components asked for (a model refresh, BMC pollers) on the
/// service's threads, each reporting to its own health entry.
fn start_background(service: &mut Service, background: &Background, health: &Health) -> Result<()> {
    for task in background.take() {
        let component = health.register(task.kind(), task.component());
        let thread = task.thread_name().to_string();
        service
            .spawn(&thread, move |stop| task.run(stop, component))
            .with_context(|| format!("starting thread {thread}"))?;
    }
    Ok(())
}

/// Upstream's `debugCollectors` as the encoder's switches.
fn self_collectors(config: &Config) -> SelfCollectors {
    let on = |c| config.exporter.prometheus.debug_collectors.contains(&c);
    SelfCollectors {
        process: on(DebugCollector::Process),
        runtime: on(DebugCollector::Go),
    }
}

/// The reader of the agent's own process when a debug collector wants it, read by each scrape.
/// Always the agent's own `/proc`, not `host.procfs`: in a container that is the host's, where
/// `self` may not be this process.
fn own_process_reader(collectors: SelfCollectors) -> Option<SelfReader> {
    if !collectors.any() {
        return None;
    }
    match SelfReader::new(std::path::Path::new("/proc")) {
        Ok(reader) => Some(reader),
        Err(e) => {
            warn!(error = %e, "cannot read /proc; process_* metrics are not exported");
            None
        }
    }
}

fn attribution_config(config: &Config) -> AttributionConfig {
    let max = match config.monitor.max_terminated {
        n if n < 0 => None,
        n => Some(usize::try_from(n).unwrap_or(usize::MAX)),
    };
    AttributionConfig {
        idle: config.attribution.idle_policy(),
        terminated: TerminatedPolicy {
            retention: config.monitor.terminated_retention.0,
            max,
            min_energy: MicroJoules(
                (config.monitor.min_terminated_energy_threshold * 1e6).round() as u64,
            ),
        },
    }
}

/// The sampling thread's state: one tick computes, publishes and counts.
struct Ticker {
    state: Arc<AgentState>,
    sampler: Sampler,
    outputs: Vec<(Box<dyn Output>, Arc<ComponentHealth>)>,
    ebpf_stats: Option<Arc<kepler_ebpf::EbpfStats>>,
    ticks: u64,
    reader_gone: Arc<tokio::sync::Notify>,
    /// A source that fails every tick is logged once a minute, not every tick.
    failed_ticks: RepeatLog,
    started: Instant,
    /// The snapshot published last, held so that it can be handed back to the sampler once
    /// the next one replaced it and no scrape still reads it.
    published: Option<Arc<PowerSnapshot>>,
}

impl Ticker {
    fn tick(&mut self) {
        let started = Instant::now();
        match self.sampler.tick() {
            Ok(snapshot) => {
                self.ticks += 1;
                let publication = Publication {
                    snapshot: Arc::new(snapshot),
                    stats: AgentStats {
                        last_tick_duration: started.elapsed(),
                        ticks: self.ticks,
                        ebpf: self.ebpf_stats.as_deref().map(|s| EbpfCounts {
                            dropped: s.dropped(),
                            tracked: s.tracked_processes.load(Ordering::Relaxed),
                            exits_deferred: s.exits_deferred.load(Ordering::Relaxed),
                            task_iterator: s.task_iterator.load(Ordering::Relaxed),
                            exits_counted: s.exits_counted.load(Ordering::Relaxed),
                        }),
                    },
                    has_energy: self.sampler.had_energy(),
                };
                if publish(&mut self.outputs, &publication) {
                    self.reader_gone.notify_one();
                }
                // The outputs hold the new snapshot now. The one before it, unless a scrape
                // still reads it, gives the next snapshot its process list's allocation.
                let previous = self.published.replace(publication.snapshot.clone());
                if let Some(Ok(previous)) = previous.map(Arc::try_unwrap) {
                    self.sampler.recycle(previous);
                }
                // Each exited process leaves small blocks freed in the sampler thread's arena
                // (its reading's boxed counters above all); after thousands in one tick, glibc
                // kept ~1.5 MB of such free pages resident at 1,000 exits a second. They
                // come back as page faults at the next such tick, a few hundred at most.
                if self.sampler.exited_last_tick() >= RELEASE_AFTER_EXITED {
                    release_free_memory();
                }
                // The first ticks run code that runs once (first readings, baselines, the
                // usage source's first choices): paged out again, only the code that runs every
                // tick comes back (see `startup_code`).
                if self.ticks == PAGE_OUT_AGAIN_AT_TICK {
                    let paged_out = crate::startup_code::release();
                    tracing::debug!(bytes = paged_out, "first ticks' code paged out");
                }
            }
            Err(e) => {
                if let Some(held) = self.failed_ticks.occur(self.started.elapsed()) {
                    warn!(error = %e, repeats_not_logged = held, "tick failed; keeping the previous snapshot");
                }
            }
        }
        self.state.liveness().beat();
    }
}

/// Exited processes in one tick after which the allocator's free pages are handed back.
const RELEASE_AFTER_EXITED: usize = 1_000;

/// The tick after which the binary's code is paged out a second time.
const PAGE_OUT_AGAIN_AT_TICK: u64 = 3;

/// Hands the allocator's free pages back to the system.
fn release_free_memory() {
    // SAFETY: malloc_trim only releases free memory of glibc's allocator; no pointers change.
    // Under jemalloc (heap profiling) it finds nothing of glibc's to release.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How long the sampling thread may go without completing a tick before `/healthz` says it
/// is stuck: several intervals, and never less than a slow first scan of a big host takes.
fn stall_limit(interval: Duration) -> Duration {
    interval.saturating_mul(4).max(STALL_FLOOR)
}

const STALL_FLOOR: Duration = Duration::from_secs(10);

/// When ticks happen: on a fixed interval, or when a scrape finds the snapshot stale.
enum Schedule {
    Every(Duration),
    OnScrape(Arc<RefreshOnScrape>),
}

fn sample_loop(mut ticker: Ticker, schedule: Schedule, stop: StopSignal) {
    match schedule {
        Schedule::Every(interval) => {
            let mut next = Instant::now();
            loop {
                ticker.tick();
                // Fixed-rate schedule; after a stall, restart from now instead of catching up.
                // Config caps the interval, but an instant past the clock's range must still
                // not panic: waiting from now is then the same schedule.
                let now = Instant::now();
                next = match next.checked_add(interval) {
                    Some(n) if n >= now => n,
                    _ => now.checked_add(interval).unwrap_or(now),
                };
                if wait_draining(&stop, next, &mut ticker.sampler) {
                    return;
                }
            }
        }
        Schedule::OnScrape(refresh) => {
            // A baseline at start, so the first scrape's tick already has an interval.
            ticker.tick();
            refresh.completed(0);
            while let Wait::Tick(generation) = refresh.wait() {
                if stop.is_stopped() {
                    return;
                }
                ticker.tick();
                refresh.completed(generation);
            }
        }
    }
}

/// What waits between ticks drain: the sampler's usage source, whose buffers may fill before
/// the next tick.
trait Drained {
    /// How often to drain now; asked again after each drain.
    fn drain_every(&self) -> Option<Duration>;
    fn drain(&mut self);
}

impl Drained for Sampler {
    fn drain_every(&self) -> Option<Duration> {
        Sampler::drain_every(self)
    }

    fn drain(&mut self) {
        Sampler::drain(self);
    }
}

/// Waits until `deadline` unless stopped first (then returns true), draining `source` as
/// often as it asks meanwhile.
fn wait_draining(stop: &StopSignal, deadline: Instant, source: &mut impl Drained) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // A source asking for less is drained no more often than this.
        let every = source.drain_every().map(|e| e.max(MIN_DRAIN_PERIOD));
        let step = every.map_or(left, |e| e.min(left));
        if stop.wait(step) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        source.drain();
    }
}

const MIN_DRAIN_PERIOD: Duration = Duration::from_millis(10);

/// Hands the tick to every output; one that fails is counted and logged once, and the others
/// still get the snapshot. An output whose reader went away for good is dropped from the list;
/// returns true then, and the agent shuts down.
fn publish(
    outputs: &mut Vec<(Box<dyn Output>, Arc<ComponentHealth>)>,
    publication: &Publication,
) -> bool {
    let mut gone = false;
    outputs.retain_mut(|(output, health)| match output.publish(publication) {
        Ok(()) => {
            if health.set_up() {
                info!(output = output.name(), "output works again");
            }
            true
        }
        Err(error @ OutputError::Closed(_)) => {
            health.set_down();
            info!(output = output.name(), %error, "stopping the agent");
            gone = true;
            false
        }
        Err(error) => {
            if health.set_down() {
                warn!(output = output.name(), %error, "output failed; snapshots are skipped until it recovers");
            }
            true
        }
    });
    gone
}

#[cfg(test)]
mod tests {
    use super::*;
    use kepler_core::BackgroundTask;
    use kepler_meters::model::{ModelRefresh, Remote};

    /// A source that asks for drains every `every`, or, once `halve_after` drains came, twice
    /// as often.
    struct Asking {
        every: Option<Duration>,
        halve_after: usize,
        drains: usize,
    }

    impl Drained for Asking {
        fn drain_every(&self) -> Option<Duration> {
            let halved = self.drains >= self.halve_after;
            self.every.map(|e| if halved { e / 2 } else { e })
        }

        fn drain(&mut self) {
            self.drains += 1;
        }
    }

    fn asking(every: Option<Duration>) -> Asking {
        Asking {
            every,
            halve_after: usize::MAX,
            drains: 0,
        }
    }

    #[test]
    fn waits_drain_the_source_only_when_it_asks() {
        let stop = StopSignal::new();
        let mut never = asking(None);
        let deadline = Instant::now() + Duration::from_millis(300);
        assert!(!wait_draining(&stop, deadline, &mut never));
        assert!(Instant::now() >= deadline);
        assert_eq!(never.drains, 0);

        let mut every = asking(Some(Duration::from_millis(50)));
        let deadline = Instant::now() + Duration::from_secs(1);
        assert!(!wait_draining(&stop, deadline, &mut every));
        assert!(Instant::now() >= deadline);
        // At most one a period, none at the deadline itself (the tick drains there); however
        // late the waits wake, the first comes before the deadline.
        assert!((1..20).contains(&every.drains), "{} drains", every.drains);

        // The period is asked again after each drain: 400 ms, then 200 ms after the first
        // (drains at 0.4, 0.6, 0.8 and 1.0 s; unhalved there would be two).
        let mut faster = Asking {
            every: Some(Duration::from_millis(400)),
            halve_after: 1,
            drains: 0,
        };
        let deadline = Instant::now() + Duration::from_millis(1_050);
        assert!(!wait_draining(&stop, deadline, &mut faster));
        assert!(faster.drains >= 3, "{} drains", faster.drains);
        assert!(faster.drains <= 4, "{} drains", faster.drains);

        // A period of nothing is not a busy loop.
        let mut zero = asking(Some(Duration::ZERO));
        let deadline = Instant::now() + Duration::from_millis(100);
        assert!(!wait_draining(&stop, deadline, &mut zero));
        assert!(zero.drains <= 10, "{} drains", zero.drains);

        stop.stop();
        let mut after_stop = asking(Some(Duration::from_millis(50)));
        let far = Instant::now() + Duration::from_secs(3600);
        assert!(wait_draining(&stop, far, &mut after_stop));
        assert_eq!(after_stop.drains, 0);
    }

    #[test]
    fn background_work_runs_on_the_service_and_stops_with_it() {
        // A refresh an hour away from its first download: only the stop ends it.
        let dir = tempfile::tempdir().unwrap();
        let refresh = ModelRefresh::new(
            Remote::File {
                url: "http://127.0.0.1:9/m.json".into(),
            },
            dir.path().join("m.json"),
            Duration::from_secs(3600),
            Duration::from_secs(1),
        )
        .into_task();
        let (tx, rx) = std::sync::mpsc::channel();
        let background = Background::new();
        background.push(BackgroundTask::new(
            refresh.thread_name().to_string(),
            refresh.kind(),
            refresh.component().to_string(),
            move |stop, health| {
                refresh.run(stop, health);
                let _ = tx.send(());
            },
        ));
        let health = Health::new();
        let mut service = Service::new();
        start_background(&mut service, &background, &health).unwrap();
        let components = health.components();
        assert_eq!(components.len(), 1);
        assert_eq!(components[0].kind(), ComponentKind::ModelRefresh);
        assert_eq!(components[0].name(), ModelRefresh::COMPONENT);
        service.shutdown();
        // Shutdown waited for the thread (its grace is far below the hour): it has ended.
        assert_eq!(rx.try_recv(), Ok(()));
        assert!(background.take().is_empty());
    }
}
