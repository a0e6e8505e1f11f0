//! The metrics endpoint end to end: requests in two classes, a scrape over
//! HTTP, the text parsed by a strict OpenMetrics parser, and every per-class and
//! per-device counter and histogram compared with the stats' JSON.

use openmetrics_parser::{
    openmetrics::parse_openmetrics, HistogramValue, MetricNumber, OpenMetricsValue,
};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use tailguard::{AlignedBuffer, BackendChoice, MetricsServer, OpenOptions, RateLimit, Scheduler};

/// `GET path` on `address`: the status line, the headers, and the body.
fn http_get(address: SocketAddr, path: &str) -> (String, String, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("a complete response");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

fn number(value: &MetricNumber) -> f64 {
    match value {
        MetricNumber::Float(float) => *float,
        MetricNumber::Int(int) => *int as f64,
    }
}

/// A parsed scrape: (family, `label=value` pairs sorted and joined by ',') to
/// its value.
type Samples = HashMap<(String, String), OpenMetricsValue>;

/// The parsed scrape of `text`.
fn samples(text: &str) -> Samples {
    let exposition = parse_openmetrics(text).unwrap_or_else(|error| panic!("{error:?}\n{text}"));
    let mut samples = HashMap::new();
    for (name, family) in exposition.families {
        for sample in family.iter_samples() {
            let labels = sample.get_labelset().unwrap();
            let mut pairs: Vec<String> = labels
                .iter()
                .map(|(label, value)| format!("{label}={value}"))
                .collect();
            pairs.sort();
            samples.insert((name.clone(), pairs.join(",")), sample.value.clone());
        }
    }
    samples
}

fn counter(samples: &Samples, name: &str, label: &str) -> f64 {
    match samples.get(&(name.to_string(), label.to_string())) {
        Some(OpenMetricsValue::Counter(counter)) => number(&counter.value),
        other => panic!("{name}{{{label}}}: {other:?}"),
    }
}

/// Writes 8 blocks through a capped `writes` class, reads 5 and runs 7 nops
/// through a `reads` class, on a buffered scratch file; returns its path.
fn run_two_classes(scheduler: &Scheduler) -> std::path::PathBuf {
    let reads = scheduler.add_class("reads", 200).unwrap();
    let writes = scheduler.add_class("writes", 50).unwrap();
    // A cap far above what the test moves, so that it shows in the scrape.
    writes
        .set_rate_limit(Some(RateLimit::bytes_per_s(1 << 30)))
        .unwrap();
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("metrics-data");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .direct(false)
        .open(scheduler, &path)
        .unwrap();
    for block in 0..8u64 {
        let buffer = AlignedBuffer::new(4096, 4096).unwrap();
        let (result, _) = file.write_at(&writes, buffer, block * 4096).wait();
        assert_eq!(result.unwrap(), 4096);
    }
    for block in 0..5u64 {
        let buffer = AlignedBuffer::new(4096, 4096).unwrap();
        let (result, _) = file.read_at(&reads, buffer, block * 4096).wait();
        assert_eq!(result.unwrap(), 4096);
    }
    for _ in 0..7 {
        scheduler.nop(&reads).wait().unwrap();
    }
    path
}

/// Asserts that class `class` of the stats' JSON has the same counters and
/// histograms in the scrape (`body`, shown on failure).
fn check_class(scraped: &Samples, class: &serde_json::Value, body: &str) {
    let name = class["name"].as_str().unwrap();
    for (family, field) in [
        ("tailguard_class_operations", "ops"),
        ("tailguard_class_errors", "errors"),
        ("tailguard_class_transferred_bytes", "bytes"),
    ] {
        assert_eq!(
            counter(scraped, family, &format!("class={name}")),
            class[field].as_f64().unwrap(),
            "{family} of {name}\n{body}"
        );
    }
    for (family, field) in [
        ("tailguard_class_queue_wait_seconds", "queue_wait_ns"),
        ("tailguard_class_device_time_seconds", "device_time_ns"),
        ("tailguard_class_latency_seconds", "latency_ns"),
    ] {
        let Some(OpenMetricsValue::Histogram(histogram)) =
            scraped.get(&(family.to_string(), format!("class={name}")))
        else {
            panic!("{family}{{{name}}} is not a histogram\n{body}");
        };
        check_histogram(histogram, &class[field], &format!("{family} {name}"));
    }
}

/// Asserts that a scraped histogram has the count, sum (in seconds) and
/// cumulative buckets of `summary`, one of the stats' JSON histograms.
fn check_histogram(histogram: &HistogramValue, summary: &serde_json::Value, what: &str) {
    assert_eq!(histogram.count, summary["count"].as_u64(), "{what}");
    let sum = number(histogram.sum.as_ref().unwrap());
    let sum_ns = summary["sum_ns"].as_f64().unwrap();
    assert!(
        (sum * 1e9 - sum_ns).abs() <= 1.0 + sum_ns * 1e-12,
        "{what} sum"
    );
    let mut cumulative = 0.0;
    let buckets = summary["buckets"].as_array().unwrap();
    assert_eq!(histogram.buckets.len(), buckets.len(), "{what} buckets");
    for (scraped_bucket, bucket) in histogram.buckets.iter().zip(buckets) {
        cumulative += bucket["count"].as_f64().unwrap();
        assert_eq!(number(&scraped_bucket.count), cumulative, "{what}");
        match bucket["le_ns"].as_f64() {
            Some(bound_ns) => {
                assert!((scraped_bucket.upper_bound * 1e9 - bound_ns).abs() < 1e-3)
            }
            None => assert!(scraped_bucket.upper_bound.is_infinite()),
        }
    }
}

/// Asserts what [`run_two_classes`] did, as the scrape counts it: the capped
/// class's cap (and no cap for the other), and each class's operations.
fn check_two_classes(scraped: &Samples, body: &str) {
    let cap = "tailguard_class_rate_limit_bytes_per_second".to_string();
    match scraped.get(&(cap.clone(), "class=writes".to_string())) {
        Some(OpenMetricsValue::Gauge(gauge)) => assert_eq!(number(gauge), 1073741824.0),
        other => panic!("{cap}{{writes}}: {other:?}\n{body}"),
    }
    assert!(
        !scraped.contains_key(&(cap, "class=reads".to_string())),
        "an uncapped class has no cap sample\n{body}"
    );
    assert_eq!(
        counter(scraped, "tailguard_class_operations", "class=reads"),
        12.0
    );
    assert_eq!(
        counter(scraped, "tailguard_class_operations", "class=writes"),
        8.0
    );
    assert_eq!(
        counter(scraped, "tailguard_class_transferred_bytes", "class=writes"),
        8.0 * 4096.0
    );
}

/// Asserts that device `device` of the stats' JSON has the same counters in
/// the scrape.
fn check_device(scraped: &Samples, device: &serde_json::Value) {
    let name = device["name"].as_str().unwrap();
    let label = format!("device={name}");
    assert_eq!(
        counter(scraped, "tailguard_device_operations", &label),
        device["ops"].as_f64().unwrap()
    );
    assert_eq!(
        counter(scraped, "tailguard_device_budget_changes", &label),
        device["budget_changes"].as_f64().unwrap()
    );
    for (decision, field) in [("grow", "grows"), ("shrink", "shrinks"), ("hold", "holds")] {
        assert_eq!(
            counter(
                scraped,
                "tailguard_device_controller_decisions",
                &format!("decision={decision},{label}")
            ),
            device["controller"][field].as_f64().unwrap()
        );
    }
    assert_eq!(
        counter(scraped, "tailguard_device_starved_reads", &label),
        device["controller"]["starved_reads"].as_f64().unwrap()
    );
}

#[test]
fn a_scrape_agrees_with_the_stats_json() {
    let scheduler = Scheduler::builder()
        .backend(BackendChoice::Threads)
        .build()
        .unwrap();
    let path = run_two_classes(&scheduler);
    let source = scheduler.clone();
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), move || {
        source
            .stats()
            .map(|stats| tailguard::render_openmetrics(&stats))
    })
    .unwrap();
    let (status, headers, body) = http_get(server.local_address(), "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(
        headers.contains("application/openmetrics-text"),
        "{headers}"
    );
    let scraped = samples(&body);
    let json = serde_json::to_value(scheduler.stats().unwrap()).unwrap();
    for class in json["classes"].as_array().unwrap() {
        check_class(&scraped, class, &body);
    }
    check_two_classes(&scraped, &body);
    for device in json["devices"].as_array().unwrap() {
        check_device(&scraped, device);
    }
    let (status, _, _) = http_get(server.local_address(), "/other");
    assert!(status.contains("404"), "{status}");
    drop(server);
    let _ = std::fs::remove_file(path);
}

#[test]
fn the_server_refuses_addresses_beyond_loopback_and_serves_source_errors_as_503() {
    let error =
        MetricsServer::start("0.0.0.0:0".parse().unwrap(), || Ok(String::new())).unwrap_err();
    assert!(error.to_string().contains("loopback"), "{error}");
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), || {
        Err(std::io::Error::other("the scheduler is shut down"))
    })
    .unwrap();
    let (status, _, body) = http_get(server.local_address(), "/metrics");
    assert!(status.contains("503"), "{status}");
    assert!(body.contains("shut down"), "{body}");
}

/// A class removed and added again under its name is one entry in the
/// stats and one series per family in the metrics (two series with one
/// label set break the format), counting the requests of both.
#[test]
fn a_name_used_again_after_a_removal_is_one_series() {
    let scheduler = Scheduler::builder()
        .backend(BackendChoice::Threads)
        .build()
        .unwrap();
    let first = scheduler.add_class("again", 100).unwrap();
    scheduler.nop(&first).wait().unwrap();
    first.remove().unwrap();
    let second = scheduler.add_class("again", 300).unwrap();
    for _ in 0..2 {
        scheduler.nop(&second).wait().unwrap();
    }
    let stats = scheduler.stats().unwrap();
    let named: Vec<_> = stats
        .classes
        .iter()
        .filter(|class| class.name == "again")
        .collect();
    assert_eq!(named.len(), 1, "{named:?}");
    assert_eq!(named[0].ops, 3, "both classes' requests");
    assert_eq!(named[0].shares, 300, "the live class's shares");
    assert_eq!(named[0].latency_ns.len(), 3);
    let text = tailguard::render_openmetrics(&stats);
    let series = text
        .lines()
        .filter(|line| line.starts_with("tailguard_class_operations_total{class=\"again\"}"))
        .count();
    assert_eq!(series, 1, "{text}");
    let scraped = samples(&text);
    assert_eq!(
        counter(&scraped, "tailguard_class_operations", "class=again"),
        3.0
    );
}
