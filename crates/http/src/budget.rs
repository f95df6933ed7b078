//! Per-client budgets of password checks, so that a client cannot buy bcrypt runs at will:
//! each client (an IPv4 address, or an IPv6 /64) has [`ATTEMPT_BURST`] checks, refilled one per
//! [`ATTEMPT_REFILL`], and at most one check waiting or running.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::rate_limit::{Bucket, RateLimit};

/// Checks a client may make at once before being limited...
pub(crate) const ATTEMPT_BURST: u32 = 10;
/// ... and how often it earns another: at cost 10, a few percent of one core per client.
pub(crate) const ATTEMPT_REFILL: Duration = Duration::from_secs(2);
/// Clients whose attempts are tracked; idle ones (full budget) are forgotten first.
const MAX_CLIENTS: usize = 4096;

fn attempt_limit() -> RateLimit {
    RateLimit {
        interval: ATTEMPT_REFILL,
        burst: ATTEMPT_BURST,
    }
}

pub(crate) struct Budgets {
    /// Check attempts left per client.
    attempts: Mutex<HashMap<IpAddr, Bucket>>,
    /// Shared by clients beyond [`MAX_CLIENTS`], so that many addresses cannot grow the table
    /// or get fresh budgets.
    overflow: Bucket,
    /// Clients with a check waiting or running.
    in_flight: Mutex<HashSet<IpAddr>>,
}

impl Budgets {
    pub(crate) fn new(now: Instant) -> Budgets {
        Budgets {
            attempts: Mutex::new(HashMap::new()),
            overflow: Bucket::new(attempt_limit(), now),
            in_flight: Mutex::new(HashSet::new()),
        }
    }

    /// Admits one check for `client`, or `None` if it has one in progress or no attempts
    /// left. The check holds its place until the returned value is dropped.
    ///
    /// One check at a time per client: a flood from a few addresses then holds a few places in
    /// the bcrypt queue, not all of them, and a new login is not stuck behind it.
    pub(crate) fn admit(&self, client: IpAddr, now: Instant) -> Option<InFlight<'_>> {
        let key = client_key(client);
        let flight = InFlight::enter(&self.in_flight, key)?;
        self.take_attempt(key, now).then_some(flight)
    }

    /// Spends one of `key`'s check attempts; false if it has none left.
    fn take_attempt(&self, key: IpAddr, now: Instant) -> bool {
        let mut table = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        if !table.contains_key(&key) && table.len() >= MAX_CLIENTS {
            table.retain(|_, bucket| !bucket.is_full(now));
            if table.len() >= MAX_CLIENTS {
                return self.overflow.allow(now);
            }
        }
        table
            .entry(key)
            .or_insert_with(|| Bucket::new(attempt_limit(), now))
            .allow(now)
    }
}

/// A client's place among those with a check in progress; leaving it frees the place.
pub(crate) struct InFlight<'a> {
    set: &'a Mutex<HashSet<IpAddr>>,
    key: IpAddr,
}

impl<'a> InFlight<'a> {
    fn enter(set: &'a Mutex<HashSet<IpAddr>>, key: IpAddr) -> Option<InFlight<'a>> {
        let fresh = set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key);
        fresh.then_some(InFlight { set, key })
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
    }
}

/// Whom attempts are counted for: an IPv4 address, or an IPv6 /64 (what one host or one
/// customer of a provider usually holds; counting single IPv6 addresses would give every
/// attacker 2^64 budgets).
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(Ipv6Addr::from(segments))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_are_counted_per_64() {
        let one: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let other: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let next: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(one), client_key(other));
        assert_ne!(client_key(one), client_key(next));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(client_key(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn one_check_at_a_time_and_a_burst_per_client() {
        let t0 = Instant::now();
        let b = Budgets::new(t0);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let first = b.admit(a, t0).expect("first check");
        assert!(
            b.admit(a, t0).is_none(),
            "a second check while one is in progress"
        );
        drop(first);
        for _ in 1..ATTEMPT_BURST {
            assert!(b.admit(a, t0).is_some());
        }
        assert!(b.admit(a, t0).is_none(), "burst spent");
        assert!(
            b.admit(a, t0 + ATTEMPT_REFILL).is_some(),
            "one more per refill"
        );
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        assert!(b.admit(other, t0).is_some());
    }
}
