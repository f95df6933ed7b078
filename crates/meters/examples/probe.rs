//! Prints what each meter finds on this host: `cargo run -p kepler-meters --example probe [SYSFS]`.

use kepler_meters::{registry, MeterName, MeterSettings, OpenContext};

fn main() {
    let mut settings = MeterSettings::default();
    if let Some(sysfs) = std::env::args_os().nth(1) {
        settings.sysfs = sysfs.into();
    }
    let cx = OpenContext::new(&settings);
    let every: Vec<MeterName> = MeterName::all().collect();
    for domain in registry::probe(&registry::chains(&every, false), &cx) {
        for row in domain.rows {
            match row.outcome {
                Ok(meter) => println!(
                    "{} {}: available, zones {}",
                    domain.domain,
                    row.meter,
                    meter.zones().join(", ")
                ),
                Err(why) => println!("{} {}: unavailable: {why}", domain.domain, row.meter),
            }
        }
    }
}
