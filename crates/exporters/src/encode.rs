//! The exposition encoder: Prometheus text 0.0.4 and OpenMetrics 1.0.0, written straight into a
//! byte buffer with integer and float fast paths (`itoa`, `ryu`) and no allocation per sample.

use std::borrow::Cow;
use std::time::Duration;

use kepler_core::{IdlePolicyState, MicroJoules, NodeZone, PowerDomain, PowerSnapshot, Watts};

use crate::context::ExportContext;
use crate::level::Level;
use crate::registry::{self as r, Desc};
use crate::self_process::{ProcessStats, SelfCollectors};

/// Exposition format of one response.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// Prometheus text format 0.0.4: what every Prometheus and `promtool` understands.
    #[default]
    Text004,
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
}

impl Format {
    pub const TEXT_CONTENT_TYPE: &'static str = "text/plain; version=0.0.4; charset=utf-8";
    pub const OPENMETRICS_CONTENT_TYPE: &'static str =
        "application/openmetrics-text; version=1.0.0; charset=utf-8";

    pub const fn content_type(self) -> &'static str {
        match self {
            Format::Text004 => Self::TEXT_CONTENT_TYPE,
            Format::OpenMetrics => Self::OPENMETRICS_CONTENT_TYPE,
        }
    }

    /// Chooses the format from an `Accept` header. OpenMetrics only when the header asks for
    /// `application/openmetrics-text` with a quality at least that of the text format (or of
    /// a wildcard); everything else, a missing header included, gets text 0.0.4, as the Go
    /// client library does.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text004;
        };
        let mut openmetrics_q: f32 = 0.0;
        let mut text_q: f32 = 0.0;
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim();
            let mut q: f32 = 1.0;
            for param in parts {
                if let Some((k, v)) = param.split_once('=') {
                    if k.trim().eq_ignore_ascii_case("q") {
                        // A malformed quality counts as "not acceptable" rather than as 1.
                        q = v.trim().parse().unwrap_or(0.0);
                    }
                }
            }
            if media.eq_ignore_ascii_case("application/openmetrics-text") {
                openmetrics_q = openmetrics_q.max(q);
            } else if media.eq_ignore_ascii_case("text/plain")
                || media.eq_ignore_ascii_case("text/*")
                || media == "*/*"
            {
                text_q = text_q.max(q);
            }
        }
        if openmetrics_q > 0.0 && openmetrics_q >= text_q {
            Format::OpenMetrics
        } else {
            Format::Text004
        }
    }
}

/// A value that can be written as a sample value.
pub trait SampleValue: Copy {
    fn write_to(self, out: &mut Vec<u8>);
}

impl SampleValue for f64 {
    fn write_to(self, out: &mut Vec<u8>) {
        write_f64(out, self);
    }
}

impl SampleValue for u64 {
    fn write_to(self, out: &mut Vec<u8>) {
        out.extend_from_slice(itoa::Buffer::new().format(self).as_bytes());
    }
}

impl SampleValue for usize {
    fn write_to(self, out: &mut Vec<u8>) {
        out.extend_from_slice(itoa::Buffer::new().format(self).as_bytes());
    }
}

/// Written in joules, as an exact decimal (µJ have six decimals; no float rounding noise).
impl SampleValue for MicroJoules {
    fn write_to(self, out: &mut Vec<u8>) {
        write_fixed(out, self.0 / 1_000_000, (self.0 % 1_000_000) as u32, 6);
    }
}

impl SampleValue for Watts {
    fn write_to(self, out: &mut Vec<u8>) {
        write_f64(out, self.0);
    }
}

/// Written in seconds, as an exact decimal with up to nine digits.
impl SampleValue for Duration {
    fn write_to(self, out: &mut Vec<u8>) {
        write_fixed(out, self.as_secs(), self.subsec_nanos(), 9);
    }
}

fn write_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
    } else if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v > 0.0 {
        out.extend_from_slice(b"+Inf");
    } else {
        out.extend_from_slice(b"-Inf");
    }
}

/// `int.frac` where `frac` has `digits` decimal places; trailing zeros (and a bare point) are
/// dropped so that whole numbers print as integers, which both formats accept.
fn write_fixed(out: &mut Vec<u8>, int: u64, frac: u32, digits: usize) {
    out.extend_from_slice(itoa::Buffer::new().format(int).as_bytes());
    if frac == 0 {
        return;
    }
    let mut buf = [b'0'; 9];
    let mut f = frac;
    for i in (0..digits).rev() {
        buf[i] = b'0' + (f % 10) as u8;
        f /= 10;
    }
    let mut end = digits;
    while end > 0 && buf[end - 1] == b'0' {
        end -= 1;
    }
    out.push(b'.');
    out.extend_from_slice(&buf[..end]);
}

/// Label value escaping, the same in both formats: backslash, double quote and line feed.
fn write_escaped_label(out: &mut Vec<u8>, value: &str) {
    let bytes = value.as_bytes();
    // Almost no value needs escaping; check first so the common case is one copy.
    if !bytes.iter().any(|&b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.extend_from_slice(bytes);
        return;
    }
    for &b in bytes {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            _ => out.push(b),
        }
    }
}

/// HELP escaping: text 0.0.4 escapes backslash and line feed; OpenMetrics also double quotes.
fn write_escaped_help(out: &mut Vec<u8>, help: &str, format: Format) {
    for &b in help.as_bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'"' if format == Format::OpenMetrics => out.extend_from_slice(b"\\\""),
            _ => out.push(b),
        }
    }
}

/// Writes families into a buffer. Samples of one family must be written together, through one
/// [`FamilyWriter`].
pub struct MetricWriter<'a> {
    out: &'a mut Vec<u8>,
    format: Format,
    /// The `node_name` value, escaped once per encode.
    node_name: Cow<'a, [u8]>,
}

impl<'a> MetricWriter<'a> {
    /// Appends to `out`.
    pub fn new(out: &'a mut Vec<u8>, format: Format, node_name: &'a str) -> Self {
        let node_name = if node_name.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
            let mut v = Vec::with_capacity(node_name.len() + 4);
            write_escaped_label(&mut v, node_name);
            Cow::Owned(v)
        } else {
            Cow::Borrowed(node_name.as_bytes())
        };
        MetricWriter {
            out,
            format,
            node_name,
        }
    }

    /// Starts a family. Its HELP and TYPE lines are written with the first sample, so a family
    /// without samples leaves no trace (the Go client omits such families too).
    pub fn family<const N: usize>(&mut self, desc: &'static Desc<N>) -> FamilyWriter<'_, 'a, N> {
        FamilyWriter {
            w: self,
            desc,
            started: false,
        }
    }

    /// Ends the exposition (`# EOF` in OpenMetrics).
    pub fn finish(self) {
        if self.format == Format::OpenMetrics {
            self.out.extend_from_slice(b"# EOF\n");
        }
    }
}

/// Samples of one family.
pub struct FamilyWriter<'w, 'a, const N: usize> {
    w: &'w mut MetricWriter<'a>,
    desc: &'static Desc<N>,
    started: bool,
}

impl<const N: usize> FamilyWriter<'_, '_, N> {
    fn header(&mut self) {
        let format = self.w.format;
        let out = &mut *self.w.out;
        let name = match format {
            Format::Text004 => self.desc.name,
            Format::OpenMetrics => self.desc.family_name(),
        };
        out.extend_from_slice(b"# HELP ");
        out.extend_from_slice(name.as_bytes());
        out.push(b' ');
        write_escaped_help(out, self.desc.help, format);
        out.extend_from_slice(b"\n# TYPE ");
        out.extend_from_slice(name.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.desc.kind.as_str().as_bytes());
        out.push(b'\n');
    }

    /// One sample: exactly one value per label name of the descriptor (checked by the type).
    pub fn sample(&mut self, labels: [&str; N], value: impl SampleValue) {
        let names = self.desc.labels;
        self.write_sample(
            |out| {
                for (i, (name, value)) in names.iter().zip(labels.iter()).enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(name.as_bytes());
                    out.extend_from_slice(b"=\"");
                    write_escaped_label(out, value);
                    out.push(b'"');
                }
            },
            value,
        );
    }

    /// One sample whose label pairs come rendered by [`RenderedPairs`]: `pairs` concatenated
    /// are this family's labels, all of them and in the descriptor's order (checked in debug
    /// builds). For labels that recur in several samples, escaped and copied once.
    pub(crate) fn sample_rendered(&mut self, pairs: &[&[u8]], value: impl SampleValue) {
        #[cfg(debug_assertions)]
        {
            let joined = pairs.concat();
            debug_assert_eq!(
                RenderedPairs::names(&joined),
                self.desc.labels,
                "rendered pairs out of step with {}",
                self.desc.name
            );
        }
        self.write_sample(
            |out| {
                let mut first = true;
                for part in pairs {
                    // Every pair starts with its comma; the block's first one goes.
                    let part = match (first, part.split_first()) {
                        (true, Some((b',', rest))) => rest,
                        _ => part,
                    };
                    first &= part.is_empty();
                    out.extend_from_slice(part);
                }
            },
            value,
        );
    }

    /// The family's header if this is its first sample, then the sample: its name, the label
    /// pairs `labels` writes (without braces) and `node_name` in braces, and its value.
    fn write_sample(&mut self, labels: impl FnOnce(&mut Vec<u8>), value: impl SampleValue) {
        if !self.started {
            self.header();
            self.started = true;
        }
        let desc = self.desc;
        let out = &mut *self.w.out;
        out.extend_from_slice(desc.name.as_bytes());
        if N > 0 || desc.node_name {
            out.push(b'{');
            labels(out);
            if desc.node_name {
                if N > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"node_name=\"");
                out.extend_from_slice(&self.w.node_name);
                out.push(b'"');
            }
            out.push(b'}');
        }
        out.push(b' ');
        value.write_to(out);
        out.push(b'\n');
    }
}

/// Label pairs rendered once and copied into several samples, each pair as `,name="value"`
/// with the value escaped; callers keep the offsets of what they rendered.
#[derive(Default)]
pub(crate) struct RenderedPairs {
    buf: Vec<u8>,
}

impl RenderedPairs {
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        RenderedPairs {
            buf: Vec::with_capacity(bytes),
        }
    }

    pub(crate) fn push(&mut self, name: &str, value: &str) {
        self.buf.push(b',');
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b"=\"");
        write_escaped_label(&mut self.buf, value);
        self.buf.push(b'"');
    }

    /// Where the next pair will start.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Drops the pairs rendered from `len` on.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    /// The bytes rendered in `range` (empty when out of bounds).
    pub(crate) fn get(&self, range: std::ops::Range<usize>) -> &[u8] {
        self.buf.get(range).unwrap_or_default()
    }

    /// The label names of rendered pairs, for the debug check of [`FamilyWriter::sample_rendered`].
    #[cfg(debug_assertions)]
    fn names(mut pairs: &[u8]) -> Vec<&str> {
        let mut names = Vec::new();
        while let Some(rest) = pairs.strip_prefix(b",") {
            let Some(eq) = rest.iter().position(|&b| b == b'=') else {
                break;
            };
            let (name, value) = rest.split_at(eq);
            names.push(std::str::from_utf8(name).unwrap_or("?"));
            // The value: from past `="` up to the first quote that no backslash escapes.
            let value = value.get(2..).unwrap_or_default();
            let mut i = 0;
            while let Some(&b) = value.get(i) {
                if b == b'"' {
                    break;
                }
                i += if b == b'\\' { 2 } else { 1 };
            }
            pairs = value.get(i + 1..).unwrap_or_default();
        }
        names
    }
}

/// Encodes one scrape's worth of metrics, appending to `out` (callers reuse a cleared buffer).
///
/// Without a snapshot (before the first tick) only build info, CPU info and the agent's own
/// metrics are written. Families whose level is not in `ctx.levels` are left out.
pub fn encode(
    snapshot: Option<&PowerSnapshot>,
    ctx: &ExportContext,
    format: Format,
    out: &mut Vec<u8>,
) {
    let mut w = MetricWriter::new(out, format, &ctx.node_name);
    encode_head(&mut w, ctx);
    encode_live_parts(&mut w, ctx);
    encode_rest(&mut w, snapshot, ctx);
    w.finish();
}

/// [`encode()`] without the families read live (health, the agent's own process): appends what
/// comes before them and what comes after, and returns where they go. Scrapes of one snapshot
/// share this part (see `AgentState::scrape`).
pub(crate) fn encode_without_live(
    snapshot: Option<&PowerSnapshot>,
    ctx: &ExportContext,
    format: Format,
    out: &mut Vec<u8>,
) -> usize {
    encode_head(&mut MetricWriter::new(out, format, &ctx.node_name), ctx);
    let split = out.len();
    let mut w = MetricWriter::new(out, format, &ctx.node_name);
    encode_rest(&mut w, snapshot, ctx);
    w.finish();
    split
}

/// The families read live alone, as [`encode()`] writes them.
pub(crate) fn encode_live(ctx: &ExportContext, format: Format, out: &mut Vec<u8>) {
    encode_live_parts(&mut MetricWriter::new(out, format, &ctx.node_name), ctx);
}

/// Health, then the agent's own process, read now. Reading it here puts three syscalls on
/// every scrape (`SelfReader`), on purpose: client libraries read it at scrape time too, at
/// the default 5 s interval and Prometheus' usual 15–60 s scrape intervals scrapes come less
/// often than ticks, and a reading taken at a tick would be as old as the tick when scraped.
fn encode_live_parts(w: &mut MetricWriter<'_>, ctx: &ExportContext) {
    encode_health(w, &ctx.health, ctx.http_refusals.as_deref());
    if let Some(own) = &ctx.own_process {
        match own.read() {
            Ok(p) => encode_self(w, &p, ctx.self_collectors),
            Err(e) => {
                tracing::debug!(error = %e, "reading /proc/self; process_* left out of this scrape");
            }
        }
    }
}

/// Build and CPU info, the agent's tick counters.
fn encode_head(w: &mut MetricWriter<'_>, ctx: &ExportContext) {
    {
        let b = &ctx.build;
        w.family(&r::BUILD_INFO).sample(
            [&b.arch, &b.branch, &b.revision, &b.version, &b.rust_version],
            1u64,
        );
    }
    {
        let mut f = w.family(&r::NODE_CPU_INFO);
        for c in ctx.cpu_info.iter() {
            f.sample(
                [
                    &c.processor,
                    &c.vendor_id,
                    &c.model_name,
                    &c.physical_id,
                    &c.core_id,
                ],
                1u64,
            );
        }
    }
    w.family(&r::AGENT_TICK_DURATION)
        .sample([], ctx.agent.last_tick_duration);
    w.family(&r::AGENT_TICKS).sample([], ctx.agent.ticks);

    if let Some(ebpf) = ctx.agent.ebpf {
        w.family(&r::AGENT_EBPF_DROPPED).sample([], ebpf.dropped);
        w.family(&r::AGENT_EBPF_EXITS_DEFERRED)
            .sample([], ebpf.exits_deferred);
        w.family(&r::AGENT_EBPF_TRACKED).sample([], ebpf.tracked);
        let accounting = if ebpf.task_iterator {
            "task_iterator"
        } else {
            "sched_switch"
        };
        let exits = if ebpf.exits_counted {
            "cgroup_counters"
        } else {
            "final_switch"
        };
        w.family(&r::AGENT_EBPF_ACCOUNTING)
            .sample([accounting, exits], 1u64);
    }
}

/// The snapshot.
fn encode_rest(w: &mut MetricWriter<'_>, snapshot: Option<&PowerSnapshot>, ctx: &ExportContext) {
    if let Some(s) = snapshot {
        w.family(&r::AGENT_PROCESSES).sample([], s.processes.len());
        let levels = ctx.levels;
        if let Some(features) = &s.features {
            encode_features(w, s, features, levels);
        }
        if levels.contains(Level::Node) {
            encode_node(w, s);
        }
        crate::encode_workloads::encode_workloads(w, s, levels);
        crate::encode_gpu::encode_gpu(w, s, levels);
    }
}

fn encode_self(w: &mut MetricWriter<'_>, p: &ProcessStats, on: SelfCollectors) {
    if on.process {
        w.family(&r::PROCESS_CPU_SECONDS_SELF)
            .sample([], p.cpu_seconds);
        w.family(&r::PROCESS_RESIDENT_MEMORY)
            .sample([], p.resident_memory_bytes);
        w.family(&r::PROCESS_VIRTUAL_MEMORY)
            .sample([], p.virtual_memory_bytes);
        w.family(&r::PROCESS_OPEN_FDS).sample([], p.open_fds);
        w.family(&r::PROCESS_MAX_FDS).sample([], p.max_fds);
        w.family(&r::PROCESS_START_TIME)
            .sample([], p.start_time_seconds);
    }
    if on.runtime {
        w.family(&r::PROCESS_THREADS).sample([], p.threads);
    }
}

fn encode_health(
    w: &mut MetricWriter<'_>,
    health: &kepler_core::Health,
    refusals: Option<&kepler_http::Refusals>,
) {
    let components = health.components();
    {
        let mut f = w.family(&r::AGENT_COMPONENT_UP);
        for c in &components {
            f.sample([c.kind().as_str(), c.name()], u64::from(c.is_up()));
        }
    }
    {
        let mut f = w.family(&r::AGENT_COMPONENT_ERRORS);
        for c in &components {
            f.sample([c.kind().as_str(), c.name()], c.errors());
        }
    }
    {
        let mut f = w.family(&r::AGENT_COMPONENT_UNAVAILABLE);
        for c in &components {
            if let Some(reason) = c.unusable() {
                f.sample([c.kind().as_str(), c.name(), reason.as_str()], 1u64);
            }
        }
    }
    if let Some(refusals) = refusals {
        let mut f = w.family(&r::AGENT_HTTP_REFUSED);
        for reason in kepler_http::Refusal::ALL {
            f.sample([reason.as_str()], refusals.get(reason));
        }
    }
}

fn encode_features(
    w: &mut MetricWriter<'_>,
    s: &PowerSnapshot,
    features: &kepler_core::features::Features,
    levels: crate::level::MetricsLevel,
) {
    if levels.contains(Level::Node) {
        let mut f = w.family(&r::NODE_FEATURE_RATE);
        for (feature, rate) in features.node.measured() {
            f.sample([feature.as_str()], rate);
        }
    }
    if levels.contains(Level::Process) {
        // Only built when feature export is on (off by default), so scrapes stay cheap.
        let comms: std::collections::HashMap<kepler_core::ProcessKey, &str> = s
            .processes
            .iter()
            .map(|p| (p.key, p.info.comm.as_str()))
            .collect();
        let mut f = w.family(&r::PROCESS_FEATURE_RATE);
        let mut pid_text = itoa::Buffer::new();
        for (key, rates) in &features.processes {
            let comm = comms.get(key).copied().unwrap_or("");
            let pid = pid_text.format(key.pid);
            for (feature, rate) in rates.measured() {
                f.sample([pid, comm, feature.as_str()], rate);
            }
        }
    }
}

/// The expected error of each estimated zone, in watts and relative; measured zones carry
/// none, so they have no series.
fn estimate_errors(w: &mut MetricWriter<'_>, s: &PowerSnapshot) {
    for (desc, relative) in [
        (&r::NODE_CPU_ZONE_ESTIMATE_ERROR_WATTS, false),
        (&r::NODE_CPU_ZONE_ESTIMATE_ERROR_RATIO, true),
    ] {
        let mut f = w.family(desc);
        for z in cpu_zones(s) {
            let m = &z.meta;
            if let Some(e) = m.expected_error.iter().find(|e| *e.zone == *z.zone) {
                let model = m.model.as_deref().unwrap_or("");
                let value = if relative { e.mape } else { e.mae.0 };
                f.sample([&z.zone, &z.path, model], value);
            }
        }
    }
}

fn node_zone_family<V: SampleValue>(
    w: &mut MetricWriter<'_>,
    desc: &'static Desc<2>,
    s: &PowerSnapshot,
    value: impl Fn(&NodeZone) -> V,
) {
    let mut f = w.family(desc);
    for z in cpu_zones(s) {
        f.sample([&z.zone, &z.path], value(z));
    }
}

fn encode_node(w: &mut MetricWriter<'_>, s: &PowerSnapshot) {
    node_zone_family(w, &r::NODE_CPU_JOULES, s, |z| z.total.energy);
    node_zone_family(w, &r::NODE_CPU_WATTS, s, |z| z.total.watts);
    node_zone_family(w, &r::NODE_CPU_ACTIVE_JOULES, s, |z| z.active.energy);
    node_zone_family(w, &r::NODE_CPU_ACTIVE_WATTS, s, |z| z.active.watts);
    node_zone_family(w, &r::NODE_CPU_IDLE_JOULES, s, |z| z.idle.energy);
    node_zone_family(w, &r::NODE_CPU_IDLE_WATTS, s, |z| z.idle.watts);
    w.family(&r::NODE_CPU_USAGE_RATIO).sample([], s.usage_ratio);
    node_zone_family(w, &r::NODE_CPU_UNATTRIBUTED_JOULES, s, |z| z.unattributed);
    node_zone_family(w, &r::NODE_CPU_HIDDEN_PROCESS_JOULES, s, |z| {
        z.hidden.energy
    });
    node_zone_family(w, &r::NODE_CPU_HIDDEN_PROCESS_WATTS, s, |z| z.hidden.watts);

    {
        let mut f = w.family(&r::NODE_CPU_ZONE_INFO);
        for z in cpu_zones(s) {
            let m = &z.meta;
            f.sample(
                [
                    &z.zone,
                    &z.path,
                    &m.meter,
                    m.provenance.as_str(),
                    m.model.as_deref().unwrap_or(""),
                    m.reason.as_deref().unwrap_or(""),
                ],
                1u64,
            );
        }
    }

    estimate_errors(w, s);

    let (policy, baseline) = idle_policy_labels(s);
    w.family(&r::NODE_CPU_IDLE_POLICY_INFO)
        .sample([policy, baseline], 1u64);
    if let IdlePolicyState::Baseline { watts, .. } = &s.idle_policy {
        let mut f = w.family(&r::NODE_CPU_IDLE_BASELINE_WATTS);
        for (z, w) in s.zones.iter().zip(watts) {
            if let (true, Some(w)) = (in_cpu_families(z), w) {
                f.sample([&z.zone, &z.path], *w);
            }
        }
    }

    let mut f = w.family(&r::PLATFORM_WATTS);
    for p in &s.platform {
        let l = &p.labels;
        f.sample(
            [
                &l.source,
                &l.bmc_id,
                &l.chassis_id,
                &l.source_id,
                &l.source_name,
                &l.source_type,
            ],
            p.watts,
        );
    }
}

/// The labels of `kepler_node_cpu_idle_policy_info`. Zones whose meter leaves idle out (an
/// estimate inside a VM) follow no policy: when every zone is such a zone, the policy is
/// `none`, and a configured baseline is not claimed.
fn idle_policy_labels(s: &PowerSnapshot) -> (&'static str, &'static str) {
    let zones: Vec<(usize, &NodeZone)> = s
        .zones
        .iter()
        .enumerate()
        .filter(|(_, z)| in_cpu_families(z))
        .collect();
    if !zones.is_empty() && zones.iter().all(|(_, z)| !z.meta.includes_idle) {
        return ("none", "none");
    }
    match &s.idle_policy {
        IdlePolicyState::Ratio => ("ratio", "none"),
        IdlePolicyState::Baseline {
            configured: true, ..
        } => ("baseline", "configured"),
        IdlePolicyState::Baseline { watts, .. } => {
            let mut with_idle = zones
                .iter()
                .filter(|(_, z)| z.meta.includes_idle)
                .map(|(i, _)| watts.get(*i).copied().flatten())
                .peekable();
            if with_idle.peek().is_some() && with_idle.all(|w| w.is_some()) {
                ("baseline", "measured")
            } else {
                ("baseline", "pending")
            }
        }
    }
}

/// Zones exported in the cpu families: the CPU domain's, and the platform's (upstream exports
/// ACPI platform power under zone `platform` there too). GPU zones have families of their own.
pub(crate) fn in_cpu_families(z: &NodeZone) -> bool {
    z.meta.domain != PowerDomain::Gpu
}

fn cpu_zones(s: &PowerSnapshot) -> impl Iterator<Item = &NodeZone> {
    s.zones.iter().filter(|z| in_cpu_families(z))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text<V: SampleValue>(v: V) -> String {
        let mut out = Vec::new();
        v.write_to(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn numbers_are_exact_and_parseable() {
        assert_eq!(text(MicroJoules(0)), "0");
        assert_eq!(text(MicroJoules(1_500_000)), "1.5");
        assert_eq!(text(MicroJoules(1_234_567)), "1.234567");
        assert_eq!(text(MicroJoules(7)), "0.000007");
        assert_eq!(text(MicroJoules(u64::MAX)), "18446744073709.551615");
        assert_eq!(text(Duration::from_millis(1500)), "1.5");
        assert_eq!(text(Duration::from_nanos(3)), "0.000000003");
        assert_eq!(text(Duration::from_secs(42)), "42");
        assert_eq!(text(0.25f64), "0.25");
        assert_eq!(text(f64::NAN), "NaN");
        assert_eq!(text(f64::INFINITY), "+Inf");
        assert_eq!(text(f64::NEG_INFINITY), "-Inf");
        assert_eq!(text(Watts(12.0)), "12.0");
    }

    #[test]
    fn escaping_covers_backslash_quote_newline() {
        let mut out = Vec::new();
        write_escaped_label(&mut out, "a\\b\"c\nd");
        assert_eq!(out, b"a\\\\b\\\"c\\nd");
        let mut out = Vec::new();
        write_escaped_help(&mut out, "x \"y\"\\\n", Format::Text004);
        assert_eq!(out, b"x \"y\"\\\\\\n");
        let mut out = Vec::new();
        write_escaped_help(&mut out, "x \"y\"", Format::OpenMetrics);
        assert_eq!(out, b"x \\\"y\\\"");
    }

    /// Both ways of writing a sample, for one family.
    fn both_ways<const N: usize>(desc: &'static Desc<N>, labels: [&str; N]) -> [String; 2] {
        let mut plain = Vec::new();
        let mut w = MetricWriter::new(&mut plain, Format::Text004, "n\"1");
        w.family(desc).sample(labels, 1.5f64);
        let mut rendered = Vec::new();
        let mut pairs = RenderedPairs::default();
        // Split in two parts, as callers do, to exercise the first pair's comma.
        let split = N / 2;
        for (name, value) in desc.labels.iter().zip(labels).take(split) {
            pairs.push(name, value);
        }
        let middle = pairs.len();
        for (name, value) in desc.labels.iter().zip(labels).skip(split) {
            pairs.push(name, value);
        }
        let mut w = MetricWriter::new(&mut rendered, Format::Text004, "n\"1");
        w.family(desc).sample_rendered(
            &[pairs.get(0..middle), pairs.get(middle..pairs.len())],
            1.5f64,
        );
        [plain, rendered].map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn rendered_pairs_write_what_plain_labels_write() {
        let odd = [
            "7",
            "we\"ird\\",
            "/opt/a\nb",
            "regular",
            "running",
            "",
            "v",
            "package",
        ];
        let [plain, rendered] = both_ways(&r::PROCESS_CPU_WATTS, odd);
        assert_eq!(plain, rendered);
        assert!(
            plain.contains(r#"comm="we\"ird\\",exe="/opt/a\nb""#),
            "{plain}"
        );
        // A family without node_name, and one with no labels at all.
        let build = ["x86_64", "main", "abc", "0.1.0", "1.95"];
        let [plain, rendered] = both_ways(&r::BUILD_INFO, build);
        assert_eq!(plain, rendered);
        assert!(!plain.contains("node_name"), "{plain}");
        let [plain, rendered] = both_ways(&r::NODE_CPU_USAGE_RATIO, []);
        assert_eq!(plain, rendered);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "rendered pairs out of step")]
    fn rendered_pairs_in_the_wrong_order_are_caught() {
        let mut pairs = RenderedPairs::default();
        pairs.push("zone", "package");
        pairs.push("path", "/sys");
        let mut out = Vec::new();
        let mut w = MetricWriter::new(&mut out, Format::Text004, "n");
        let (zone, path) = (pairs.get(0..15), pairs.get(15..pairs.len()));
        w.family(&r::NODE_CPU_WATTS)
            .sample_rendered(&[path, zone], 1.0f64);
    }

    #[test]
    fn negotiation() {
        use Format::*;
        assert_eq!(Format::negotiate(None), Text004);
        assert_eq!(Format::negotiate(Some("*/*")), Text004);
        assert_eq!(Format::negotiate(Some("text/plain;version=0.0.4")), Text004);
        // Prometheus 2.x's header.
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            )),
            OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("Application/OpenMetrics-Text; version=1.0.0")),
            OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("text/plain;q=1,application/openmetrics-text;q=0.5")),
            Text004
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Text004
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=bogus")),
            Text004
        );
    }
}
