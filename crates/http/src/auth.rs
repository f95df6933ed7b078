//! Basic auth against the web config's bcrypt hashes, and its extra response headers: one
//! middleware that the server puts in front of every route of the router it serves.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use ring::hmac;
use tokio::sync::Semaphore;

use crate::rate_limit::Bucket;
use crate::web_config::{BcryptHash, WebConfig, WebConfigError};

/// Basic auth and extra headers, applied to every route.
#[derive(Default)]
pub(crate) struct Guard {
    auth: Option<BasicAuth>,
    headers: Vec<(HeaderName, HeaderValue)>,
    rate: Option<Bucket>,
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
                .map(|limit| Bucket::new(limit, std::time::Instant::now())),
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
        .is_some_and(|b| !b.allow(std::time::Instant::now()))
    {
        let mut r = (StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n").into_response();
        for (name, value) in &guard.headers {
            r.headers_mut().insert(name.clone(), value.clone());
        }
        return r;
    }
    let mut response = match &guard.auth {
        Some(auth) if !auth.check(request.headers().get(AUTHORIZATION)).await => {
            let mut r = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
            r.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"kepler\", charset=\"UTF-8\""),
            );
            r
        }
        _ => next.run(request).await,
    };
    for (name, value) in &guard.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

/// Basic auth against bcrypt hashes. bcrypt is deliberately slow (tens of milliseconds at the
/// usual cost), too slow to pay on every scrape, so a successful check is remembered under an
/// HMAC of the presented credentials with a per-process random key: the cache holds no
/// password, and its keys are useless outside this process.
///
/// Failed checks are not cached, so every request with bad credentials costs a bcrypt run. To
/// keep an unauthenticated client from occupying every core with them, at most
/// [`BasicAuth::MAX_CONCURRENT_BCRYPT`] run at once and further requests wait their turn
/// (exporter-toolkit serialises them behind a mutex). Credentials already verified skip the
/// queue, so a scraper that has authenticated once keeps being answered during such a flood.
struct BasicAuth {
    users: HashMap<String, BcryptHash>,
    /// Checked for unknown users so that a wrong name costs as much as a wrong password, which
    /// keeps user names from being probed by timing.
    dummy_hash: String,
    key: hmac::Key,
    verified: Mutex<HashSet<[u8; 32]>>,
    /// One permit per bcrypt run allowed at a time.
    bcrypt_permits: Arc<Semaphore>,
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
    /// Small enough to leave cores for the tick loop and for scrapes; two rather than the
    /// toolkit's one so that a single check in progress does not stall every other login.
    const MAX_CONCURRENT_BCRYPT: usize = 2;

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
            verified: Mutex::new(HashSet::new()),
            bcrypt_permits: Arc::new(Semaphore::new(Self::MAX_CONCURRENT_BCRYPT)),
            bcrypt_running: Arc::default(),
        })
    }

    async fn check(&self, header: Option<&HeaderValue>) -> bool {
        let Some(decoded) = header.and_then(decode_basic) else {
            return false;
        };
        let mut tag = [0u8; 32];
        tag.copy_from_slice(hmac::sign(&self.key, &decoded).as_ref());
        if self.cache().contains(&tag) {
            return true;
        }

        let Some(colon) = decoded.iter().position(|&b| b == b':') else {
            return false;
        };
        let (user, password) = (&decoded[..colon], decoded[colon + 1..].to_vec());
        let user_hash = std::str::from_utf8(user)
            .ok()
            .and_then(|u| self.users.get(u));
        let (hash, known) = match user_hash {
            Some(h) => (h.as_str().to_string(), true),
            None => (self.dummy_hash.clone(), false),
        };
        // Wait for a turn (FIFO). The semaphore is never closed, so an error cannot happen;
        // should it, the request is refused rather than let through.
        let Ok(permit) = self.bcrypt_permits.clone().acquire_owned().await else {
            return false;
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
                cache.clear();
            }
            cache.insert(tag);
            true
        } else {
            false
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashSet<[u8; 32]>> {
        self.verified.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `Basic <base64(user:password)>` → the decoded bytes.
fn decode_basic(value: &HeaderValue) -> Option<Vec<u8>> {
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
        assert!(auth.check(Some(&good)).await);
        // That check ran bcrypt once; count from here.
        auth.bcrypt_running.peak.store(0, Ordering::SeqCst);

        // Take every permit: no bcrypt check can start until they are given back.
        let held = auth
            .bcrypt_permits
            .clone()
            .acquire_many_owned(BasicAuth::MAX_CONCURRENT_BCRYPT as u32)
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
            bad.spawn(async move { auth.check(Some(&header)).await });
        }
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        // Verified credentials are answered from the cache while the bad ones are queued. The
        // timeout only turns a hang (the cached path waiting for a permit) into a failure.
        let cached = tokio::time::timeout(Duration::from_secs(30), auth.check(Some(&good)))
            .await
            .expect("verified credentials must not wait for a bcrypt permit");
        assert!(cached);
        assert_eq!(auth.bcrypt_running.peak.load(Ordering::SeqCst), 0);

        drop(held);
        while let Some(result) = bad.join_next().await {
            assert!(!result.unwrap(), "bad credentials were accepted");
        }
        let peak = auth.bcrypt_running.peak.load(Ordering::SeqCst);
        assert!(
            (1..=BasicAuth::MAX_CONCURRENT_BCRYPT).contains(&peak),
            "{peak} bcrypt checks ran at once"
        );
        assert_eq!(auth.bcrypt_running.now.load(Ordering::SeqCst), 0);
        assert_eq!(
            auth.bcrypt_permits.available_permits(),
            BasicAuth::MAX_CONCURRENT_BCRYPT
        );
    }
}
