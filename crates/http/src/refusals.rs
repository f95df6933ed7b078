//! Counts of what the server turned away, for the binaries to export: a flood of wrong
//! passwords or a client at the connection cap is otherwise visible only as one log line.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a connection or request was turned away.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A connection found every slot taken and waited in the listen backlog for one.
    ConnectionLimit,
    /// Missing or wrong basic-auth credentials: 401.
    Unauthorized,
    /// The web config's rate limit or the client's budget of password checks: 429.
    RateLimited,
}

impl Refusal {
    pub const ALL: [Refusal; 3] = [
        Refusal::ConnectionLimit,
        Refusal::Unauthorized,
        Refusal::RateLimited,
    ];

    /// The `reason` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::ConnectionLimit => "connection_limit",
            Refusal::Unauthorized => "unauthorized",
            Refusal::RateLimited => "rate_limited",
        }
    }
}

/// Counters of [`Refusal`]s since start; shared by every listener of a server.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: [AtomicU64; 3],
}

impl Refusals {
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn count(&self, refusal: Refusal) {
        self.counts[refusal as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, refusal: Refusal) -> u64 {
        self.counts[refusal as usize].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_own_counter() {
        let r = Refusals::new();
        r.count(Refusal::Unauthorized);
        r.count(Refusal::Unauthorized);
        r.count(Refusal::RateLimited);
        let counts: Vec<u64> = Refusal::ALL.iter().map(|&k| r.get(k)).collect();
        assert_eq!(counts, vec![0, 2, 1]);
    }
}
