//! The `dcgm` registry row against a stand-in dcgm-exporter on loopback: it serves
//! tests/data/dcgm-exporter-mig.txt (or an error status, or garbage), and the meter's poller
//! runs on a thread under a stop signal as the agent's service would run it.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use kepler_core::{
    Background, Health, PowerDomain, PowerMeter, StopSignal, Unavailable, Watts, ZoneReading,
    ZoneSample,
};
use kepler_meters::gpu::GpuSettings;
use kepler_meters::registry::{chains, select};
use kepler_meters::{MeterName, MeterSettings, OpenContext};
use support::read_until;

const SAMPLE: &str = include_str!("data/dcgm-exporter-mig.txt");

/// What the exporter answers to every request.
#[derive(Clone, Debug, PartialEq)]
enum Answer {
    Sample,
    Status(u16),
    /// 200 with a body that is no Prometheus text.
    Garbage,
    /// 200 with valid samples followed by more comment lines than the meter reads.
    Huge,
}

struct Exporter {
    url: String,
    answer: Arc<Mutex<Answer>>,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Exporter {
    fn start(answer: Answer) -> Exporter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let exporter = Exporter {
            url,
            answer: Arc::new(Mutex::new(answer)),
            requests: Arc::new(AtomicUsize::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (answer, requests, stop) = (
            exporter.answer.clone(),
            exporter.requests.clone(),
            exporter.stop.clone(),
        );
        std::thread::spawn(move || {
            // Bounded: a test makes far fewer requests than this.
            for stream in listener.incoming().take(100_000) {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                requests.fetch_add(1, Ordering::Relaxed);
                let answer = answer.lock().unwrap().clone();
                serve(stream, &answer);
            }
        });
        exporter
    }

    fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let host = self.url.trim_start_matches("http://");
        let _ = TcpStream::connect(host.trim_end_matches("/metrics"));
    }
}

fn serve(stream: TcpStream, answer: &Answer) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream);
    // The request line and headers; a GET has no body.
    for _ in 0..100 {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
    }
    let huge;
    let (status, body) = match answer {
        Answer::Sample => (200, SAMPLE),
        Answer::Status(code) => (*code, "internal error\n"),
        Answer::Garbage => (200, "<html><body>Service Unavailable</body></html>\n"),
        Answer::Huge => {
            // 9 MiB: past the meter's 8 MiB limit, though every sample in it is valid.
            huge = format!("{SAMPLE}{}", "# padding\n".repeat((9 << 20) / 10));
            (200, huge.as_str())
        }
    };
    let _ = write!(
        reader.into_inner(),
        "HTTP/1.1 {status} X\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn settings(endpoint: Option<&str>) -> MeterSettings {
    MeterSettings {
        poll_interval: Duration::from_millis(20),
        gpu: GpuSettings {
            enabled: true,
            idle_power: Some(Watts(40.0)),
            dcgm_endpoint: endpoint.map(str::to_string),
            fake: None,
        },
        ..MeterSettings::default()
    }
}

/// The poller the meter left behind, running on its own thread; `ended` hears when it returns.
struct Running {
    stop: StopSignal,
    ended: mpsc::Receiver<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.stop();
    }
}

/// Runs every task of `background` as the agent's service would, under one stop signal.
fn run(background: &Background, health: &Health) -> Running {
    let stop = StopSignal::new();
    let (done, ended) = mpsc::channel();
    let tasks = background.take();
    assert_eq!(tasks.len(), 1, "the dcgm meter leaves one poller");
    for task in tasks {
        let stop = stop.clone();
        let done = done.clone();
        let component = health.register(task.kind(), task.component());
        std::thread::Builder::new()
            .name(task.thread_name().to_string())
            .spawn(move || {
                task.run(stop, component);
                let _ = done.send(());
            })
            .unwrap();
    }
    Running { stop, ended }
}

fn open(
    settings: &MeterSettings,
    background: &Background,
) -> Result<Box<dyn PowerMeter>, Unavailable> {
    let cx = OpenContext {
        background: Some(background),
        ..OpenContext::new(settings)
    };
    "dcgm".parse::<MeterName>().unwrap().open(&cx)
}

fn watts(r: &ZoneReading) -> f64 {
    match r.sample {
        ZoneSample::Power(w) => w.0,
        ZoneSample::Energy { .. } => f64::NAN,
    }
}

#[test]
fn each_mig_instance_is_a_zone_and_the_stop_ends_the_poller() {
    let exporter = Exporter::start(Answer::Sample);
    let settings = settings(Some(&exporter.url));
    let background = Background::new();
    let health = Health::new();
    let mut meter = open(&settings, &background).unwrap();
    assert_eq!((meter.name(), meter.domain()), ("dcgm", PowerDomain::Gpu));
    let running = run(&background, &health);

    let readings = read_until(meter.as_mut(), |r| r.is_ok()).unwrap();
    let zones: Vec<&str> = readings.iter().map(|r| &*r.zone).collect();
    assert_eq!(zones, ["gpu0-mig1", "gpu0-mig2", "gpu1"]);
    // GPU 0's 88.5 W divided 0.25 : 0.75 by its instances' engine activity, idle halved.
    assert!((watts(&readings[0]) - 22.125).abs() < 1e-9);
    assert!((watts(&readings[1]) - 66.375).abs() < 1e-9);
    assert_eq!(readings[0].idle, Some(Watts(20.0)));
    let device = readings[1].device.as_ref().unwrap();
    assert_eq!(&*device.name, "NVIDIA A100-SXM4-80GB MIG 3g.40gb");
    assert_eq!(
        &*readings[1].path,
        "GPU-5a4d3c1e-0000-1111-2222-333344445555/2"
    );
    assert!(health.components().iter().all(|c| c.is_up()));

    running.stop.stop();
    running
        .ended
        .recv_timeout(Duration::from_secs(30))
        .expect("the poller ends when stopped");
    assert!(exporter.requests.load(Ordering::Relaxed) >= 1);
}

#[test]
fn a_configured_endpoint_wins_the_gpu_chain() {
    let exporter = Exporter::start(Answer::Sample);
    let settings = settings(Some(&exporter.url));
    let background = Background::new();
    let cx = OpenContext {
        background: Some(&background),
        ..OpenContext::new(&settings)
    };
    let gpu: Vec<_> = chains(&[], false)
        .into_iter()
        .filter(|c| c.domain == PowerDomain::Gpu)
        .collect();
    let selection = select(&gpu, &cx);
    // The fake GPU is off, so dcgm is tried next, and opens: NVML is never tried.
    let tried: Vec<&str> = selection
        .attempts
        .iter()
        .map(|a| a.meter.as_str())
        .collect();
    assert_eq!(tried, ["fake-gpu", "dcgm"]);
    assert_eq!(selection.meters.len(), 1);
    assert_eq!(selection.meters[0].name(), "dcgm");
}

#[test]
fn an_error_status_garbage_or_a_huge_answer_fails_the_read_and_the_meter_recovers() {
    for (answer, expected) in [
        (Answer::Status(500), "HTTP status 500"),
        (Answer::Garbage, "no GPU power samples"),
        (Answer::Huge, "answer larger than"),
    ] {
        let exporter = Exporter::start(answer.clone());
        let settings = settings(Some(&exporter.url));
        let background = Background::new();
        let health = Health::new();
        let mut meter = open(&settings, &background).unwrap();
        let _running = run(&background, &health);
        let error = read_until(meter.as_mut(), |r| {
            r.as_ref().is_err_and(|e| e.contains(expected))
        })
        .unwrap_err();
        assert!(error.contains("no reading yet"), "{answer:?}: {error}");
        assert!(error.contains("127.0.0.1"), "{answer:?}: {error}");
        // The poller's health goes down right after it stores the error the read saw.
        let poller = &health.components()[0];
        for _ in 0..3000 {
            if poller.errors() > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(poller.errors() > 0 && !poller.is_up(), "{answer:?}");
        // The exporter is back: so are the zones.
        exporter.set(Answer::Sample);
        let readings = read_until(meter.as_mut(), |r| r.is_ok()).unwrap();
        assert_eq!(readings.len(), 3, "{answer:?}");
    }
}

#[test]
fn probe_asks_the_exporter_once() {
    let exporter = Exporter::start(Answer::Sample);
    let settings = settings(Some(&exporter.url));
    let meter = "dcgm"
        .parse::<MeterName>()
        .unwrap()
        .open(&OpenContext::new(&settings))
        .unwrap();
    let detail = meter.detail().unwrap_or_default();
    assert!(
        detail.starts_with("dcgm-exporter at http://127.0.0.1:"),
        "{detail}"
    );
    assert!(detail.contains("answered"), "{detail}");
    assert_eq!(exporter.requests.load(Ordering::Relaxed), 1);
}

#[test]
fn unavailable_with_the_reason() {
    let background = Background::new();
    let mut off = settings(Some("http://127.0.0.1:9400/metrics"));
    off.gpu.enabled = false;
    for (settings, reason) in [
        (off, "experimental.gpu.enabled is false"),
        (settings(None), "experimental.gpu.dcgmEndpoint is not set"),
        (
            settings(Some("  ")),
            "experimental.gpu.dcgmEndpoint is not set",
        ),
        (
            settings(Some("localhost:9400/metrics")),
            "experimental.gpu.dcgmEndpoint is invalid",
        ),
    ] {
        let Err(e) = open(&settings, &background) else {
            panic!("{reason}: opened");
        };
        assert!(e.reason.contains(reason), "{}", e.reason);
    }
    // Nothing to poll: no poller was left behind.
    assert!(background.take().is_empty());
}
