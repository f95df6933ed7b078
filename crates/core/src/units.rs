//! Physical units as types, so that joules, micro-joules and watts never mix silently.

use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// Energy in micro-joules. Integer so that sums over workloads are exact.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MicroJoules(pub u64);

impl MicroJoules {
    pub const ZERO: MicroJoules = MicroJoules(0);

    pub fn as_joules(self) -> f64 {
        self.0 as f64 / 1e6
    }

    pub fn saturating_sub(self, other: MicroJoules) -> MicroJoules {
        MicroJoules(self.0.saturating_sub(other.0))
    }

    /// Average power of this energy spread over `interval`; zero for an empty interval.
    pub fn over(self, interval: Duration) -> Watts {
        let secs = interval.as_secs_f64();
        if secs > 0.0 {
            Watts(self.as_joules() / secs)
        } else {
            Watts(0.0)
        }
    }
}

impl Add for MicroJoules {
    type Output = MicroJoules;
    fn add(self, rhs: MicroJoules) -> MicroJoules {
        MicroJoules(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for MicroJoules {
    fn add_assign(&mut self, rhs: MicroJoules) {
        self.0 = self.0.saturating_add(rhs.0);
    }
}

impl Sub for MicroJoules {
    type Output = MicroJoules;
    /// Saturating: energy never goes negative.
    fn sub(self, rhs: MicroJoules) -> MicroJoules {
        self.saturating_sub(rhs)
    }
}

/// Power in watts.
#[derive(Copy, Clone, Debug, Default, PartialEq, PartialOrd)]
pub struct Watts(pub f64);

impl Watts {
    /// Energy delivered at this power during `interval`, rounded to the nearest micro-joule.
    /// Negative or non-finite power counts as none.
    pub fn during(self, interval: Duration) -> MicroJoules {
        let uj = self.0 * interval.as_secs_f64() * 1e6;
        if uj.is_finite() && uj > 0.0 {
            MicroJoules(uj.round().min(u64::MAX as f64) as u64)
        } else {
            MicroJoules::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn energy_and_power_round_trip() {
        let e = Watts(12.5).during(Duration::from_secs(2));
        assert_eq!(e, MicroJoules(25_000_000));
        assert!((e.over(Duration::from_secs(2)).0 - 12.5).abs() < 1e-12);
    }

    #[test]
    fn bad_power_counts_as_none() {
        assert_eq!(
            Watts(-3.0).during(Duration::from_secs(1)),
            MicroJoules::ZERO
        );
        assert_eq!(
            Watts(f64::NAN).during(Duration::from_secs(1)),
            MicroJoules::ZERO
        );
        assert_eq!(MicroJoules(5).over(Duration::ZERO), Watts(0.0));
    }
}
