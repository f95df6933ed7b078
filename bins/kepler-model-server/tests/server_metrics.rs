//! `GET /metrics` of the real binary: requests by route and status and the latency histogram
//! count exactly the requests this test made, the models gauge matches the listing, the RSS
//! matches what the kernel reports for the server process, and promtool accepts the text.

mod support;

use std::collections::HashMap;
use std::process::{Command, Stdio};

use reqwest::StatusCode;
use serde_json::json;
use support::{client, model_db, serve};

/// `name{labels} value` lines by their series text.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn rss_of(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb * 1024.0
}

#[test]
fn metrics_count_requests_models_and_memory() {
    let db = model_db();
    let server = serve(db.path(), &[]);
    let request = json!({"metrics": ["bpf_cpu_time_ms"], "output_type": "AbsPower",
                         "source": "rapl-sysfs", "weight": true});
    for _ in 0..3 {
        let r = client()
            .post(server.url("/model"))
            .json(&request)
            .send()
            .expect("POST");
        assert_eq!(r.status(), StatusCode::OK);
    }
    let r = client()
        .post(server.url("/model"))
        .json(&json!({"metrics": ["no_such_feature"], "output_type": "AbsPower"}))
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = client()
        .get(server.url("/no/such/route"))
        .send()
        .expect("GET");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let listing: serde_json::Value = client()
        .get(server.url("/models"))
        .send()
        .expect("GET")
        .json()
        .expect("json");
    let listed = listing["models"].as_array().expect("models").len() as f64;
    let broken = listing["broken"].as_array().expect("broken").len() as f64;

    let r = client().get(server.url("/metrics")).send().expect("GET");
    assert_eq!(r.status(), StatusCode::OK);
    let rss_now = rss_of(server.pid());
    let text = r.text().expect("text");
    let s = samples(&text);
    let get = |k: &str| *s.get(k).unwrap_or_else(|| panic!("{k} missing in\n{text}"));

    let req = "kepler_model_server_http_requests_total";
    assert_eq!(
        get(&format!("{req}{{route=\"/model\",status=\"200\"}}")),
        3.0
    );
    assert_eq!(
        get(&format!("{req}{{route=\"/model\",status=\"400\"}}")),
        1.0
    );
    assert_eq!(
        get(&format!("{req}{{route=\"unmatched\",status=\"404\"}}")),
        1.0
    );
    assert_eq!(
        get(&format!("{req}{{route=\"/models\",status=\"200\"}}")),
        1.0
    );
    let h = "kepler_model_server_http_request_duration_seconds";
    assert_eq!(get(&format!("{h}_count{{route=\"/model\"}}")), 4.0);
    assert_eq!(
        get(&format!("{h}_bucket{{route=\"/model\",le=\"+Inf\"}}")),
        4.0
    );
    assert!(get(&format!("{h}_sum{{route=\"/model\"}}")) > 0.0);
    assert_eq!(get("kepler_model_server_models_loaded"), listed);
    assert!(listed > 0.0, "the published pipelines are loaded: {listed}");
    assert_eq!(get("kepler_model_server_models_broken"), broken);
    // The RSS was read moments apart from the kernel's figure; an idle server barely moves.
    let rss = get("process_resident_memory_bytes");
    assert!(
        (rss - rss_now).abs() < 0.25 * rss_now,
        "RSS {rss} vs /proc {rss_now}"
    );

    let have_promtool = Command::new("sh")
        .args(["-c", "command -v promtool"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_promtool {
        assert!(
            std::env::var("KEPLER_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "promtool missing (KEPLER_REQUIRE_TOOLS=1)"
        );
        eprintln!("SKIP promtool check: promtool not installed");
        return;
    }
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    use std::io::Write;
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = check.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Refusals happen before any route, so they are counted apart from the requests: each 401 of
/// basic auth and each 429 of the web config's rate limit, exactly as this test caused them.
#[test]
fn refusals_of_auth_and_the_rate_limit_are_counted() {
    let db = model_db();
    let conf = tempfile::tempdir().expect("tempdir");
    let hash = bcrypt::hash("s3cret", 4).expect("bcrypt");
    let web = conf.path().join("web.yml");
    // Six requests at once, then one every 2 s.
    std::fs::write(
        &web,
        format!("basic_auth_users:\n  kepler: {hash}\nrate_limit:\n  interval: 2s\n  burst: 6\n"),
    )
    .expect("write");
    let server = serve(
        db.path(),
        &["--web.config-file", web.to_str().expect("path")],
    );
    let get = |password: Option<&str>, path: &str| {
        let mut r = client().get(server.url(path));
        if let Some(p) = password {
            r = r.basic_auth("kepler", Some(p));
        }
        r.send().expect("GET")
    };
    let statuses: Vec<u16> = [None, Some("wrong"), Some("s3cret")]
        .into_iter()
        .map(|p| get(p, "/models").status().as_u16())
        .collect();
    assert_eq!(statuses, [401, 401, 200]);
    // Spend the burst until the limit answers, counting every 429 this test receives.
    let mut limited = 0;
    for _ in 0..50 {
        if get(Some("s3cret"), "/models").status() == StatusCode::TOO_MANY_REQUESTS {
            limited += 1;
            if limited == 3 {
                break;
            }
        }
    }
    assert_eq!(limited, 3, "the rate limit never answered 429");
    let text = loop {
        let r = get(Some("s3cret"), "/metrics");
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            limited += 1;
            std::thread::sleep(std::time::Duration::from_millis(500));
            continue;
        }
        assert_eq!(r.status(), StatusCode::OK);
        break r.text().expect("text");
    };
    let s = samples(&text);
    let refused = |reason: &str| {
        s.get(&format!(
            "kepler_model_server_http_refused_total{{reason=\"{reason}\"}}"
        ))
        .copied()
        .unwrap_or_else(|| panic!("{reason} missing in\n{text}"))
    };
    assert_eq!(refused("unauthorized"), 2.0);
    assert_eq!(refused("rate_limited"), f64::from(limited));
    assert_eq!(refused("connection_limit"), 0.0);
}
