//! Helpers shared by the meters' integration tests. Each test binary uses only some of
//! them, hence the allowance.
#![allow(dead_code)]

pub mod bmc;
pub mod logs;

use std::time::Duration;

use kepler_core::{Background, Health, MeterInput, PowerMeter, StopSignal, ZoneReading};

/// What the agent's service does with the pollers a meter left behind: each on a thread of
/// its own, stopped by `stop`, reporting to its own health entry.
pub fn run_background(background: &Background, health: &Health, stop: &StopSignal) {
    for task in background.take() {
        let stop = stop.clone();
        let component = health.register(task.kind(), task.component());
        std::thread::Builder::new()
            .name(task.thread_name().to_string())
            .spawn(move || task.run(stop, component))
            .unwrap();
    }
}

pub fn read(meter: &mut dyn PowerMeter) -> Result<Vec<ZoneReading>, String> {
    let mut out = Vec::new();
    meter
        .read(&MeterInput::default(), &mut out)
        .map(|()| out)
        .map_err(|e| e.to_string())
}

/// Reads until `done` holds (the poller runs on its own thread); bounded at about 30 s.
pub fn read_until(
    meter: &mut dyn PowerMeter,
    done: impl Fn(&Result<Vec<ZoneReading>, String>) -> bool,
) -> Result<Vec<ZoneReading>, String> {
    for _ in 0..3000 {
        let r = read(meter);
        if done(&r) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("condition never met; last read: {:?}", read(meter));
}
