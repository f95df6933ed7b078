//! Every log line of the test process (all threads, trace level, filtered as the agent
//! filters), so tests can check that no secret was ever written.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

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

static LOGS: OnceLock<Buffer> = OnceLock::new();

/// Installs the capturing subscriber (once per test binary).
pub fn capture() {
    LOGS.get_or_init(|| {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        // Trace for everything, as a user might ask, with the agent's own safety directives.
        let mut filter = tracing_subscriber::EnvFilter::new("trace");
        for directive in kepler_meters::QUIET_LOG_TARGETS {
            filter = filter.add_directive(directive.parse().unwrap());
        }
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .init();
        buffer
    });
}

/// Everything logged so far.
pub fn text() -> String {
    LOGS.get()
        .map(|b| String::from_utf8_lossy(&b.0.lock().unwrap()).into_owned())
        .unwrap_or_default()
}
