//! Wires configuration, sources, meters, attribution and the exporter into the running agent.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kepler_core::{
    AttributionConfig, Attributor, IdlePolicy, MicroJoules, TerminatedPolicy, Watts,
};
use kepler_exporters::{
    AgentState, AgentStats, EbpfCounts, ExportContext, MetricsLevel, Readiness,
};
use kepler_http::shutdown_signal;
use tracing::{error, info, warn};

use crate::config::Config;
use crate::sampler::Sampler;
use crate::setup;

/// Runs the agent until SIGINT or SIGTERM.
pub fn run(config: Config) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;

    let node_name = setup::node_name(&config);
    let mut context = ExportContext::new(node_name.clone());
    context.levels = MetricsLevel::parse(&config.exporter.prometheus.metrics_level)
        .context("exporter.prometheus.metricsLevel")?;
    context.build = setup::build_info();
    context.cpu_info = match kepler_sources::read_cpu_info(&config.host.procfs) {
        Ok(cpus) => Arc::from(cpus),
        Err(e) => {
            warn!(error = %e, "cannot read cpuinfo; kepler_node_cpu_info stays empty");
            Arc::from(Vec::new())
        }
    };
    let state = Arc::new(AgentState::new(context));

    let setup::Usage {
        source, ebpf_stats, ..
    } = setup::usage_source(&config)?;
    let (meter, reports) = setup::select_meter(&config, source.as_ref());
    info!(
        node = %node_name,
        source = source.name(),
        meter = meter.as_ref().map(|m| m.name()).unwrap_or("none"),
        interval = ?config.monitor.interval.0,
        "starting"
    );
    match &meter {
        Some(meter) => state.set_readiness(Readiness::not_ready(format!(
            "waiting for the first interval of meter {}",
            meter.name()
        ))),
        None => {
            let reason = format!(
                "no power meter available ({}); exporting usage only",
                setup::describe_failures(&reports)
            );
            warn!("{reason}");
            state.set_readiness(Readiness::not_ready(reason));
        }
    }
    let mut attribution = attribution_config(&config);
    if meter.as_ref().is_some_and(|m| !m.includes_idle()) {
        info!("the meter reports dynamic power only: all of it is active, idle is zero");
        attribution.idle = IdlePolicy::Baseline {
            configured: Some(Watts(0.0)),
            low_usage_ratio: config.attribution.low_usage_ratio,
        };
    }
    // Loading eBPF parses the kernel's BTF (megabytes, freed right after) and models may parse
    // large files; hand that freed heap back to the system rather than keep it resident.
    // SAFETY: malloc_trim only releases free memory of glibc's allocator; no pointers change.
    unsafe {
        libc::malloc_trim(0);
    }
    let mut attributor = Attributor::new(attribution);
    if source.counts_from_start() {
        attributor = attributor.counting_from_source_start();
    }
    let sampler =
        Sampler::new(source, meter, attributor).with_features(config.ebpf.export_features);

    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let loop_state = state.clone();
    let interval = config.monitor.interval.0;
    let stdout = config.exporter.stdout.enabled;
    let sampling = std::thread::Builder::new()
        .name("kepler-sampler".into())
        .spawn(move || sample_loop(sampler, loop_state, interval, stdout, ebpf_stats, stop_rx))
        .context("starting the sampling thread")?;

    let served = runtime.block_on(async {
        let web = match &config.web.config_file {
            Some(path) => Some(
                kepler_http::WebConfig::load(path)
                    .with_context(|| format!("web.configFile {}", path.display()))?,
            ),
            None => None,
        };
        if !config.exporter.prometheus.enabled {
            shutdown_signal().await;
            return Ok(());
        }
        let server = kepler_http::Server::bind(&config.web.listen_addresses, web)
            .await
            .context("web.listenAddresses")?;
        server
            .serve(kepler_exporters::router(state.clone()), shutdown_signal())
            .await
            .context("serving metrics")
    });
    // Stop sampling whether serving ended by a signal or an error.
    let _ = stop_tx.send(());
    // Release builds abort on panic, so a join error only shows up in debug builds.
    if sampling.join().is_err() {
        error!("sampling thread panicked");
    }
    info!("stopped");
    served
}

fn attribution_config(config: &Config) -> AttributionConfig {
    let idle = match config.attribution.idle_policy.as_str() {
        "baseline" => IdlePolicy::Baseline {
            configured: config.attribution.idle_baseline_watts.map(Watts),
            low_usage_ratio: config.attribution.low_usage_ratio,
        },
        _ => IdlePolicy::Ratio,
    };
    let max = match config.monitor.max_terminated {
        n if n < 0 => None,
        n => Some(usize::try_from(n).unwrap_or(usize::MAX)),
    };
    AttributionConfig {
        idle,
        terminated: TerminatedPolicy {
            retention: config.monitor.terminated_retention.0,
            max,
            min_energy: MicroJoules(
                (config.monitor.min_terminated_energy_threshold * 1e6).round() as u64,
            ),
        },
    }
}

fn sample_loop(
    mut sampler: Sampler,
    state: Arc<AgentState>,
    interval: Duration,
    stdout: bool,
    ebpf_stats: Option<Arc<kepler_ebpf::EbpfStats>>,
    stop: mpsc::Receiver<()>,
) {
    let mut next = Instant::now();
    let mut ticks = 0u64;
    // Zone names last described to the exporter; a model reload can change them.
    let mut zones_published: Vec<std::sync::Arc<str>> = Vec::new();
    loop {
        let started = Instant::now();
        match sampler.tick() {
            Ok(snapshot) => {
                ticks += 1;
                if !snapshot
                    .zones
                    .iter()
                    .map(|z| &z.zone)
                    .eq(zones_published.iter())
                {
                    zones_published = snapshot.zones.iter().map(|z| z.zone.clone()).collect();
                    if let Some(meter) = sampler.meter() {
                        state.set_zone_sources(setup::zone_sources(&snapshot, meter));
                    }
                }
                let ready = sampler.had_energy();
                if stdout {
                    print!("{}", crate::stdout::summary(&snapshot));
                }
                let stats = AgentStats {
                    last_tick_duration: started.elapsed(),
                    ticks,
                    ebpf: ebpf_stats.as_deref().map(|s| EbpfCounts {
                        dropped: s.dropped(),
                        tracked: s.tracked_processes.load(Ordering::Relaxed),
                    }),
                };
                state.publish(Arc::new(snapshot), stats);
                if ready && !state.readiness().is_ready() {
                    state.set_readiness(Readiness::Ready);
                }
            }
            Err(e) => warn!(error = %e, "tick failed; keeping the previous snapshot"),
        }
        // Fixed-rate schedule; after a stall, restart from now instead of catching up.
        next += interval;
        let now = Instant::now();
        if next < now {
            next = now + interval;
        }
        match stop.recv_timeout(next - now) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
