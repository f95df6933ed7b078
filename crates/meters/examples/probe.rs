//! Prints what each meter finds on this host: `cargo run -p kepler-meters --example probe [SYSFS]`.

use kepler_meters::{probe, MeterSettings, METER_NAMES};

fn main() {
    let mut settings = MeterSettings::default();
    if let Some(sysfs) = std::env::args_os().nth(1) {
        settings.sysfs = sysfs.into();
    }
    for report in probe(&METER_NAMES, &settings) {
        match report.outcome {
            Ok(zones) => println!("{}: available, zones {}", report.name, zones.join(", ")),
            Err(why) => println!("{}: unavailable: {why}", report.name),
        }
    }
}
