//! The informer's loops: kubelet polls or API-server list+watch, each writing the catalogue
//! and reporting health; run on a background thread of the agent until its stop signal.

use std::sync::Arc;
use std::time::Duration;

use kepler_core::{BackgroundTask, Catalogue, ComponentHealth, ComponentKind, StopSignal};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::client::{Endpoint, EndpointConfig, MAX_BODY};
use crate::nudge::Nudge;
use crate::pods::{PodIndex, PodList};
use crate::watch::{Applied, Reflector, WatchEvent};
use crate::{kubelet, Error, InformerSettings, Mode};

/// The informer's health entry name (kind `poller`).
pub const COMPONENT: &str = "pod_informer";

/// Least time between two kubelet polls when unknown containers ask for early ones.
pub const EARLY_POLL_GAP: Duration = Duration::from_secs(2);

/// How often a waiting informer looks at the stop signal, which is not awaitable.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// The API server closes a watch after this long; it is then resumed.
const WATCH_SECONDS: u32 = 290;

/// The pod informer; see the crate docs.
pub struct Informer {
    settings: InformerSettings,
    catalogue: Arc<Catalogue>,
    nudge: Nudge,
}

impl Informer {
    pub fn new(settings: InformerSettings, catalogue: Arc<Catalogue>) -> Self {
        Informer {
            settings,
            catalogue,
            nudge: Nudge::default(),
        }
    }

    /// The handle for [`crate::NudgingClassifier`].
    pub fn nudge(&self) -> Nudge {
        self.nudge.clone()
    }

    /// The informer as the agent's background work: health kind `poller`, name [`COMPONENT`].
    pub fn into_task(self) -> BackgroundTask {
        BackgroundTask::new(
            "kepler-pods",
            ComponentKind::Poller,
            COMPONENT,
            move |stop, health| self.run(stop, health),
        )
    }

    /// Runs until `stop` fires.
    pub fn run(self, stop: StopSignal, health: Arc<ComponentHealth>) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                health.set_down();
                warn!(error = %e, "pod informer cannot start its runtime; no pod names");
                return;
            }
        };
        info!(
            mode = ?self.settings.mode,
            node = self.settings.node_name,
            "pod informer started"
        );
        let state = State {
            health,
            reported: None,
        };
        runtime.block_on(async {
            // Dropping the mode's future at stop also drops any request or watch in flight.
            tokio::select! {
                _ = stopped(&stop) => {}
                _ = self.run_mode(state) => {}
            }
        });
    }

    /// One round, for `kepler probe`: what the kubelet or API server answers now, within
    /// `limit`. Nothing is written to the catalogue.
    pub fn probe(settings: InformerSettings, limit: Duration) -> Result<String, String> {
        let informer = Informer::new(settings, Arc::new(Catalogue::new()));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let round = async {
            match informer.settings.mode {
                Mode::Kubelet => {
                    let kubelet = informer.kubelet().await?;
                    let list: PodList = kubelet.get_json("/pods").await?;
                    Ok(format!(
                        "kubelet {} lists {} pods",
                        kubelet.base_url(),
                        list.items.len()
                    ))
                }
                Mode::ApiServer => {
                    let api = informer.api_server()?;
                    let list: PodList = api.get_json(&informer.list_path()).await?;
                    Ok(format!(
                        "API server {} lists {} pods on node {}",
                        api.base_url(),
                        list.items.len(),
                        informer.settings.node_name
                    ))
                }
            }
        };
        runtime.block_on(async {
            match tokio::time::timeout(limit, round).await {
                Ok(result) => result.map_err(|e: Error| e.to_string()),
                Err(_) => Err(format!("no answer within {limit:?}")),
            }
        })
    }

    fn list_path(&self) -> String {
        let selector = format!("spec.nodeName={}", self.settings.node_name);
        format!("/api/v1/pods?fieldSelector={}", query_value(&selector))
    }

    async fn run_mode(&self, mut state: State) {
        match self.settings.mode {
            Mode::Kubelet => self.poll_kubelet(&mut state).await,
            Mode::ApiServer => self.watch_api_server(&mut state).await,
        }
    }

    fn cluster(&self) -> Result<EndpointConfig, Error> {
        self.settings.cluster.endpoint()
    }

    fn api_server(&self) -> Result<Endpoint, Error> {
        Endpoint::new(&self.cluster()?)
    }

    /// The kubelet endpoint: the configured URL, else the Node object's address.
    async fn kubelet(&self) -> Result<Endpoint, Error> {
        let settings = &self.settings.kubelet;
        let cluster = match &settings.url {
            // The API server is not needed; its CA and token are defaults when configured.
            Some(_) => self.cluster().ok(),
            None => Some(self.cluster()?),
        };
        let url = match &settings.url {
            Some(url) => url.clone(),
            None => {
                let api = self.api_server()?;
                let node = &self.settings.node_name;
                let path = format!("/api/v1/nodes/{}", path_segment(node));
                let object: kubelet::Node = api.get_json(&path).await?;
                let url = kubelet::kubelet_url(node, &object)?;
                info!(url, "kubelet address from the Node object");
                url
            }
        };
        kubelet::endpoint(settings, url, cluster.as_ref())
    }

    async fn poll_kubelet(&self, state: &mut State) {
        let interval = self.settings.poll_interval;
        let mut index = PodIndex::new();
        let mut kubelet: Option<Endpoint> = None;
        loop {
            let polled = Instant::now();
            let result = match &kubelet {
                Some(endpoint) => endpoint.get_json::<PodList>("/pods").await,
                None => match self.kubelet().await {
                    Ok(endpoint) => {
                        let r = endpoint.get_json::<PodList>("/pods").await;
                        kubelet = Some(endpoint);
                        r
                    }
                    Err(e) => Err(e),
                },
            };
            match result {
                Ok(list) => {
                    state.skipped(index.replace(&list));
                    self.publish(&index);
                    state.up(format!("kubelet lists {} pods", index.len()));
                }
                Err(e) => {
                    state.down(&e);
                    // The node's address may have changed; a configured URL stays.
                    if self.settings.kubelet.url.is_none() {
                        kubelet = None;
                    }
                }
            }
            let next = polled + interval;
            let early = polled + EARLY_POLL_GAP.min(interval);
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = self.nudge.notified() => {
                    tokio::time::sleep_until(early.min(next)).await;
                }
            }
        }
    }

    async fn watch_api_server(&self, state: &mut State) {
        let retry = self.settings.poll_interval;
        let list_path = self.list_path();
        let mut reflector = Reflector::new();
        let mut api: Option<Endpoint> = None;
        loop {
            let endpoint = match &api {
                Some(endpoint) => endpoint.clone(),
                None => match self.api_server() {
                    Ok(endpoint) => {
                        api = Some(endpoint.clone());
                        endpoint
                    }
                    Err(e) => {
                        state.down(&e);
                        tokio::time::sleep(retry).await;
                        continue;
                    }
                },
            };
            let Some(version) = reflector.resource_version().map(str::to_string) else {
                match endpoint.get_json::<PodList>(&list_path).await {
                    Ok(list) => {
                        state.skipped(reflector.listed(&list));
                        self.publish(&reflector.index);
                        state.up(format!("API server lists {} pods", reflector.index.len()));
                        if reflector.resource_version().is_none() {
                            state
                                .down(&Error::Config("the pod list has no resourceVersion".into()));
                            tokio::time::sleep(retry).await;
                        }
                    }
                    Err(e) => {
                        state.down(&e);
                        tokio::time::sleep(retry).await;
                    }
                }
                continue;
            };
            let path = format!(
                "{list_path}&watch=true&allowWatchBookmarks=true&timeoutSeconds={WATCH_SECONDS}\
                 &resourceVersion={}",
                query_value(&version)
            );
            match self.follow(&endpoint, &path, &mut reflector, state).await {
                // The server ended the watch (its timeout): resume from where it left.
                Ok(()) => {}
                Err(Error::Gone) => {
                    info!("pod watch expired; listing again");
                    reflector.forget_version();
                }
                Err(e) => {
                    state.down(&e);
                    tokio::time::sleep(retry).await;
                }
            }
        }
    }

    /// Applies one watch stream's events until it ends.
    async fn follow(
        &self,
        api: &Endpoint,
        path: &str,
        reflector: &mut Reflector,
        state: &mut State,
    ) -> Result<(), Error> {
        let mut response = api.get(path, None).await?;
        state.up("watching pods".into());
        let mut buffer: Vec<u8> = Vec::new();
        loop {
            let chunk = response.chunk().await.map_err(|e| Error::Http {
                url: format!("{}{path}", api.base_url()),
                message: crate::client::chain(&e),
            })?;
            let Some(chunk) = chunk else {
                return Ok(());
            };
            buffer.extend_from_slice(&chunk);
            let mut changed = false;
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match serde_json::from_slice::<WatchEvent>(&line) {
                    Ok(event) => match reflector.apply(event) {
                        Applied::Changed => changed = true,
                        Applied::Unchanged => {}
                        Applied::Skipped(why) => state.skipped(vec![why]),
                        Applied::Relist(why) => {
                            if changed {
                                self.publish(&reflector.index);
                            }
                            info!(reason = why, "pod watch ended by the server");
                            return Err(Error::Gone);
                        }
                    },
                    Err(e) => {
                        state.health.count_error();
                        warn!(error = %e, "skipping a watch event that is not a pod event");
                    }
                }
            }
            if changed {
                self.publish(&reflector.index);
            }
            if buffer.len() > MAX_BODY {
                return Err(Error::Http {
                    url: format!("{}{path}", api.base_url()),
                    message: format!("a watch event longer than {MAX_BODY} bytes"),
                });
            }
        }
    }

    fn publish(&self, index: &PodIndex) {
        index.write_to(&self.catalogue);
        self.nudge.publish(index);
    }
}

/// Health and the log lines that go with its transitions.
struct State {
    health: Arc<ComponentHealth>,
    /// The last failure logged, so a failure repeating every poll is logged once.
    reported: Option<String>,
}

impl State {
    fn up(&mut self, what: String) {
        if self.health.set_up() || self.reported.is_some() {
            info!("pod informer works again: {what}");
        } else {
            debug!("{what}");
        }
        self.reported = None;
    }

    fn down(&mut self, error: &Error) {
        self.health.set_down();
        let text = error.to_string();
        if self.reported.as_deref() != Some(text.as_str()) {
            warn!(
                error = text,
                "pod informer failed; keeping the last known pod names"
            );
            self.reported = Some(text);
        }
    }

    fn skipped(&mut self, skipped: Vec<crate::pods::Skipped>) {
        for why in skipped {
            self.health.count_error();
            debug!(reason = %why, "pod skipped");
        }
    }
}

async fn stopped(stop: &StopSignal) {
    while !stop.is_stopped() {
        tokio::time::sleep(STOP_CHECK).await;
    }
}

/// Node names are DNS labels, but a configured one is escaped rather than trusted.
fn path_segment(text: &str) -> String {
    query_value(text)
}

fn query_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_escaped() {
        assert_eq!(query_value("spec.nodeName=n-1"), "spec.nodeName%3Dn-1");
        assert_eq!(query_value("a b/c"), "a%20b%2Fc");
    }
}
