//! Basic auth and extra headers in front of a router that knows nothing about them.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::WWW_AUTHENTICATE;
use reqwest::StatusCode;
use support::{client, client_from, start, web_config, ROUTES};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_guards_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = web_config(
        dir.path(),
        &format!(
            "basic_auth_users:\n  alice: '{hash}'\nhttp_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
        ),
    );
    let srv = start(Some(web)).await;
    let c = client();
    for (i, (path, body)) in ROUTES.into_iter().enumerate() {
        // One client address per route: each has its own budget of password checks.
        let c = client_from(&format!("127.0.0.{}", 10 + i));
        let url = format!("http://{}{path}", srv.addr);
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(
            r.status(),
            StatusCode::UNAUTHORIZED,
            "{path} without credentials"
        );
        assert!(r.headers()[WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .starts_with("Basic"));
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");

        for (user, pass) in [("alice", "wrong"), ("bob", "s3cret"), ("alice", "")] {
            let r = c
                .get(&url)
                .basic_auth(user, Some(pass))
                .send()
                .await
                .unwrap();
            assert_eq!(
                r.status(),
                StatusCode::UNAUTHORIZED,
                "{path} as {user}:{pass}"
            );
        }
        // Twice: the second check is answered from the cache.
        for _ in 0..2 {
            let r = c
                .get(&url)
                .basic_auth("alice", Some("s3cret"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{path} with credentials");
            assert_eq!(r.headers()["x-content-type-options"], "nosniff");
            assert_eq!(r.text().await.unwrap(), body);
        }
    }
    // Other methods and unknown paths are guarded too: without credentials nothing tells
    // which routes exist.
    let r = c
        .post(format!("http://{}/echo", srv.addr))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let nope = format!("http://{}/nope", srv.addr);
    assert_eq!(
        c.get(&nope).send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let r = c
        .get(&nope)
        .basic_auth("alice", Some("s3cret"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    // A cached success must not leak to another password.
    let r = c
        .get(format!("http://{}/healthz", srv.addr))
        .basic_auth("alice", Some("s3cret2"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_users_nothing_is_guarded() {
    let dir = tempfile::tempdir().unwrap();
    let web = web_config(
        dir.path(),
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    );
    let srv = start(Some(web)).await;
    let r = client()
        .get(format!("http://{}/healthz", srv.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-frame-options"], "deny");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_credentials_does_not_lock_out_a_verified_client() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 6).unwrap();
    let web = web_config(
        dir.path(),
        &format!("basic_auth_users:\n  alice: '{hash}'\n"),
    );
    let srv = start(Some(web)).await;
    let url = format!("http://{}/healthz", srv.addr);
    // Generous: the flood is served a few bcrypt runs at a time, and this box may be loaded.
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let alice = |c: &reqwest::Client| c.get(&url).basic_auth("alice", Some("s3cret")).send();
    assert_eq!(alice(&c).await.unwrap().status(), StatusCode::OK);

    let attacker = client_from("127.0.0.2");
    let mut flood = tokio::task::JoinSet::new();
    for i in 0..48 {
        let (c, url) = (attacker.clone(), url.clone());
        flood.spawn(async move {
            let user = if i % 2 == 0 { "alice" } else { "mallory" };
            c.get(&url)
                .basic_auth(user, Some(format!("guess{i}")))
                .send()
                .await
                .map(|r| r.status())
        });
    }
    // Served from the credential cache, without queueing behind the flood's bcrypt runs.
    for _ in 0..5 {
        assert_eq!(alice(&c).await.unwrap().status(), StatusCode::OK);
    }
    // Every request gets an answer: a check (401) while the attacker has attempts left, then
    // 429 without one.
    let (mut checked, mut limited) = (0, 0);
    while let Some(result) = flood.join_next().await {
        match result.unwrap().unwrap() {
            StatusCode::UNAUTHORIZED => checked += 1,
            StatusCode::TOO_MANY_REQUESTS => limited += 1,
            other => panic!("flood answered {other}"),
        }
    }
    // One check at a time for the attacker, and 10 at most before it must wait 2 s a check.
    assert!(
        checked >= 1 && limited >= 1,
        "{checked} checked, {limited} limited"
    );
    assert!(checked <= 10, "{checked} bad passwords were checked");
    srv.stop().await;
}

/// The brute force: many connections sending bad passwords at bcrypt cost 10, from a
/// few addresses. Each answer says whether bcrypt ran (401) or not (429), so the number of
/// checks the flood bought is counted exactly; a client logging in for the first time (not in
/// the credential cache) must get through well within Prometheus' 10 s scrape timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brute_force_buys_few_checks_and_does_not_delay_a_new_login() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 10).unwrap();
    let web = web_config(
        dir.path(),
        &format!("basic_auth_users:\n  alice: '{hash}'\n"),
    );
    let srv = start(Some(web)).await;
    let url = format!("http://{}/healthz", srv.addr);

    // The cost of one check on this machine now (debug builds run bcrypt slowly), as the
    // yardstick for the login below.
    let solo = Instant::now();
    let r = client_from("127.0.0.5")
        .get(&url)
        .basic_auth("alice", Some("s3cret"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let one_check = solo.elapsed();

    const ATTACKERS: usize = 4;
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut flood = tokio::task::JoinSet::new();
    for i in 0..100 {
        let attacker = client_from(&format!("127.0.1.{}", 1 + i % ATTACKERS));
        let (url, stop) = (url.clone(), stop.clone());
        flood.spawn(async move {
            let (mut checked, mut n) = (0u32, 0u32);
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let r = attacker
                    .get(&url)
                    .basic_auth("alice", Some(format!("guess{i}-{n}")))
                    .send()
                    .await;
                match r.map(|r| r.status()) {
                    Ok(StatusCode::UNAUTHORIZED) => checked += 1,
                    // Limited: try again soon (a real attacker would not wait; this only
                    // keeps the clients, which share this process, from starving the server).
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
            checked
        });
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let login = Instant::now();
    let r = client_from("127.0.0.6")
        .get(&url)
        .basic_auth("alice", Some("s3cret"))
        .send()
        .await
        .unwrap();
    let took = login.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut checked = 0;
    while let Some(n) = flood.join_next().await {
        checked += n.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(r.status(), StatusCode::OK);
    // At most one attacker check at a time per address runs before it: a few checks' time.
    assert!(
        took < Duration::from_secs(10).max(one_check * 12),
        "a new login took {took:?} during the flood (one check alone: {one_check:?})"
    );
    // Per attacking address: 10 at once, then one per 2 s.
    let budget = ATTACKERS as f64 * (10.0 + elapsed / 2.0 + 1.0);
    assert!(
        f64::from(checked) <= budget,
        "the flood bought {checked} bcrypt checks in {elapsed:.1} s (budget {budget:.0})"
    );
    srv.stop().await;
}
