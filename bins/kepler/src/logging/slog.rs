//! Log lines as upstream Kepler writes them with Go's `log/slog` (AddSource on): text lines of
//! `key=value` pairs (`time=… level=INFO source=dir/dir/file.rs:42 msg="…" key=value`) or one
//! JSON object per line with `time`, `level`, `source` {function, file, line} and `msg`, so log
//! pipelines parsing upstream's output parse ours.

use std::fmt::{self, Write as _};
use std::time::SystemTime;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter; `clock` is a parameter so tests can pin the time.
#[derive(Clone, Copy)]
pub struct SlogFormat {
    pub json: bool,
    pub clock: fn() -> SystemTime,
}

enum Value {
    Text(String),
    /// Numbers and booleans: bare in JSON, as written in text.
    Plain(String),
}

#[derive(Default)]
struct Fields {
    message: String,
    pairs: Vec<(&'static str, Value)>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, Value::Text(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, Value::Text(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, Value::Plain(value.to_string()));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, Value::Plain(value.to_string()));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, Value::Plain(value.to_string()));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, Value::Plain(value.to_string()));
    }
}

impl Fields {
    fn push(&mut self, field: &Field, value: Value) {
        match (field.name(), value) {
            ("message", Value::Text(m) | Value::Plain(m)) => self.message = m,
            // Bookkeeping fields of the `log` crate bridge, not the caller's.
            (name, _) if name.starts_with("log.") => {}
            (name, value) => self.pairs.push((name, value)),
        }
    }
}

/// slog's level names; below DEBUG it counts down (`DEBUG-4` is its name for trace).
fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "DEBUG-4",
    }
}

impl<S, N> FormatEvent<S, N> for SlogFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let line = if self.json {
            json_line(event.metadata(), (self.clock)(), &fields)
        } else {
            text_line(event.metadata(), (self.clock)(), &fields)
        };
        w.write_str(&line)
    }
}

fn text_line(meta: &tracing::Metadata<'_>, now: SystemTime, fields: &Fields) -> String {
    let mut out = String::with_capacity(160);
    // Go's text handler: RFC 3339 with milliseconds.
    let _ = write!(
        out,
        "time={} level={}",
        humantime::format_rfc3339_millis(now),
        level_name(meta.level())
    );
    if let Some(file) = meta.file() {
        // As upstream trims Go paths: the last two directories and the file.
        let parts: Vec<&str> = file.split('/').collect();
        let short = parts[parts.len().saturating_sub(3)..].join("/");
        let _ = write!(out, " source={short}:{}", meta.line().unwrap_or(0));
    }
    out.push_str(" msg=");
    push_text_value(&mut out, &fields.message);
    for (key, value) in &fields.pairs {
        let _ = write!(out, " {key}=");
        match value {
            Value::Text(t) => push_text_value(&mut out, t),
            Value::Plain(p) => out.push_str(p),
        }
    }
    out.push('\n');
    out
}

/// slog quotes a value (Go `strconv.Quote`) when it is empty or has a space, `=`, `"` or a
/// character outside printable ASCII.
fn push_text_value(out: &mut String, value: &str) {
    let needs_quotes = value.is_empty()
        || value
            .chars()
            .any(|c| c == ' ' || c == '=' || c == '"' || !(' '..='~').contains(&c));
    if !needs_quotes {
        out.push_str(value);
        return;
    }
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Go's RFC3339Nano: nanoseconds with trailing zeros dropped.
fn rfc3339_nano(now: SystemTime) -> String {
    let full = humantime::format_rfc3339_nanos(now).to_string();
    let Some(body) = full.strip_suffix('Z') else {
        return full;
    };
    match body.split_once('.') {
        Some((secs, frac)) => {
            let frac = frac.trim_end_matches('0');
            if frac.is_empty() {
                format!("{secs}Z")
            } else {
                format!("{secs}.{frac}Z")
            }
        }
        None => full,
    }
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn json_line(meta: &tracing::Metadata<'_>, now: SystemTime, fields: &Fields) -> String {
    let mut out = String::with_capacity(200);
    let _ = write!(
        out,
        "{{\"time\":\"{}\",\"level\":\"{}\"",
        rfc3339_nano(now),
        level_name(meta.level())
    );
    if let Some(file) = meta.file() {
        let _ = write!(
            out,
            ",\"source\":{{\"function\":{},\"file\":{},\"line\":{}}}",
            json_string(meta.module_path().unwrap_or(meta.target())),
            json_string(file),
            meta.line().unwrap_or(0)
        );
    }
    let _ = write!(out, ",\"msg\":{}", json_string(&fields.message));
    for (key, value) in &fields.pairs {
        let _ = write!(out, ",{}:", json_string(key));
        match value {
            Value::Text(t) => out.push_str(&json_string(t)),
            // Floats Rust writes as NaN or inf are not JSON numbers; slog writes them as strings.
            Value::Plain(p)
                if p.parse::<f64>().is_ok_and(|f| f.is_finite()) || p == "true" || p == "false" =>
            {
                out.push_str(p)
            }
            Value::Plain(p) => out.push_str(&json_string(p)),
        }
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    /// 2025-06-01T12:34:56.789Z
    fn fixed() -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_748_781_296_789)
    }

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Logs what `emit` logs through the formatter; returns the output and the line `emit`
    /// logged from.
    fn capture(json: bool, emit: fn() -> u32) -> (String, u32) {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .event_format(SlogFormat { json, clock: fixed })
            .with_writer(move || sink.clone())
            .finish();
        let line = tracing::subscriber::with_default(subscriber, emit);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        (text, line)
    }

    fn emit() -> u32 {
        let line = line!() + 1;
        tracing::info!(zones = 2, path = "/sys/class/powercap", ok = true, name = %"a b=c", "Starting Kepler");
        tracing::trace!("x");
        line
    }

    #[test]
    fn text_lines_match_go_slog() {
        let (text, line) = capture(false, emit);
        assert_eq!(
            text,
            format!(
                "time=2025-06-01T12:34:56.789Z level=INFO source=src/logging/slog.rs:{line} \
                 msg=\"Starting Kepler\" zones=2 path=/sys/class/powercap ok=true name=\"a b=c\"\n\
                 time=2025-06-01T12:34:56.789Z level=DEBUG-4 source=src/logging/slog.rs:{} msg=x\n",
                line + 1
            )
        );
    }

    #[test]
    fn json_lines_match_go_slog() {
        let (text, line) = capture(true, emit);
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            format!(
                "{{\"time\":\"2025-06-01T12:34:56.789Z\",\"level\":\"INFO\",\"source\":{{\
                 \"function\":\"kepler_agent::logging::slog::tests\",\"file\":\"bins/kepler/src/logging/slog.rs\",\
                 \"line\":{line}}},\"msg\":\"Starting Kepler\",\"zones\":2,\"path\":\"/sys/class/powercap\",\
                 \"ok\":true,\"name\":\"a b=c\"}}"
            )
        );
        for l in text.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            for key in ["time", "level", "source", "msg"] {
                assert!(v.get(key).is_some(), "{l}: {key}");
            }
        }
    }

    #[test]
    fn quoting_and_times_follow_go() {
        let mut s = String::new();
        push_text_value(&mut s, "");
        push_text_value(&mut s, "plain");
        push_text_value(&mut s, "tab\there \"q\"");
        assert_eq!(s, "\"\"plain\"tab\\there \\\"q\\\"\"");
        assert_eq!(rfc3339_nano(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339_nano(UNIX_EPOCH + Duration::from_nanos(1_500)),
            "1970-01-01T00:00:00.0000015Z"
        );
    }
}
