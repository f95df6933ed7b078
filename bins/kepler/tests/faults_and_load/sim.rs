//! The misbehaving powercap tree: a simulated RAPL tree whose files vanish, turn mode 000,
//! hold garbage, become FIFOs or step back, and the injector that cycles through the faults.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kepler_meters::fixtures::PowercapTree;

use crate::common::*;

pub(crate) const MAX_UJ: u64 = 262_143_328_850;
/// Zone indexes of the simulated tree (dram is a sub-zone of package-0, as the kernel lays
/// it out) and their watts.
pub(crate) const PACKAGE_0: usize = 0;
pub(crate) const DRAM: usize = 1;
pub(crate) const PACKAGE_1: usize = 2;
pub(crate) const WATTS: [f64; 3] = [30.0, 6.0, 30.0];
pub(crate) const INTERVAL: Duration = Duration::from_millis(500);

/// What the writer does to a zone's `energy_uj` each round.
pub(crate) const GOOD: u8 = 0;
pub(crate) const VANISHED: u8 = 1;
pub(crate) const MODE_000: u8 = 2;
pub(crate) const GARBAGE: u8 = 3;
pub(crate) const FIFO: u8 = 4;
/// The zone's directory is renamed away: nothing to write into.
pub(crate) const DIR_GONE: u8 = 5;

pub(crate) struct Sim {
    pub(crate) tree: PowercapTree,
    pub(crate) start: Instant,
    pub(crate) state: [AtomicU8; 3],
    /// µJ taken off each counter: raising it steps the counter back.
    pub(crate) offset: [AtomicU64; 3],
}

impl Sim {
    fn truth_uj(&self, zone: usize) -> u128 {
        (WATTS[zone] * self.start.elapsed().as_secs_f64() * 1e6) as u128
    }

    fn counter(&self, zone: usize) -> u64 {
        let range = u128::from(MAX_UJ) + 1;
        let off = u128::from(self.offset[zone].load(Ordering::Relaxed)) % range;
        let v = (self.truth_uj(zone) % range + range - off) % range;
        u64::try_from(v).unwrap_or(0)
    }

    fn energy_file(&self, zone: usize) -> PathBuf {
        self.tree.zone_dir(zone).expect("zone").join("energy_uj")
    }

    /// One round of writes. Errors are expected (a directory renamed away meanwhile) and the
    /// next round tries again.
    fn write_round(&self) {
        for zone in 0..3 {
            let file = self.energy_file(zone);
            match self.state[zone].load(Ordering::Relaxed) {
                GOOD => {
                    let _ = self.tree.set_energy(zone, self.counter(zone));
                }
                VANISHED => {
                    let _ = fs::remove_file(&file);
                }
                MODE_000 => {
                    // Each write renames a fresh file in, so the mode is set after each.
                    let written = self.tree.set_energy(zone, self.counter(zone));
                    if written.is_ok() {
                        let _ = fs::set_permissions(&file, fs::Permissions::from_mode(0o000));
                    }
                }
                GARBAGE => {
                    let _ = fs::write(&file, "garbage\n");
                }
                FIFO => {
                    let is_fifo = fs::symlink_metadata(&file)
                        .map(|m| m.file_type().is_fifo())
                        .unwrap_or(false);
                    if !is_fifo {
                        let _ = fs::remove_file(&file);
                        if let Ok(c) = std::ffi::CString::new(file.as_os_str().as_bytes()) {
                            // SAFETY: mkfifo reads the NUL-terminated path we own.
                            unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

pub(crate) fn start_sim(sysfs: &Path, stop: Arc<AtomicBool>) -> (Arc<Sim>, JoinHandle<()>) {
    let tree = PowercapTree::create(
        sysfs,
        &[
            ("package-0", MAX_UJ),
            ("dram", MAX_UJ),
            ("package-1", MAX_UJ),
        ],
    )
    .expect("powercap fixture");
    let sim = Arc::new(Sim {
        tree,
        start: Instant::now(),
        state: Default::default(),
        offset: Default::default(),
    });
    let s = sim.clone();
    let thread = std::thread::spawn(move || {
        // Keeps the simulated counters current while the machine is busy (as PowercapSim).
        // SAFETY: setpriority on the calling thread has no memory effects.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, -15);
        }
        while !stop.load(Ordering::Relaxed) {
            s.write_round();
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    (sim, thread)
}

/// What the injector saw while every zone was gone (the meter stalled).
#[derive(Debug, Default)]
pub(crate) struct StallReport {
    pub(crate) stalls: u32,
    /// The meter's `component_up` read 0 during each stall.
    pub(crate) meter_down_seen: u32,
    pub(crate) healthz: Vec<u16>,
    pub(crate) readyz: Vec<u16>,
    /// Node joules added between two scrapes inside a stall (must be 0).
    pub(crate) energy_during_stall: f64,
    pub(crate) recovered: u32,
    pub(crate) faults: u32,
}

pub(crate) fn meter_up(port: u16) -> Option<f64> {
    let (status, body) = http_get(port, "/metrics").ok()?;
    if status != 200 {
        return None;
    }
    let s = parse_metrics(&body);
    select(
        &s,
        "kepler_agent_component_up",
        &[("component", "meter"), ("name", "rapl")],
    )
    .first()
    .map(|s| s.value)
}

pub(crate) fn node_joules(port: u16) -> Option<f64> {
    let (_, body) = http_get(port, "/metrics").ok()?;
    Some(
        select(&parse_metrics(&body), "kepler_node_cpu_joules_total", &[])
            .iter()
            .map(|s| s.value)
            .sum(),
    )
}

pub(crate) fn wait_meter(port: u16, want: f64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if meter_up(port) == Some(want) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// Cycles through the faults until `stop`: a stall of every zone (probing the health
/// endpoints), then each single-zone fault for a second with a good second after it.
pub(crate) fn inject(
    sim: Arc<Sim>,
    port: u16,
    stop: Arc<AtomicBool>,
    report: Arc<Mutex<StallReport>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let pause = |d: Duration| {
            let end = Instant::now() + d;
            while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        let powercap = sim.tree.powercap_dir().to_path_buf();
        let dram_dir = sim.tree.zone_dir(DRAM).expect("dram").to_path_buf();
        let dram_away = powercap.join("gone-dram");
        while !stop.load(Ordering::Relaxed) {
            // Every zone gone: the meter reads nothing.
            for z in &sim.state {
                z.store(VANISHED, Ordering::Relaxed);
            }
            let down = wait_meter(port, 0.0, Duration::from_secs(30));
            let before = node_joules(port);
            let healthz = http_get(port, "/healthz").map(|r| r.0).unwrap_or(0);
            let readyz = http_get(port, "/readyz").map(|r| r.0).unwrap_or(0);
            std::thread::sleep(INTERVAL * 3);
            let after = node_joules(port);
            for z in &sim.state {
                z.store(GOOD, Ordering::Relaxed);
            }
            let recovered = wait_meter(port, 1.0, Duration::from_secs(30));
            {
                let mut r = report.lock().unwrap();
                r.stalls += 1;
                r.meter_down_seen += u32::from(down);
                r.healthz.push(healthz);
                r.readyz.push(readyz);
                if let (Some(b), Some(a)) = (before, after) {
                    r.energy_during_stall += a - b;
                }
                r.recovered += u32::from(recovered);
            }
            pause(Duration::from_secs(1));

            for fault in [VANISHED, MODE_000, GARBAGE, FIFO] {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                sim.state[PACKAGE_1].store(fault, Ordering::Relaxed);
                pause(Duration::from_secs(1));
                sim.state[PACKAGE_1].store(GOOD, Ordering::Relaxed);
                report.lock().unwrap().faults += 1;
                pause(Duration::from_secs(1));
            }
            // A counter stepping back 400 J, as a reset would (read as a wrap past belief).
            sim.offset[PACKAGE_1].fetch_add(400_000_000, Ordering::Relaxed);
            report.lock().unwrap().faults += 1;
            pause(Duration::from_secs(1));
            // A whole zone disappears and comes back.
            sim.state[DRAM].store(DIR_GONE, Ordering::Relaxed);
            if fs::rename(&dram_dir, &dram_away).is_ok() {
                pause(Duration::from_secs(1));
                let _ = fs::rename(&dram_away, &dram_dir);
                report.lock().unwrap().faults += 1;
            }
            sim.state[DRAM].store(GOOD, Ordering::Relaxed);
            pause(Duration::from_secs(1));
        }
    })
}
