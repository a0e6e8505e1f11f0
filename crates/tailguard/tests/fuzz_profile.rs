//! The profile parsers under fuzzing: mutated profile TOML (as `tailguard
//! tune` writes it) and mutated Seastar `io_properties.yaml` (as we write it,
//! as Seastar documents it, as PyYAML dumps it, in flow style), and random
//! text, go through `ProfileFile::from_toml_str` and
//! `ProfileFile::from_seastar_yaml_str`. Each must return (no panic, no hang)
//! a profile or an error that says what is wrong; an accepted profile must
//! write out and read back.
//!
//! CI runs a fixed set of cases; `PROPTEST_CASES=100000 cargo test --release
//! -p tailguard --test fuzz_profile` runs a longer campaign
//! (`PROPTEST_RNG_SEED=N` for other inputs).

#[path = "../../tailguard-sim/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use fuzz_support::{config, mutated, parse_bounded, random_text};
use proptest::prelude::*;
use std::path::PathBuf;
use std::sync::OnceLock;
use tailguard::profile_file::{DeviceEntry, Knee, Metadata, ProfileFile, Rates};

fn sample() -> ProfileFile {
    let rates = Rates {
        read_iops: 81_000.5,
        write_iops: 60_000.0,
        read_bandwidth: 520e6,
        write_bandwidth: 450e6,
    };
    let mut entry = DeviceEntry::from_rates(rates);
    entry.max_request_bytes = Some(256 * 1024);
    entry.latency_target_us = Some(400);
    entry.first = Some(rates);
    let mut knee = Knee::default();
    knee.request_bytes = 4096;
    knee.queue_depth = 16;
    knee.in_flight_bytes = 65536;
    knee.iops = 80_000.0;
    knee.bandwidth = 80_000.0 * 4096.0;
    knee.latency_us_p50 = 190.0;
    knee.latency_us_p99 = 420.5;
    entry.knee.random_read = Some(knee);
    let mut file = ProfileFile::new();
    let mut metadata = Metadata::default();
    metadata.tool = "tailguard tune".into();
    metadata.date = "2025-01-31T12:00:00Z".into();
    metadata.duration_s = Some(60.0);
    metadata.notes = vec!["a note".into()];
    file.metadata = Some(metadata);
    file.devices.insert("sda".into(), entry);
    let mut other = DeviceEntry::from_rates(rates);
    other.match_path = Some(PathBuf::from("/var/lib/app"));
    file.devices.insert("root".into(), other);
    file.default = Some(DeviceEntry::from_rates(rates));
    file
}

fn leak(texts: Vec<String>) -> &'static [&'static str] {
    let texts: Vec<&'static str> = texts
        .into_iter()
        .map(|text| &*Box::leak(text.into_boxed_str()))
        .collect();
    Vec::leak(texts)
}

fn toml_bases() -> &'static [&'static str] {
    static BASES: OnceLock<&'static [&'static str]> = OnceLock::new();
    BASES.get_or_init(|| leak(vec![sample().to_toml_string().unwrap()]))
}

fn yaml_bases() -> &'static [&'static str] {
    static BASES: OnceLock<&'static [&'static str]> = OnceLock::new();
    BASES.get_or_init(|| {
        let mut file = sample();
        file.default = None;
        file.devices.get_mut("sda").unwrap().match_path = Some(PathBuf::from("/srv/data"));
        leak(vec![
            file.to_seastar_yaml_string().unwrap(),
            "disks:\n  - mountpoint: /var/lib/some_seastar_app\n    read_iops: 95000\n    \
             read_bandwidth: 545M\n    write_iops: 85000\n    write_bandwidth: 510M\n    \
             write_saturation_length: 64k\n"
                .to_string(),
            "# generated\ndisks:\n- mountpoint: /var/lib/scylla\n  read_bandwidth: 1000000\n  \
             read_iops: 2000\n  write_bandwidth: 900000\n  write_iops: 1500\n"
                .to_string(),
            "disks: [{mountpoints: [/a, /b], read_iops: 1e4, read_bandwidth: '1G', \
             write_iops: 10, write_bandwidth: 20}]\n"
                .to_string(),
        ])
    })
}

/// An accepted profile writes out in both formats without a panic, and its
/// TOML reads back.
fn check_accepted(file: &ProfileFile) {
    let text = file.to_toml_string().unwrap();
    if let Err(error) = ProfileFile::from_toml_str(&text) {
        panic!("an accepted profile does not read back: {error}\n{text}");
    }
    let _ = file.to_seastar_yaml_string();
}

fn check_refused(error: impl std::fmt::Display) {
    let message = error.to_string();
    assert!(!message.trim().is_empty(), "an empty error");
}

fn check_toml(text: &str) {
    match parse_bounded(text, ProfileFile::from_toml_str) {
        Ok(file) => check_accepted(&file),
        Err(error) => check_refused(error),
    }
}

fn check_yaml(text: &str) {
    match parse_bounded(text, ProfileFile::from_seastar_yaml_str) {
        Ok(file) => check_accepted(&file),
        Err(error) => check_refused(error),
    }
}

#[test]
fn every_base_profile_parses() {
    for text in toml_bases() {
        ProfileFile::from_toml_str(text).unwrap();
    }
    for text in yaml_bases() {
        ProfileFile::from_seastar_yaml_str(text).unwrap();
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_profile_toml_parses_or_fails_cleanly(text in mutated(toml_bases())) {
        check_toml(&text);
    }

    #[test]
    fn mutated_seastar_yaml_parses_or_fails_cleanly(text in mutated(yaml_bases())) {
        check_yaml(&text);
    }

    #[test]
    fn random_text_fails_cleanly_in_both_formats(text in random_text()) {
        check_toml(&text);
        check_yaml(&text);
    }
}
