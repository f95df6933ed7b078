//! `exporter.stdout`: a short human-readable summary of each tick, for running by hand.

use std::fmt::Write as _;
use std::io::Write as _;

use kepler_core::{PowerSnapshot, WorkloadState};

use super::{Output, OutputError, Publication};

/// Prints [`summary`] of each tick to standard output. A closed pipe (`kepler | head`) is
/// [`OutputError::Closed`], on which the agent shuts down cleanly, not a panic.
#[derive(Debug, Default)]
pub struct StdoutOutput;

impl Output for StdoutOutput {
    fn name(&self) -> &str {
        "stdout"
    }

    fn publish(&mut self, publication: &Publication) -> Result<(), OutputError> {
        let text = summary(&publication.snapshot);
        let mut out = std::io::stdout().lock();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                Err(OutputError::Closed("standard output"))
            }
            other => Ok(other?),
        }
    }
}

/// Processes listed per zone, most power first.
const TOP: usize = 5;

pub fn summary(snapshot: &PowerSnapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "tick {} interval {:.2}s cpu usage {:.1}%",
        snapshot.tick,
        snapshot.interval.as_secs_f64(),
        snapshot.usage_ratio * 100.0
    );
    if snapshot.zones.is_empty() {
        let _ = writeln!(out, "  no power zones (no meter, or first tick)");
    }
    for (z, zone) in snapshot.zones.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {:<8} {:>9.2} W (active {:>8.2} W, idle {:>8.2} W) {:>12.2} J total  [{}]",
            zone.zone,
            zone.total.watts.0,
            zone.active.watts.0,
            zone.idle.watts.0,
            zone.total.energy.as_joules(),
            zone.path
        );
        let mut running: Vec<_> = snapshot
            .processes
            .iter()
            .filter(|p| p.state == WorkloadState::Running)
            .filter_map(|p| p.zones.get(z).map(|v| (v.watts.0, p)))
            .filter(|(w, _)| *w > 0.0)
            .collect();
        running.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (watts, p) in running.into_iter().take(TOP) {
            let _ = writeln!(
                out,
                "      pid {:>7} {:<16} {:>8.2} W",
                p.key.pid, p.info.comm, watts
            );
        }
    }
    out
}
