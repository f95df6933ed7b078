//! Basic auth and extra headers in front of a router that knows nothing about them.

mod support;

use std::time::Duration;

use reqwest::header::WWW_AUTHENTICATE;
use reqwest::StatusCode;
use support::{client, start, web_config, ROUTES};

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
    for (path, body) in ROUTES {
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

    let mut flood = tokio::task::JoinSet::new();
    for i in 0..48 {
        let (c, url) = (c.clone(), url.clone());
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
    // Every queued request still gets its answer.
    while let Some(result) = flood.join_next().await {
        assert_eq!(result.unwrap().unwrap(), StatusCode::UNAUTHORIZED);
    }
    srv.stop().await;
}
