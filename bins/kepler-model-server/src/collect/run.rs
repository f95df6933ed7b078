//! The collect loop: phase by phase, start the stressor, read the agent every step, append
//! a row per new agent tick, stop the stressor, undo any frequency cap.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kepler_models::Feature;

use super::cpufreq::Cpufreq;
use super::output::{DatasetFile, Ended};
use super::plan::{self, Phase, PlanOptions};
use super::scrape::{Agent, Reading};
use super::CollectArgs;

/// Failed reads in a row after which the run stops (the agent is gone).
const MAX_FAILED_READS: u32 = 10;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn request_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// SIGINT and SIGTERM end the run between two steps, so that the stressor is stopped and a
/// frequency cap undone; the file stays resumable.
fn install_stop_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(sig, request_stop as *const () as libc::sighandler_t);
        }
    }
}

fn cpu_count() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

pub fn collect(args: &CollectArgs) -> Result<()> {
    if args.step.is_zero() {
        bail!("--step must be longer than 0");
    }
    let cpufreq = if args.freq_caps {
        match Cpufreq::detect(&args.sysfs) {
            Ok(f) => Some(f),
            Err(why) => {
                tracing::info!(%why, "cpufreq is not writable here; the plan has no frequency caps");
                None
            }
        }
    } else {
        None
    };
    let opts = PlanOptions {
        stressors: args.stressors.clone(),
        instances: args.instances.clone(),
        loads: args.loads.clone(),
        run: args.run,
        idle: args.idle,
        freq_caps_khz: cpufreq
            .as_ref()
            .map(Cpufreq::default_caps)
            .unwrap_or_default(),
    };
    let plan = plan::build(&opts, cpu_count());
    if args.dry_run {
        return print_plan(&plan);
    }
    if plan.iter().any(|p| p.stress_ng_args().is_some()) {
        check_stress_ng(&args.stress_ng)?;
    }

    let agent = Agent::new(&args.agent, args.step.max(Duration::from_secs(2)));
    let first = first_reading(&agent, args.step)?;
    let (mut file, ended) = open_or_create(&args.out, &first)?;
    let start = ended.map_or(0, |e| resume_at(&e, &plan, args.step));
    if let Some(e) = ended {
        tracing::info!(path = %args.out.display(), rows = e.rows, phase = start, "continuing an interrupted run");
    }
    write_spec(&args.out, &file.components)?;
    if start >= plan.len() {
        println!("{}: the plan is already complete", args.out.display());
        return Ok(());
    }

    install_stop_handlers();
    let total_ms = plan::total(&plan).as_millis() as u64;
    let done_ms = plan::total(plan.get(..start).unwrap_or_default()).as_millis() as u64;
    let bar = ProgressBar::new(total_ms);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {percent:>3}% ETA {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_position(done_ms);
    let mut stats = Stats::default();
    let mut last_tick = first.tick;
    let mut elapsed_ms = done_ms;
    for (index, phase) in plan.iter().enumerate().skip(start) {
        bar.set_message(format!("{}/{}: {phase}", index + 1, plan.len()));
        tracing::debug!(index, %phase, "phase");
        let _cap = match (phase.freq_cap_khz(), &cpufreq) {
            (Some(khz), Some(f)) => Some(f.cap(khz)?),
            _ => None,
        };
        let mut stressor = match phase.stress_ng_args() {
            Some(a) => Some(spawn_stress_ng(&args.stress_ng, &a)?),
            None => None,
        };
        let result = record_phase(
            &agent,
            &mut file,
            index,
            phase.duration(),
            args.step,
            &mut last_tick,
            &mut stats,
            |in_phase| bar.set_position(elapsed_ms + in_phase.as_millis() as u64),
        );
        if let Some(child) = stressor.as_mut() {
            stop(child);
        }
        result?;
        if STOP.load(Ordering::Relaxed) {
            bar.abandon_with_message("stopped; run the same command again to continue");
            return Ok(());
        }
        elapsed_ms += phase.duration().as_millis() as u64;
        bar.set_position(elapsed_ms);
    }
    bar.finish_with_message("done");
    println!(
        "{}: {} rows recorded ({} repeated agent snapshots skipped, {} failed reads)",
        args.out.display(),
        stats.rows,
        stats.repeated,
        stats.failed
    );
    if stats.repeated > stats.rows {
        tracing::warn!("most reads found no new agent tick: set the agent's monitor.interval to --step or less");
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Stats {
    rows: u64,
    repeated: u64,
    failed: u64,
}

#[allow(clippy::too_many_arguments)]
fn record_phase(
    agent: &Agent,
    file: &mut DatasetFile,
    index: usize,
    duration: Duration,
    step: Duration,
    last_tick: &mut u64,
    stats: &mut Stats,
    progress: impl Fn(Duration),
) -> Result<()> {
    let started = Instant::now();
    let mut next = started + step;
    let mut failed_in_a_row = 0u32;
    while next <= started + duration && !STOP.load(Ordering::Relaxed) {
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        next += step;
        progress(started.elapsed().min(duration));
        match agent.read() {
            Ok(reading) if reading.tick == *last_tick => stats.repeated += 1,
            Ok(reading) => {
                failed_in_a_row = 0;
                *last_tick = reading.tick;
                file.append(unix_now(), &reading, index)?;
                stats.rows += 1;
            }
            Err(e) => {
                stats.failed += 1;
                failed_in_a_row += 1;
                tracing::warn!(error = %format!("{e:#}"), "reading the agent failed; no row this step");
                if failed_in_a_row >= MAX_FAILED_READS {
                    bail!("{MAX_FAILED_READS} reads of {} in a row failed; stopping (run again to continue)", agent.url());
                }
            }
        }
    }
    Ok(())
}

/// The agent's first reading with features and power: a just-started agent has neither
/// until its second tick, so readings are retried for a while.
fn first_reading(agent: &Agent, step: Duration) -> Result<Reading> {
    let deadline = Instant::now() + (step * 10).max(Duration::from_secs(15));
    loop {
        let reading = agent.read();
        let ready = reading
            .as_ref()
            .is_ok_and(|r| !r.features.is_empty() && !r.power.is_empty());
        if ready || Instant::now() >= deadline {
            return reading;
        }
        std::thread::sleep(step.min(Duration::from_secs(1)));
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Opens the file an earlier run left (and says where it ended) or creates it with the
/// columns of the agent's first reading.
fn open_or_create(path: &Path, first: &Reading) -> Result<(DatasetFile, Option<Ended>)> {
    if let Some((file, ended)) = DatasetFile::resume(path)? {
        let missing: Vec<&str> = file
            .features
            .iter()
            .filter(|f| !first.features.contains_key(*f))
            .map(|f| f.as_str())
            .collect();
        if !missing.is_empty() {
            tracing::warn!(?missing, "the agent no longer exports features the file records; those rows will be skipped by train");
        }
        return Ok((file, Some(ended)));
    }
    if first.features.is_empty() {
        bail!("the agent exports no model features: set ebpf.exportFeatures: true in its configuration");
    }
    if first.power.is_empty() {
        bail!("the agent reports no measured power (kepler_node_cpu_watts or kepler_platform_watts): collect needs a node with a meter");
    }
    let features: Vec<Feature> = Feature::ALL
        .into_iter()
        .filter(|f| first.features.contains_key(f))
        .collect();
    let components: Vec<String> = first.power.keys().cloned().collect();
    Ok((DatasetFile::create(path, features, components)?, None))
}

/// The phase a run continues with: the one the file ended in, run again unless its rows
/// show it ran to its end (the rows it has are kept either way: more data of a phase never
/// harms a fit).
fn resume_at(ended: &Ended, plan: &[Phase], step: Duration) -> usize {
    let Some(p) = ended.last_phase else {
        return 0;
    };
    let steps = plan.get(p).map_or(0, |phase| {
        (phase.duration().as_secs_f64() / step.as_secs_f64()) as usize
    });
    // One row short still counts as complete: the last step may find no new agent tick.
    if ended.rows_in_last_phase + 1 >= steps {
        p + 1
    } else {
        p
    }
}

/// Writes `<out>.spec.json`: this machine, as the model DB's node types describe machines.
fn write_spec(out: &Path, components: &[String]) -> Result<()> {
    let host = kepler_sources::HostFacts::read(Path::new("/proc"), Path::new("/sys"));
    let mut spec = kepler_models::dataset::MachineSpec::default();
    match (host.cpuinfo(), host.meminfo()) {
        (Ok(cpu), Ok(mem)) => match kepler_models::builtin::MachineSpec::from_proc(cpu, mem) {
            Ok(m) => {
                spec.processor = Some(m.processor);
                spec.cores = Some(m.logical_cores);
                spec.chips = Some(m.chips).filter(|&c| c > 0);
                spec.memory = Some(m.memory_gb.round() as u64).filter(|&g| g > 0);
                spec.frequency = m.frequency_mhz.map(|f| f.round() as u64);
            }
            Err(e) => tracing::warn!(error = %e, "machine spec incomplete"),
        },
        (Err(e), _) | (_, Err(e)) => tracing::warn!(error = %e, "machine spec incomplete"),
    }
    spec.source = Some(
        if components.iter().all(|c| c == "platform") {
            "acpi"
        } else {
            "rapl-sysfs"
        }
        .to_string(),
    );
    let path = kepler_models::dataset::MachineSpec::sidecar_path(out);
    let text = serde_json::to_string_pretty(&spec).context("encoding the machine spec")?;
    std::fs::write(&path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

fn print_plan(plan: &[Phase]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let mut at = Duration::ZERO;
    for (i, phase) in plan.iter().enumerate() {
        writeln!(
            out,
            "{:>4}  +{:>8}  {phase}",
            i + 1,
            humantime::format_duration(at)
        )?;
        at += phase.duration();
    }
    writeln!(
        out,
        "{} phases, {} in all",
        plan.len(),
        humantime::format_duration(plan::total(plan))
    )?;
    Ok(())
}

fn check_stress_ng(program: &Path) -> Result<()> {
    let status = Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("running {} (install stress-ng)", program.display()))?;
    if !status.success() {
        bail!("{} --version failed: {status}", program.display());
    }
    Ok(())
}

fn spawn_stress_ng(program: &Path, args: &[String]) -> Result<Child> {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null());
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            // stress-ng ends with this process, even if it is killed outright.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("starting {} {}", program.display(), args.join(" ")))
}

/// Ends a stress-ng run: it has normally timed out by now; SIGTERM lets it stop its workers.
fn stop(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill on our own child's pid, which we have not reaped yet.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                if !status.success() && status.code().is_some() {
                    tracing::warn!(%status, "stress-ng ended with an error");
                }
                return;
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
        }
    }
}
