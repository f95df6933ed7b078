//! A fake Kubernetes node for tests: one HTTPS server (self-signed certificate, bearer token
//! required) that plays the kubelet (`GET /pods`) and the API server (`GET
//! /api/v1/nodes/<node>`, and pods listed and watched with `fieldSelector=spec.nodeName=<node>`,
//! resumable on `resourceVersion`, 410 Gone for versions older than the last [`FakeKube::expire`]).
//! It can be stopped and started again on the same port with the same state, to play a
//! server that goes away and comes back.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

/// A pod object as the kubelet and the API server answer it: `containers` are
/// (container name, container id without runtime prefix).
pub fn pod(uid: &str, name: &str, namespace: &str, containers: &[(&str, &str)]) -> Value {
    let statuses: Vec<Value> = containers
        .iter()
        .map(|(name, id)| {
            json!({"name": name, "containerID": format!("containerd://{id}"), "ready": true,
                   "restartCount": 0, "state": {"running": {"startedAt": "2026-11-25T10:00:00Z"}}})
        })
        .collect();
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"nodeName": "set-by-the-fake"},
        "status": {"phase": "Running", "containerStatuses": statuses},
    })
}

#[derive(Default)]
struct Cluster {
    token: String,
    node: String,
    /// The port the node object gives as the kubelet's.
    port: u16,
    pods: BTreeMap<String, Value>,
    version: u64,
    /// Watches from versions below this answer 410 Gone.
    oldest: u64,
    /// (version, event line) of every change, replayed to watches that resume.
    events: Vec<(u64, String)>,
    watchers: Vec<UnboundedSender<String>>,
    /// Path and query of every authorised request, in order.
    requests: Vec<String>,
    unauthorised: usize,
}

type Shared = Arc<Mutex<Cluster>>;

pub struct FakeKube {
    pub port: u16,
    pub dir: tempfile::TempDir,
    state: Shared,
    running: Option<(tokio::sync::oneshot::Sender<()>, JoinHandle<()>)>,
}

impl FakeKube {
    /// Serves on a fresh loopback port for node `node`, requiring `token`.
    pub fn start(node: &str, token: &str) -> FakeKube {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = rcgen::generate_simple_self_signed(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
        ])
        .expect("certificate");
        std::fs::write(dir.path().join("ca.crt"), cert.cert.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), cert.signing_key.serialize_pem()).unwrap();
        std::fs::write(
            dir.path().join("web.yaml"),
            "tls_server_config:\n  cert_file: ca.crt\n  key_file: tls.key\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("token"), format!("{token}\n")).unwrap();
        let state = Arc::new(Mutex::new(Cluster {
            token: token.to_string(),
            node: node.to_string(),
            version: 100,
            ..Cluster::default()
        }));
        let mut fake = FakeKube {
            port: 0,
            dir,
            state,
            running: None,
        };
        fake.serve(0);
        let ca = fake.ca_file();
        std::fs::write(
            fake.dir.path().join("kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
                 contexts:\n- name: fake\n  context: {{cluster: fake, user: agent}}\n\
                 clusters:\n- name: fake\n  cluster:\n    server: {}\n    \
                 certificate-authority: {}\n\
                 users:\n- name: agent\n  user:\n    tokenFile: token\n",
                fake.url(),
                ca.display()
            ),
        )
        .unwrap();
        fake
    }

    fn serve(&mut self, port: u16) {
        let web = kepler_http::WebConfig::load(&self.dir.path().join("web.yaml")).expect("web");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let address = format!("127.0.0.1:{port}");
        let server = runtime
            .block_on(kepler_http::Server::bind(&[address], Some(web)))
            .expect("bind the fake");
        self.port = server.local_addrs()[0].port();
        self.state.lock().unwrap().port = self.port;
        let router = Router::new()
            .route("/pods", get(kubelet_pods))
            .route("/api/v1/nodes/{name}", get(node))
            .route("/api/v1/pods", get(api_pods))
            .with_state(self.state.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let _ = runtime.block_on(server.serve(router, async {
                let _ = stopped.await;
            }));
        });
        self.running = Some((stop, thread));
    }

    /// The server goes away: connections are refused until [`FakeKube::resume`].
    pub fn stop(&mut self) {
        if let Some((stop, thread)) = self.running.take() {
            // Open watches end with the server.
            self.state.lock().unwrap().watchers.clear();
            let _ = stop.send(());
            let _ = thread.join();
        }
    }

    /// Serves again on the same port, with the state it had.
    pub fn resume(&mut self) {
        assert!(self.running.is_none(), "already serving");
        self.serve(self.port);
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    pub fn token_file(&self) -> PathBuf {
        self.dir.path().join("token")
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Adds or replaces a pod (by uid), as an ADDED or MODIFIED event.
    pub fn set_pod(&self, pod: Value) {
        let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
        let mut c = self.state.lock().unwrap();
        let kind = if c.pods.contains_key(&uid) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        c.change(kind, uid, Some(pod));
    }

    pub fn delete_pod(&self, uid: &str) {
        let mut c = self.state.lock().unwrap();
        c.change("DELETED", uid.to_string(), None);
    }

    /// Compacts history: open watches get an ERROR 410 event and end, and watches resuming
    /// from any version seen so far are answered 410 Gone.
    pub fn expire(&self) {
        let mut c = self.state.lock().unwrap();
        c.version += 1;
        c.oldest = c.version;
        c.events.clear();
        let line = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
            "status": "Failure", "reason": "Expired", "code": 410,
            "message": "too old resource version"}})
        .to_string()
            + "\n";
        for w in c.watchers.drain(..) {
            let _ = w.send(line.clone());
        }
    }

    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }

    pub fn unauthorised(&self) -> usize {
        self.state.lock().unwrap().unauthorised
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Cluster {
    fn change(&mut self, kind: &str, uid: String, pod: Option<Value>) {
        self.version += 1;
        let version = self.version;
        let mut object = match pod {
            Some(pod) => {
                self.pods.insert(uid.clone(), pod.clone());
                pod
            }
            None => match self.pods.remove(&uid) {
                Some(pod) => pod,
                None => return,
            },
        };
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        object["spec"]["nodeName"] = json!(self.node);
        if let Some(stored) = self.pods.get_mut(&uid) {
            *stored = object.clone();
        }
        let line = json!({"type": kind, "object": object}).to_string() + "\n";
        self.events.push((version, line.clone()));
        self.watchers.retain(|w| w.send(line.clone()).is_ok());
    }

    fn authorised(&mut self, headers: &HeaderMap, request: String) -> bool {
        let want = format!("Bearer {}", self.token);
        let ok = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == want);
        if ok {
            self.requests.push(request);
        } else {
            self.unauthorised += 1;
        }
        ok
    }

    fn list(&self) -> Value {
        json!({"kind": "PodList", "apiVersion": "v1",
               "metadata": {"resourceVersion": self.version.to_string()},
               "items": self.pods.values().collect::<Vec<_>>()})
    }
}

fn unauthorised() -> Response {
    (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response()
}

fn json_response(value: &Value) -> Response {
    ([("content-type", "application/json")], value.to_string()).into_response()
}

async fn kubelet_pods(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let mut c = state.lock().unwrap();
    if !c.authorised(&headers, "/pods".into()) {
        return unauthorised();
    }
    json_response(&c.list())
}

async fn node(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let mut c = state.lock().unwrap();
    if !c.authorised(&headers, format!("/api/v1/nodes/{name}")) {
        return unauthorised();
    }
    if name != c.node {
        return (StatusCode::NOT_FOUND, "no such node\n").into_response();
    }
    json_response(
        &json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": name},
        "status": {"addresses": [{"type": "Hostname", "address": name},
                                 {"type": "InternalIP", "address": "127.0.0.1"}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": c.port}}}}),
    )
}

async fn api_pods(
    State(state): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let mut c = state.lock().unwrap();
    let mut described: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    described.sort();
    if !c.authorised(&headers, format!("/api/v1/pods?{}", described.join("&"))) {
        return unauthorised();
    }
    if query.get("fieldSelector") != Some(&format!("spec.nodeName={}", c.node)) {
        return (
            StatusCode::BAD_REQUEST,
            "fieldSelector must select this node\n",
        )
            .into_response();
    }
    if query.get("watch").map(String::as_str) != Some("true") {
        return json_response(&c.list());
    }
    let from: u64 = match query.get("resourceVersion").map(|v| v.parse()) {
        Some(Ok(v)) => v,
        _ => return (StatusCode::BAD_REQUEST, "resourceVersion\n").into_response(),
    };
    if from < c.oldest {
        return (
            StatusCode::GONE,
            json!({"kind": "Status", "code": 410, "reason": "Expired"}).to_string(),
        )
            .into_response();
    }
    let (tx, mut rx) = unbounded_channel::<String>();
    for (version, line) in &c.events {
        if *version > from {
            let _ = tx.send(line.clone());
        }
    }
    c.watchers.push(tx);
    let stream = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|line| line.map(Ok::<_, std::convert::Infallible>))
    });
    (
        [("content-type", "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}
