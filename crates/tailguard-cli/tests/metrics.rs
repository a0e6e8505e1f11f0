//! `tailguard bench --metrics-listen`: the endpoint is scraped over HTTP while
//! the command serves it, the text is parsed by a strict OpenMetrics parser,
//! and its per-class counters and latency histograms agree with the run's
//! `--json` output.

use openmetrics_parser::{openmetrics::parse_openmetrics, MetricNumber, OpenMetricsValue};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod common;

/// The body of `GET /metrics` at `address` (`HOST:PORT`), if it answered 200.
fn scrape(address: &str) -> Option<String> {
    let mut stream = TcpStream::connect(address).ok()?;
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

fn number(value: &MetricNumber) -> f64 {
    match value {
        MetricNumber::Float(float) => *float,
        MetricNumber::Int(int) => *int as f64,
    }
}

/// The value of `family`'s sample whose only label is `class`.
fn class_sample(text: &str, family: &str, class: &str) -> OpenMetricsValue {
    let exposition = parse_openmetrics(text).unwrap_or_else(|error| panic!("{error:?}\n{text}"));
    let family = &exposition.families[family];
    family
        .get_sample_by_label_values(&[class.to_string()])
        .unwrap_or_else(|| panic!("no {class} in {}\n{text}", family.family_name))
        .value
        .clone()
}

/// Starts `tailguard bench JOB --target DIRECTORY` in tailguard mode with
/// `--json` and a metrics endpoint on a free loopback port that lingers for a
/// minute after the run; stdout and stderr are piped.
fn spawn_bench_with_metrics(job: &Path, directory: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tailguard"))
        .args(["bench", job.to_str().unwrap(), "--target"])
        .arg(directory)
        .args([
            "--mode",
            "tailguard",
            "--json",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .args(["--metrics-linger-s", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Follows `child`'s stderr until it says the run is over, then scrapes the
/// endpoint it announced; kills `child` and fails if that takes a minute.
fn scrape_when_over(child: &mut Child) -> String {
    let (lines, lines_received) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut address = None;
    let mut log = Vec::new();
    loop {
        let Ok(line) = lines_received.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            panic!("no final-metrics line on stderr: {log:?}");
        };
        log.push(line.clone());
        if let Some(url) = line.strip_prefix("metrics: serving http://") {
            address = Some(url.trim_end_matches("/metrics").to_string());
        }
        if line.starts_with("metrics: the run is over") {
            let address = address.as_deref().expect("the URL comes first");
            return scrape(address).expect("the final metrics");
        }
    }
}

/// Asserts that the scrape `text` has `class`'s (one class of the run's JSON)
/// operations, errors and latency histogram.
fn check_class(text: &str, class: &serde_json::Value) {
    let name = class["name"].as_str().unwrap();
    let scheduler = &class["scheduler"];
    let ops = scheduler["ops"].as_u64().unwrap();
    assert!(ops > 0, "{name} ran nothing");
    let OpenMetricsValue::Counter(scraped_ops) =
        class_sample(text, "tailguard_class_operations", name)
    else {
        panic!("operations is not a counter");
    };
    assert_eq!(number(&scraped_ops.value), ops as f64, "{name}");
    let OpenMetricsValue::Counter(errors) = class_sample(text, "tailguard_class_errors", name)
    else {
        panic!("errors is not a counter");
    };
    assert_eq!(number(&errors.value), scheduler["errors"].as_f64().unwrap());
    let OpenMetricsValue::Histogram(latency) =
        class_sample(text, "tailguard_class_latency_seconds", name)
    else {
        panic!("latency is not a histogram");
    };
    assert_eq!(latency.count, Some(ops), "{name}");
    // The JSON's mean is in µs to three decimals.
    let mean_us = number(latency.sum.as_ref().unwrap()) * 1e6 / ops as f64;
    let json_mean_us = scheduler["latency_us"]["mean"].as_f64().unwrap();
    assert!(
        (mean_us - json_mean_us).abs() < 0.01,
        "{mean_us} vs {json_mean_us}"
    );
    let slowest_bucket = latency
        .buckets
        .iter()
        .find(|bucket| number(&bucket.count) == ops as f64)
        .expect("the +Inf bucket holds every request");
    let max_s = scheduler["latency_us"]["max"].as_f64().unwrap() / 1e6;
    assert!(
        slowest_bucket.upper_bound >= max_s * 0.999,
        "every request at most {} s, the max {max_s} s",
        slowest_bucket.upper_bound
    );
}

#[test]
fn a_scrape_after_the_run_agrees_with_the_json() {
    let directory = common::scratch_dir("metrics", "bench");
    let job = directory.with_extension("toml");
    std::fs::write(
        &job,
        common::TINY_JOB.replace("duration_s = 0.3", "duration_s = 0.5"),
    )
    .unwrap();
    let mut child = spawn_bench_with_metrics(&job, &directory);
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        text
    });
    let final_text = scrape_when_over(&mut child);
    // Lingering: nothing else to wait for.
    child.kill().unwrap();
    child.wait().unwrap();
    let runs: serde_json::Value = serde_json::from_str(&reader.join().unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&directory);
    let _ = std::fs::remove_file(&job);
    for class in runs[0]["classes"].as_array().unwrap() {
        check_class(&final_text, class);
    }
}

#[test]
fn sigterm_ends_the_linger_with_the_signal_s_status() {
    let directory = common::scratch_dir("metrics", "linger");
    let job = directory.with_extension("toml");
    std::fs::write(&job, common::TINY_JOB).unwrap();
    let mut child = spawn_bench_with_metrics(&job, &directory);
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
    });
    scrape_when_over(&mut child);
    // The linger is a minute; the signal ends it within the poll step.
    let status = common::signal_and_wait(
        &mut child,
        libc::SIGTERM,
        Duration::from_secs(15),
        "a lingering bench",
    );
    reader.join().unwrap();
    let _ = std::fs::remove_dir_all(&directory);
    let _ = std::fs::remove_file(&job);
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
}
