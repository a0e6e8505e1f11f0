//! Metrics: a [`StatsSnapshot`] in the OpenMetrics text format, and a small
//! HTTP server that serves it.
//!
//! [`render_openmetrics`] writes one snapshot with the `prometheus-client`
//! crate's text encoder (the Prometheus project's own Rust client): a
//! collector hands it the snapshot's values as constant counters, gauges and
//! histograms, so nothing is counted twice and the engine's hot path stays
//! free of atomics. Per class (label `class`): operations, bytes and errors
//! (counters), shares and, for a class with a rate limit, its caps in bytes
//! and operations per second (gauges; no sample where not capped), and the
//! queue wait, device time and latency as
//! histograms in seconds, whose `_sum` is the total time queued and the total
//! device time. Per device (label `device`): operations, bytes, budget
//! changes, controller decisions (label `decision`: grow, shrink, hold),
//! congested windows and starvation events (counters), and the budget, the
//! cost in flight, the pieces in flight and queued (gauges). Histogram buckets
//! are the fixed [`crate::stats::BUCKET_BOUNDS_NS`], counted exactly. A
//! family with no sample (no class yet, no device yet, no cap) is left out:
//! some strict parsers refuse a family without samples.
//!
//! [`MetricsServer`] answers `GET /metrics` (and `GET /`) on a loopback
//! address from one thread, one connection at a time, with whatever text its
//! source returns at that moment; any other request gets 404. It refuses
//! non-loopback addresses: the endpoint has no authentication, so exposing it
//! beyond the host is the job of a proxy the operator configures. An
//! `accept` that fails (EMFILE: the process is out of descriptors) is tried
//! again after [`ACCEPT_RETRY_PAUSE`], so the thread waits out the shortage
//! instead of spinning on it.

use crate::stats::{ClassStats, DeviceStats, LatencyHistogram, StatsSnapshot};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The content type of [`render_openmetrics`]'s text.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long the server waits for a client's request before it gives up on it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The pause after a failed `accept` before the next: long enough that a
/// lasting failure (out of descriptors) costs no CPU to speak of, short
/// enough that scrapes resume soon after it passes.
pub const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// `snapshot` in the OpenMetrics text format, ending with `# EOF`.
pub fn render_openmetrics(snapshot: &StatsSnapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(snapshot.clone())));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("writing to a String cannot fail");
    text
}

#[derive(Debug)]
struct SnapshotCollector(StatsSnapshot);

/// One metric family: writes its descriptor, then one sample per item;
/// nothing where there are no items (see the module docs).
fn family<T>(
    encoder: &mut DescriptorEncoder,
    (name, help, unit, metric_type): (&str, &str, Option<&Unit>, MetricType),
    items: &[T],
    mut encode: impl FnMut(&T, &mut MetricEncoder) -> Result<(), std::fmt::Error>,
) -> Result<(), std::fmt::Error> {
    if items.is_empty() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, unit, metric_type)?;
    for item in items {
        encode(item, &mut metric)?;
    }
    Ok(())
}

fn counter(
    metric: &mut MetricEncoder,
    labels: &[(&str, &str)],
    value: u64,
) -> Result<(), std::fmt::Error> {
    ConstCounter::new(value).encode(metric.encode_family(&labels)?)
}

fn gauge(
    metric: &mut MetricEncoder,
    labels: &[(&str, &str)],
    value: i64,
) -> Result<(), std::fmt::Error> {
    ConstGauge::new(value).encode(metric.encode_family(&labels)?)
}

fn gauge_seconds(
    metric: &mut MetricEncoder,
    labels: &[(&str, &str)],
    nanoseconds: u64,
) -> Result<(), std::fmt::Error> {
    ConstGauge::new(nanoseconds as f64 / 1e9).encode(metric.encode_family(&labels)?)
}

fn histogram_seconds(
    metric: &mut MetricEncoder,
    labels: &[(&str, &str)],
    histogram: &LatencyHistogram,
) -> Result<(), std::fmt::Error> {
    let buckets: Vec<(f64, u64)> = histogram
        .buckets()
        .map(|(bound_ns, count)| {
            let bound = if bound_ns == u64::MAX {
                f64::INFINITY
            } else {
                bound_ns as f64 / 1e9
            };
            (bound, count)
        })
        .collect();
    metric
        .encode_family(&labels)?
        .encode_histogram::<NoLabelSet>(
            histogram.sum_ns() as f64 / 1e9,
            histogram.len(),
            &buckets,
            None,
        )
}

fn class_label(class: &ClassStats) -> [(&str, &str); 1] {
    [("class", class.name.as_str())]
}

fn device_label(device: &DeviceStats) -> [(&str, &str); 1] {
    [("device", device.name.as_str())]
}

/// A metric family's name, help, and how it reads its value from `T`.
type Reading<T, V> = (&'static str, &'static str, fn(&T) -> V);

const COUNTER: MetricType = MetricType::Counter;
const GAUGE: MetricType = MetricType::Gauge;
const HISTOGRAM: MetricType = MetricType::Histogram;

impl SnapshotCollector {
    fn encode_classes(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let classes = &self.0.classes;
        let counters: [Reading<ClassStats, u64>; 2] = [
            ("tailguard_class_operations", "Requests completed.", |c| {
                c.ops
            }),
            (
                "tailguard_class_errors",
                "Requests that completed with an error.",
                |c| c.errors,
            ),
        ];
        for (name, help, value) in counters {
            family(
                encoder,
                (name, help, None, COUNTER),
                classes,
                |class, metric| counter(metric, &class_label(class), value(class)),
            )?;
        }
        let bytes = ("tailguard_class_transferred", "Bytes read or written.");
        family(
            encoder,
            (bytes.0, bytes.1, Some(&Unit::Bytes), COUNTER),
            classes,
            |class, metric| counter(metric, &class_label(class), class.bytes),
        )?;
        let shares = (
            "tailguard_class_shares",
            "The class's shares now.",
            None,
            GAUGE,
        );
        family(encoder, shares, classes, |class, metric| {
            gauge(metric, &class_label(class), i64::from(class.shares))
        })?;
        encode_class_caps(encoder, classes)?;
        encode_class_histograms(encoder, classes)
    }

    /// The devices' counters: requests, bytes, and the budget policy's and
    /// the latency controller's decisions.
    fn encode_device_counters(
        &self,
        encoder: &mut DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let devices = &self.0.devices;
        let counters: [Reading<DeviceStats, u64>; 4] = [
            ("tailguard_device_operations", "Requests completed.", |d| {
                d.ops
            }),
            (
                "tailguard_device_budget_changes",
                "Times the budget policy resized the in-flight budget.",
                |d| d.budget_changes,
            ),
            (
                "tailguard_device_congested_windows",
                "Windows the latency controller judged congested.",
                |d| d.controller.congested,
            ),
            (
                "tailguard_device_starved_reads",
                "Starvation events: reads late and overtaken by a whole budget of newer work.",
                |d| d.controller.starved_reads,
            ),
        ];
        for (name, help, value) in counters {
            family(
                encoder,
                (name, help, None, COUNTER),
                devices,
                |device, metric| counter(metric, &device_label(device), value(device)),
            )?;
        }
        let bytes = ("tailguard_device_transferred", "Bytes read or written.");
        family(
            encoder,
            (bytes.0, bytes.1, Some(&Unit::Bytes), COUNTER),
            devices,
            |device, metric| counter(metric, &device_label(device), device.bytes),
        )?;
        let decisions = (
            "tailguard_device_controller_decisions",
            "The latency controller's decisions, by kind.",
            None,
            COUNTER,
        );
        family(encoder, decisions, devices, |device, metric| {
            let name = device.name.as_str();
            let controller = &device.controller;
            for (decision, value) in [
                ("grow", controller.grows),
                ("shrink", controller.shrinks),
                ("hold", controller.holds),
            ] {
                counter(metric, &[("device", name), ("decision", decision)], value)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// The devices' gauges: the budget, and what is in flight and queued now.
    fn encode_device_gauges(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let devices = &self.0.devices;
        let times: [Reading<DeviceStats, u64>; 2] = [
            (
                "tailguard_device_budget",
                "The in-flight budget, in device time.",
                |d| d.budget_ns,
            ),
            (
                "tailguard_device_in_flight",
                "Cost in flight now, in device time.",
                |d| d.in_flight_ns,
            ),
        ];
        for (name, help, value) in times {
            family(
                encoder,
                (name, help, Some(&Unit::Seconds), GAUGE),
                devices,
                |device, metric| gauge_seconds(metric, &device_label(device), value(device)),
            )?;
        }
        let pieces: [Reading<DeviceStats, usize>; 2] = [
            (
                "tailguard_device_in_flight_pieces",
                "Pieces at the device now.",
                |d| d.in_flight_pieces,
            ),
            (
                "tailguard_device_queued_pieces",
                "Pieces waiting in the fair queue.",
                |d| d.queued_pieces,
            ),
        ];
        for (name, help, value) in pieces {
            family(
                encoder,
                (name, help, None, GAUGE),
                devices,
                |device, metric| gauge(metric, &device_label(device), value(device) as i64),
            )?;
        }
        Ok(())
    }
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_classes(&mut encoder)?;
        self.encode_device_counters(&mut encoder)?;
        self.encode_device_gauges(&mut encoder)
    }
}

/// Serves metrics text over HTTP on a loopback address until dropped.
#[derive(Debug)]
pub struct MetricsServer {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `address` (loopback only; port 0 picks a free port) and
    /// answers each `GET /metrics` with what `source` returns then: the text
    /// with status 200, or the error's message with status 503.
    pub fn start(
        address: SocketAddr,
        source: impl Fn() -> io::Result<String> + Send + 'static,
    ) -> io::Result<Self> {
        if !address.ip().is_loopback() {
            return Err(crate::Error::invalid_config(format!(
                "metrics address {address} is not a loopback address: the endpoint has no \
                     authentication, so it listens on 127.0.0.1 or [::1] only (put a proxy in \
                     front of it to scrape it from elsewhere)"
            ))
            .into());
        }
        let listener = TcpListener::bind(address).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("metrics address {address}: {error} (choose another port, or 0 for any free one)"),
            )
        })?;
        let address = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tailguard-metrics".into())
            .spawn(move || {
                serve(
                    || listener.accept().map(|(stream, _)| stream),
                    &stopping,
                    &source,
                    std::thread::sleep,
                )
            })?;
        Ok(Self {
            address,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the port chosen when 0 was asked for).
    pub fn local_address(&self) -> SocketAddr {
        self.address
    }
}

/// The server's loop: answers each connection `accept` gives until `stop`
/// is set, pausing ([`ACCEPT_RETRY_PAUSE`], through `pause`) after each
/// failed `accept`.
fn serve(
    mut accept: impl FnMut() -> io::Result<TcpStream>,
    stop: &AtomicBool,
    source: &dyn Fn() -> io::Result<String>,
    pause: impl Fn(Duration),
) {
    loop {
        let accepted = accept();
        if stop.load(Ordering::Acquire) {
            break;
        }
        match accepted {
            // A client that misbehaves only loses its own answer.
            Ok(stream) => {
                let _ = answer(stream, source);
            }
            Err(error) => {
                tracing::debug!(%error, "tailguard metrics: accept failed; trying again");
                pause(ACCEPT_RETRY_PAUSE);
            }
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.address, REQUEST_TIMEOUT);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads one request's head and writes the answer. The head must come
/// within one [`REQUEST_TIMEOUT`] in all: a client that sends a byte now
/// and then cannot hold the server's only thread.
fn answer(mut stream: TcpStream, source: &dyn Fn() -> io::Result<String>) -> io::Result<()> {
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request's head did not come in time",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..read]);
    }
    let request_line = head.split(|&byte| byte == b'\r').next().unwrap_or(&[]);
    let mut words = request_line.split(|&byte| byte == b' ');
    let (method, path) = (words.next(), words.next());
    let (status, content_type, body) = match (method, path) {
        (Some(b"GET"), Some(b"/metrics" | b"/")) => match source() {
            Ok(text) => ("200 OK", OPENMETRICS_CONTENT_TYPE, text),
            Err(error) => (
                "503 Service Unavailable",
                "text/plain",
                format!("{error}\n"),
            ),
        },
        _ => ("404 Not Found", "text/plain", "GET /metrics\n".to_string()),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

/// The classes' rate caps, one family per dimension, left out when no class
/// has a cap in it (some strict parsers refuse a family without samples).
fn encode_class_caps(
    encoder: &mut DescriptorEncoder,
    classes: &[ClassStats],
) -> Result<(), std::fmt::Error> {
    let caps: [Reading<ClassStats, Option<u64>>; 2] = [
        (
            "tailguard_class_rate_limit_bytes_per_second",
            "The class's cap in bytes per second on each device (no sample: no cap).",
            |c| c.rate_limit_bytes_per_s,
        ),
        (
            "tailguard_class_rate_limit_operations_per_second",
            "The class's cap in requests per second on each device (no sample: no cap).",
            |c| c.rate_limit_iops,
        ),
    ];
    for (name, help, value) in caps {
        // No family without a sample: some strict parsers refuse one.
        if classes.iter().all(|class| value(class).is_none()) {
            continue;
        }
        family(
            encoder,
            (name, help, None, GAUGE),
            classes,
            |class, metric| match value(class) {
                Some(cap) => gauge(
                    metric,
                    &class_label(class),
                    i64::try_from(cap).unwrap_or(i64::MAX),
                ),
                None => Ok(()),
            },
        )?;
    }
    Ok(())
}

/// The classes' queue-wait, device-time and latency histograms, in seconds.
fn encode_class_histograms(
    encoder: &mut DescriptorEncoder,
    classes: &[ClassStats],
) -> Result<(), std::fmt::Error> {
    #[allow(clippy::type_complexity)] // a higher-ranked fn type
    let histograms: [(
        &str,
        &str,
        for<'a> fn(&'a ClassStats) -> &'a LatencyHistogram,
    ); 3] = [
        (
            "tailguard_class_queue_wait_seconds",
            "Enqueue to the dispatch of the last piece (the sum: total time queued).",
            |c| &c.queue_wait_ns,
        ),
        (
            "tailguard_class_device_time_seconds",
            "Dispatch of the last piece to completion (the sum: total device time).",
            |c| &c.device_time_ns,
        ),
        (
            "tailguard_class_latency_seconds",
            "Submission to completion.",
            |c| &c.latency_ns,
        ),
    ];
    for (name, help, histogram) in histograms {
        // The unit is in the name; no UNIT line, which some parsers
        // refuse on histograms.
        let descriptor = (name, help, None, HISTOGRAM);
        family(encoder, descriptor, classes, |class, metric| {
            histogram_seconds(metric, &class_label(class), histogram(class))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_snapshot_without_classes_or_devices_has_no_family_without_samples() {
        let snapshot = StatsSnapshot::new(crate::backend::BackendKind::Threads);
        let text = render_openmetrics(&snapshot);
        assert_eq!(text, "# EOF\n");
    }

    #[test]
    fn a_failing_accept_pauses_before_the_next_try() {
        let stop = AtomicBool::new(false);
        let tries = Cell::new(0);
        let pauses = Cell::new(0);
        let accept = || {
            tries.set(tries.get() + 1);
            if tries.get() == 6 {
                stop.store(true, Ordering::Release);
            }
            Err(io::Error::from_raw_os_error(libc::EMFILE))
        };
        let pause = |pause: Duration| {
            assert_eq!(pause, ACCEPT_RETRY_PAUSE);
            pauses.set(pauses.get() + 1);
        };
        serve(accept, &stop, &|| Ok(String::new()), pause);
        assert_eq!((tries.get(), pauses.get()), (6, 5));
    }
}
