//! Basic auth against the web config's bcrypt hashes, and its extra response headers: one
//! middleware that the server puts in front of every route of the router it serves.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{AUTHORIZATION, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use ring::hmac;
use tokio::sync::Semaphore;

use crate::budget::Budgets;
use crate::rate_limit::Bucket;
use crate::refusals::{Refusal, Refusals};
use crate::web_config::{BcryptHash, WebConfig, WebConfigError};

/// Basic auth and extra headers, applied to every route.
#[derive(Default)]
pub(crate) struct Guard {
    auth: Option<BasicAuth>,
    headers: Vec<(HeaderName, HeaderValue)>,
    rate: Option<Bucket>,
    pub(crate) refusals: Arc<Refusals>,
}

impl Guard {
    /// `web` was checked when it was parsed (header names and values, bcrypt hashes); what can
    /// still fail here is preparing basic auth (randomness, the dummy hash).
    pub(crate) fn new(web: &WebConfig) -> Result<Guard, WebConfigError> {
        let auth = if web.basic_auth_users.is_empty() {
            None
        } else {
            Some(BasicAuth::new(web)?)
        };
        Ok(Guard {
            auth,
            headers: web.headers.clone(),
            rate: web
                .rate_limit
                .map(|limit| Bucket::new(limit, Instant::now())),
            refusals: Arc::default(),
        })
    }

    pub(crate) fn has_basic_auth(&self) -> bool {
        self.auth.is_some()
    }
}

pub(crate) async fn guard_layer(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    // First, so that a flood costs neither handlers nor bcrypt.
    if guard
        .rate
        .as_ref()
        .is_some_and(|b| !b.allow(Instant::now()))
    {
        guard.refusals.count(Refusal::RateLimited);
        let mut r = too_many();
        for (name, value) in &guard.headers {
            r.headers_mut().insert(name.clone(), value.clone());
        }
        return r;
    }
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let verdict = match &guard.auth {
        Some(auth) => {
            auth.check(request.headers().get(AUTHORIZATION), client)
                .await
        }
        None => Verdict::Allowed,
    };
    let mut response = match verdict {
        Verdict::Allowed => next.run(request).await,
        Verdict::Denied => {
            guard.refusals.count(Refusal::Unauthorized);
            let mut r = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
            r.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"kepler\", charset=\"UTF-8\""),
            );
            r
        }
        Verdict::Limited => {
            guard.refusals.count(Refusal::RateLimited);
            too_many()
        }
    };
    for (name, value) in &guard.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

fn too_many() -> Response {
    let mut r = (StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n").into_response();
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("2"));
    r
}

/// The outcome of checking one request's credentials.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allowed,
    /// Missing or wrong credentials: 401.
    Denied,
    /// Not checked: the client spent its attempts, or too many checks are queued: 429.
    Limited,
}

/// Basic auth against bcrypt hashes. bcrypt is deliberately slow (tens of milliseconds at the
/// usual cost), too slow to pay on every scrape, so a successful check is remembered for
/// [`BasicAuth::VERIFIED_TTL`] under an HMAC of the presented credentials with a per-process
/// random key: the cache holds no password, and its keys are useless outside this process.
///
/// Credentials not in the cache cost a bcrypt run, which an unauthenticated client must not be
/// able to buy at will, or the agent measuring the node becomes its biggest consumer:
/// - each client (an IPv4 address, or an IPv6 /64) has [`crate::budget::ATTEMPT_BURST`] checks,
///   refilled one per [`crate::budget::ATTEMPT_REFILL`]; past that it gets 429 without a check;
/// - each client has at most one check waiting or running;
/// - at most [`BasicAuth::max_concurrent_bcrypt`] checks run at once, off the async workers,
///   and at most [`BasicAuth::MAX_WAITING`] wait for a turn; further ones get 429.
///
/// Credentials already verified skip all of this, so a scraper that has authenticated once
/// keeps being answered during a flood.
struct BasicAuth {
    users: HashMap<String, BcryptHash>,
    /// Checked for unknown users so that a wrong name costs as much as a wrong password, which
    /// keeps user names from being probed by timing.
    dummy_hash: String,
    key: hmac::Key,
    /// Verified credentials' tags and when they were verified.
    verified: Mutex<HashMap<[u8; 32], Instant>>,
    /// Check attempts left per client, and which clients have a check in progress.
    budgets: Budgets,
    /// One permit per bcrypt run allowed at a time.
    bcrypt_permits: Arc<Semaphore>,
    /// Checks waiting for a permit.
    waiting: AtomicUsize,
    /// bcrypt runs in progress and the most seen at once, so that tests can check the bound.
    bcrypt_running: Arc<BcryptRunning>,
}

#[derive(Default)]
struct BcryptRunning {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl BasicAuth {
    /// Bounds the cache; every entry is a distinct valid credential, so this is only reached
    /// by many users or password changes without restart.
    const MAX_CACHED: usize = 1024;
    /// How long a verified credential is trusted without another bcrypt run. Short enough that
    /// a leaked, since-removed entry does not live on for long; long enough that a scraper
    /// every 15–60 s pays bcrypt once every several scrapes.
    const VERIFIED_TTL: Duration = Duration::from_secs(300);
    /// Checks allowed to wait for a bcrypt turn.
    const MAX_WAITING: usize = 64;

    /// One bcrypt run at a time per four cores, at least one, so that a flood of logins from
    /// many clients leaves cores for the tick loop and for scrapes (exporter-toolkit
    /// serialises all checks).
    fn max_concurrent_bcrypt() -> usize {
        std::thread::available_parallelism()
            .map(|n| n.get() / 4)
            .unwrap_or(1)
            .max(1)
    }

    fn new(web: &WebConfig) -> Result<BasicAuth, WebConfigError> {
        let err = |message: String| WebConfigError::Field {
            file: web.file.clone(),
            field: "basic_auth_users".to_string(),
            message,
        };
        // bcrypt's minimum cost; the dummy hash costs as much as the dearest real one.
        let cost = web
            .basic_auth_users
            .values()
            .map(BcryptHash::cost)
            .fold(4, u32::max);
        let dummy_hash = bcrypt::hash("kepler-dummy-password", cost)
            .map_err(|e| err(format!("preparing bcrypt: {e}")))?;
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| err("no system randomness".into()))?;
        Ok(BasicAuth {
            users: web.basic_auth_users.clone().into_iter().collect(),
            dummy_hash,
            key,
            verified: Mutex::new(HashMap::new()),
            budgets: Budgets::new(Instant::now()),
            bcrypt_permits: Arc::new(Semaphore::new(Self::max_concurrent_bcrypt())),
            waiting: AtomicUsize::new(0),
            bcrypt_running: Arc::default(),
        })
    }

    async fn check(&self, header: Option<&HeaderValue>, client: Option<IpAddr>) -> Verdict {
        let Some(decoded) = header.and_then(decode_basic) else {
            return Verdict::Denied;
        };
        let mut tag = [0u8; 32];
        tag.copy_from_slice(hmac::sign(&self.key, &decoded).as_ref());
        let now = Instant::now();
        if self
            .cache()
            .get(&tag)
            .is_some_and(|at| now.saturating_duration_since(*at) < Self::VERIFIED_TTL)
        {
            return Verdict::Allowed;
        }

        let Some(colon) = decoded.iter().position(|&b| b == b':') else {
            return Verdict::Denied;
        };
        let _admitted = match client {
            Some(client) => match self.budgets.admit(client, now) {
                Some(admitted) => Some(admitted),
                None => return Verdict::Limited,
            },
            None => None,
        };
        let (user, password) = (&decoded[..colon], decoded[colon + 1..].to_vec());
        let user_hash = std::str::from_utf8(user)
            .ok()
            .and_then(|u| self.users.get(u));
        let (hash, known) = match user_hash {
            Some(h) => (h.as_str().to_string(), true),
            None => (self.dummy_hash.clone(), false),
        };
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= Self::MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Verdict::Limited;
        }
        // Wait for a turn (FIFO). The semaphore is never closed, so an error cannot happen;
        // should it, the request is refused rather than let through.
        let permit = self.bcrypt_permits.clone().acquire_owned().await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        let Ok(permit) = permit else {
            return Verdict::Denied;
        };
        let running = self.bcrypt_running.clone();
        // bcrypt blocks for tens of milliseconds: keep it off the async workers. Passwords
        // longer than bcrypt's 72 bytes are rejected rather than truncated, as Go's bcrypt does.
        let ok = tokio::task::spawn_blocking(move || {
            // The permit lives in the blocking task, not in the request: a client that hangs
            // up mid-check would otherwise free its permit while bcrypt still runs.
            let _permit = permit;
            let now = running.now.fetch_add(1, Ordering::SeqCst) + 1;
            running.peak.fetch_max(now, Ordering::SeqCst);
            let ok = bcrypt::non_truncating_verify(&password, &hash).unwrap_or(false);
            running.now.fetch_sub(1, Ordering::SeqCst);
            ok
        })
        .await
        .unwrap_or(false);
        if ok && known {
            let mut cache = self.cache();
            if cache.len() >= Self::MAX_CACHED {
                cache.retain(|_, at| now.saturating_duration_since(*at) < Self::VERIFIED_TTL);
                if cache.len() >= Self::MAX_CACHED {
                    cache.clear();
                }
            }
            cache.insert(tag, Instant::now());
            Verdict::Allowed
        } else {
            Verdict::Denied
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Instant>> {
        self.verified.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `Basic <base64(user:password)>` → the decoded bytes.
pub(crate) fn decode_basic(value: &HeaderValue) -> Option<Vec<u8>> {
    let value = value.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::budget;

    #[test]
    fn basic_header_decoding() {
        let v = HeaderValue::from_static("Basic YWxpY2U6c2VjcmV0");
        assert_eq!(decode_basic(&v).unwrap(), b"alice:secret");
        let v = HeaderValue::from_static("basic   YWxpY2U6c2VjcmV0 ");
        assert_eq!(decode_basic(&v).unwrap(), b"alice:secret");
        assert!(decode_basic(&HeaderValue::from_static("Bearer abc")).is_none());
        assert!(decode_basic(&HeaderValue::from_static("Basic !!!")).is_none());
    }

    fn basic(user: &str, password: &str) -> HeaderValue {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {encoded}")).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bcrypt_checks_are_bounded_and_verified_credentials_skip_the_queue() {
        // Cost 6 makes each check long enough that, without the bound, many would overlap.
        let hash = bcrypt::hash("s3cret", 6).unwrap();
        let web = WebConfig::parse(
            &format!("basic_auth_users:\n  alice: '{hash}'\n"),
            std::path::Path::new("."),
            "web.yml",
        )
        .unwrap();
        let auth = Arc::new(BasicAuth::new(&web).unwrap());
        let good = basic("alice", "s3cret");
        assert_eq!(auth.check(Some(&good), None).await, Verdict::Allowed);
        // That check ran bcrypt once; count from here.
        auth.bcrypt_running.peak.store(0, Ordering::SeqCst);

        // Take every permit: no bcrypt check can start until they are given back.
        let held = auth
            .bcrypt_permits
            .clone()
            .acquire_many_owned(BasicAuth::max_concurrent_bcrypt() as u32)
            .await
            .unwrap();
        let mut bad = tokio::task::JoinSet::new();
        for i in 0..32 {
            let auth = auth.clone();
            // Wrong passwords and unknown users: both cost a bcrypt run.
            let header = if i % 2 == 0 {
                basic("alice", &format!("guess{i}"))
            } else {
                basic(&format!("user{i}"), "s3cret")
            };
            bad.spawn(async move { auth.check(Some(&header), None).await });
        }
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        // Verified credentials are answered from the cache while the bad ones are queued. The
        // timeout only turns a hang (the cached path waiting for a permit) into a failure.
        let cached = tokio::time::timeout(Duration::from_secs(30), auth.check(Some(&good), None))
            .await
            .expect("verified credentials must not wait for a bcrypt permit");
        assert_eq!(cached, Verdict::Allowed);
        assert_eq!(auth.bcrypt_running.peak.load(Ordering::SeqCst), 0);

        drop(held);
        while let Some(result) = bad.join_next().await {
            assert_eq!(
                result.unwrap(),
                Verdict::Denied,
                "bad credentials were accepted"
            );
        }
        let peak = auth.bcrypt_running.peak.load(Ordering::SeqCst);
        assert!(
            (1..=BasicAuth::max_concurrent_bcrypt()).contains(&peak),
            "{peak} bcrypt checks ran at once"
        );
        assert_eq!(auth.bcrypt_running.now.load(Ordering::SeqCst), 0);
        assert_eq!(
            auth.bcrypt_permits.available_permits(),
            BasicAuth::max_concurrent_bcrypt()
        );
    }

    fn alice(cost: u32) -> BasicAuth {
        let hash = bcrypt::hash("s3cret", cost).unwrap();
        let web = WebConfig::parse(
            &format!("basic_auth_users:\n  alice: '{hash}'\n"),
            std::path::Path::new("."),
            "web.yml",
        )
        .unwrap();
        BasicAuth::new(&web).unwrap()
    }

    #[tokio::test]
    async fn each_client_has_a_budget_of_checks() {
        let auth = alice(4);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for i in 0..budget::ATTEMPT_BURST {
            let v = auth
                .check(Some(&basic("alice", &format!("guess{i}"))), Some(a))
                .await;
            assert_eq!(v, Verdict::Denied, "attempt {i}");
        }
        // Spent: not even the right password is checked for this client now.
        assert_eq!(
            auth.check(Some(&basic("alice", "x")), Some(a)).await,
            Verdict::Limited
        );
        assert_eq!(
            auth.check(Some(&basic("alice", "s3cret")), Some(a)).await,
            Verdict::Limited
        );
        // Another client is unaffected, and once verified is let in without spending attempts.
        let good = basic("alice", "s3cret");
        assert_eq!(auth.check(Some(&good), Some(b)).await, Verdict::Allowed);
        // Verified credentials are answered from the cache even for the limited client.
        assert_eq!(auth.check(Some(&good), Some(a)).await, Verdict::Allowed);
        // Missing or malformed headers cost nothing and are plain 401s.
        assert_eq!(auth.check(None, Some(a)).await, Verdict::Denied);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checks_beyond_the_queue_are_limited_not_queued() {
        let auth = Arc::new(alice(4));
        let held = auth
            .bcrypt_permits
            .clone()
            .acquire_many_owned(BasicAuth::max_concurrent_bcrypt() as u32)
            .await
            .unwrap();
        let mut queued = tokio::task::JoinSet::new();
        for i in 0..BasicAuth::MAX_WAITING {
            let auth = auth.clone();
            queued.spawn(async move {
                auth.check(Some(&basic("alice", &format!("g{i}"))), None)
                    .await
            });
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while auth.waiting.load(Ordering::SeqCst) < BasicAuth::MAX_WAITING {
            assert!(std::time::Instant::now() < deadline, "checks did not queue");
            tokio::task::yield_now().await;
        }
        assert_eq!(
            auth.check(Some(&basic("alice", "one-more")), None).await,
            Verdict::Limited
        );
        drop(held);
        while let Some(v) = queued.join_next().await {
            assert_eq!(v.unwrap(), Verdict::Denied);
        }
        assert_eq!(auth.waiting.load(Ordering::SeqCst), 0);
    }
}
