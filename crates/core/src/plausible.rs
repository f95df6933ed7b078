//! What a meter reading may imply before it is believed. A lying meter (a counter read as
//! 2^64−1, a counter that steps back and would be taken for a wrap, a sensor stuck at its
//! all-ones value) must not enter the energy counters: those only ever grow, so one absurd
//! delta would stay in every later scrape. The checks are pure and shared by every meter,
//! through [`crate::energy::zone_energies_within`].

use std::time::Duration;

use crate::units::{MicroJoules, Watts};

/// The most power one reading (one socket's zone, one sensor, one device) is believed to
/// draw, unless configured otherwise. Far above any single CPU package, GPU or server
/// platform sold today (a fully loaded 8-GPU server draws about 10 kW), and far below the
/// values broken readings produce (2^64−1 µJ in a 1 s interval is 1.8e13 W; a 900 J step
/// back read as a wrap of RAPL's 262 kJ range is 261 kW).
pub const DEFAULT_MAX_READING_POWER: Watts = Watts(20_000.0);

/// The shortest interval a delta is judged over: a zero interval (two readings stamped at the
/// same instant, in tests) would make any energy infinitely powerful.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Limits a reading must respect to be counted.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct EnergyLimits {
    /// Average power one reading may imply over an interval (`monitor.maxReadingWatts`).
    pub max_power: Watts,
}

impl Default for EnergyLimits {
    fn default() -> Self {
        EnergyLimits {
            max_power: DEFAULT_MAX_READING_POWER,
        }
    }
}

impl EnergyLimits {
    /// Limits with `max_power` as the ceiling; a ceiling that is not a positive finite number
    /// is refused with a message naming the value.
    pub fn with_max_power(max_power: Watts) -> Result<Self, String> {
        if max_power.0.is_finite() && max_power.0 > 0.0 {
            Ok(EnergyLimits { max_power })
        } else {
            Err(format!(
                "the power ceiling must be a positive number of watts, not {}",
                max_power.0
            ))
        }
    }

    /// The most energy one reading may add over `interval`.
    pub fn max_energy(&self, interval: Duration) -> MicroJoules {
        self.max_power.during(interval.max(MIN_INTERVAL))
    }

    /// Whether `energy` over `interval` is a power this reading could draw; `Err` carries the
    /// implied watts.
    pub fn check_energy(&self, energy: MicroJoules, interval: Duration) -> Result<(), Watts> {
        if energy <= self.max_energy(interval) {
            Ok(())
        } else {
            Err(energy.over(interval.max(MIN_INTERVAL)))
        }
    }

    /// Whether a power reading is a number a device could show: finite, not negative, and
    /// under the ceiling.
    pub fn check_power(&self, power: Watts) -> Result<(), Watts> {
        if power.0.is_finite() && power.0 >= 0.0 && power.0 <= self.max_power.0 {
            Ok(())
        } else {
            Err(power)
        }
    }
}

/// Whether a counter that went from `previous` down to `current` can have wrapped at `max`
/// (counting 0..=max) rather than stepped back or been reset. A real wrap adds only the
/// little energy of one interval; a counter that stepped back by a few joules, or was reset
/// to 0 from low in its range, would instead add most of the range at once. A delta above
/// three quarters of the range is taken for the latter; a sampler that truly missed that much
/// of a wrap cannot tell how many wraps it missed either. Ranges under 1 kJ (simulations that
/// wrap every few seconds) are left to the power ceiling: there a late tick legitimately
/// spans most of the range.
///
/// Readings above `max` cannot come from a counter wrapping at `max`: `None` (this function is
/// public, so it does not rely on [`crate::energy::counter_delta`] having refused them first).
pub fn plausible_wrap(previous: u64, current: u64, max: u64) -> Option<u64> {
    if current > max {
        return None;
    }
    let delta = max
        .checked_sub(previous)?
        .checked_add(current)?
        .checked_add(1)?;
    (max < SMALL_RANGE || delta <= max - max / 4).then_some(delta)
}

/// 1 kJ in µJ; real RAPL ranges are hundreds of kJ.
const SMALL_RANGE: u64 = 1_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_back_is_no_wrap_but_a_real_wrap_is() {
        let max = 262_143_328_850;
        // 990 J before the top to 9 J after it: a wrap of 1 kJ... read as one.
        assert_eq!(
            plausible_wrap(max - 990_000_000, 9_000_000, max),
            Some(999_000_001)
        );
        // 900 J back from the middle of the range: not a wrap.
        assert_eq!(plausible_wrap(100_000_000_000, 99_100_000_000, max), None);
        // Reset to 0 from low in the range: not a wrap.
        assert_eq!(plausible_wrap(5_000_000_000, 0, max), None);
        assert_eq!(plausible_wrap(u64::MAX - 1, 0, u64::MAX - 1), Some(1));
        // Found by crates/meters/src/fuzz.rs: readings above the wrap point used to underflow.
        assert_eq!(plausible_wrap(10, 5, 8), None);
        assert_eq!(plausible_wrap(7, 9, 8), None);
    }

    #[test]
    fn limits_bound_energy_and_power() {
        let l = EnergyLimits::with_max_power(Watts(100.0)).unwrap();
        let s = Duration::from_secs(1);
        assert!(l.check_energy(MicroJoules(100_000_000), s).is_ok());
        assert_eq!(
            l.check_energy(MicroJoules(200_000_000), s),
            Err(Watts(200.0))
        );
        assert!(l
            .check_energy(MicroJoules(u64::MAX), Duration::ZERO)
            .is_err());
        assert!(l.check_power(Watts(99.0)).is_ok());
        assert!(l.check_power(Watts(f64::NAN)).is_err());
        assert!(l.check_power(Watts(-1.0)).is_err());
        assert!(l.check_power(Watts(1.8e13)).is_err());
        assert!(EnergyLimits::with_max_power(Watts(0.0)).is_err());
        assert!(EnergyLimits::with_max_power(Watts(f64::INFINITY)).is_err());
    }
}
