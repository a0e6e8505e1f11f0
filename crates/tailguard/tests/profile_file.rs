//! Profile files: TOML and Seastar YAML round trips, version and key errors, and
//! the scheduler builder taking a file.

use std::path::PathBuf;
use tailguard::profile_file::{
    DeviceEntry, Knee, Metadata, ProfileFile, ProfileFormat, Rates, PROFILE_FILE_VERSION,
};
use tailguard::{ErrorKind, Scheduler};

/// The message of a profile file's error; fails the test for any other kind.
fn message(error: &tailguard::Error) -> &str {
    match error.kind() {
        ErrorKind::ProfileFile { message } => message,
        other => panic!("not a profile file error: {other:?}"),
    }
}

fn sample() -> ProfileFile {
    let mut entry = DeviceEntry::from_rates(Rates {
        read_iops: 81_000.5,
        write_iops: 60_000.0,
        read_bandwidth: 520e6,
        write_bandwidth: 450e6,
    });
    entry.max_request_bytes = Some(256 * 1024);
    entry.latency_target_us = Some(400);
    entry.first = Some(Rates {
        read_iops: 90_000.0,
        write_iops: 70_000.0,
        read_bandwidth: 530e6,
        write_bandwidth: 500e6,
    });
    let mut random_read = Knee::default();
    random_read.request_bytes = 4096;
    random_read.queue_depth = 16;
    random_read.in_flight_bytes = 65536;
    random_read.iops = 80_000.0;
    random_read.bandwidth = 80_000.0 * 4096.0;
    random_read.latency_us_p50 = 190.0;
    random_read.latency_us_p99 = 420.5;
    let mut sequential_write = Knee::default();
    sequential_write.request_bytes = 1 << 20;
    sequential_write.queue_depth = 4;
    sequential_write.in_flight_bytes = 4 << 20;
    sequential_write.iops = 430.0;
    sequential_write.bandwidth = 450e6;
    sequential_write.latency_us_p50 = 9000.0;
    sequential_write.latency_us_p99 = 12000.0;
    entry.knee.random_read = Some(random_read);
    entry.knee.sequential_write = Some(sequential_write);
    let mut file = ProfileFile::new();
    let mut metadata = Metadata::default();
    metadata.tool = "tailguard tune".into();
    metadata.tool_version = "0.1.0".into();
    metadata.date = "2025-01-31T12:00:00Z".into();
    metadata.target = "/var/lib/app".into();
    metadata.duration_s = Some(60.0);
    metadata.notes = vec!["a note".into()];
    file.metadata = Some(metadata);
    file.devices.insert("sda".into(), entry);
    let mut other = DeviceEntry::from_rates(Rates {
        read_iops: 200.0,
        write_iops: 180.0,
        read_bandwidth: 150e6,
        write_bandwidth: 140e6,
    });
    other.match_path = Some(PathBuf::from("/"));
    file.devices.insert("root".into(), other);
    file.default = Some(DeviceEntry::from_rates(Rates {
        read_iops: 1000.0,
        write_iops: 1000.0,
        read_bandwidth: 1e8,
        write_bandwidth: 1e8,
    }));
    file
}

#[test]
fn toml_round_trip_keeps_everything() {
    let file = sample();
    let text = file.to_toml_string().unwrap();
    assert!(text.contains("version = 1"), "{text}");
    let back = ProfileFile::from_toml_str(&text).unwrap();
    assert_eq!(back, file);
}

#[test]
fn seastar_round_trip_keeps_the_rates_and_mountpoints() {
    let mut file = sample();
    file.default = None;
    file.devices.get_mut("sda").unwrap().match_path = Some(PathBuf::from("/var/lib/app"));
    let text = file.to_seastar_yaml_string().unwrap();
    let back = ProfileFile::from_seastar_yaml_str(&text).unwrap();
    assert_eq!(back.devices.len(), 2, "{text}");
    for entry in file.devices.values() {
        let mountpoint = entry.match_path.as_ref().unwrap().display().to_string();
        let read = &back.devices[&mountpoint];
        assert_eq!(read.match_path, entry.match_path);
        let (original, parsed) = (entry.rates(), read.rates());
        // Seastar's numbers are integers: rates round.
        assert_eq!(parsed.read_iops, original.read_iops.round());
        assert_eq!(parsed.write_iops, original.write_iops);
        assert_eq!(parsed.read_bandwidth, original.read_bandwidth);
        assert_eq!(parsed.write_bandwidth, original.write_bandwidth);
        assert_eq!(read.max_request_bytes, entry.max_request_bytes);
    }
}

#[test]
fn seastar_files_from_other_writers_load() {
    // Seastar's documented example, with suffixes and a saturation length.
    let documented =
        "disks:\n  - mountpoint: /var/lib/some_seastar_app\n    read_iops: 95000\n    \
                      read_bandwidth: 545M\n    write_iops: 85000\n    write_bandwidth: 510M\n    \
                      write_saturation_length: 64k\n";
    let file = ProfileFile::from_seastar_yaml_str(documented).unwrap();
    let entry = &file.devices["/var/lib/some_seastar_app"];
    assert_eq!(entry.read_bandwidth, 545.0 * 1048576.0);
    assert_eq!(entry.max_request_bytes, Some(65536));
    // PyYAML's dump: list items at the key's indentation, sorted keys, a comment.
    let pyyaml =
        "# generated\ndisks:\n- mountpoint: /var/lib/scylla\n  read_bandwidth: 1000000\n  \
                  read_iops: 2000\n  write_bandwidth: 900000\n  write_iops: 1500\n";
    let file = ProfileFile::from_seastar_yaml_str(pyyaml).unwrap();
    assert_eq!(file.devices["/var/lib/scylla"].write_iops, 1500.0);
    // Flow style and `mountpoints`.
    let flow = "disks: [{mountpoints: [/a, /b], read_iops: 1e4, read_bandwidth: '1G', \
                write_iops: 10, write_bandwidth: 20}]";
    let file = ProfileFile::from_seastar_yaml_str(flow).unwrap();
    assert_eq!(file.devices.len(), 2);
    assert_eq!(file.devices["/b"].read_iops, 1e4);
}

#[test]
fn seastar_errors_name_the_disk_and_key() {
    let missing =
        "disks:\n  - mountpoint: /x\n    read_iops: 1\n    read_bandwidth: 1\n    write_iops: 1\n";
    let error = ProfileFile::from_seastar_yaml_str(missing).unwrap_err();
    assert!(
        message(&error).contains("disks[0]") && message(&error).contains("write_bandwidth"),
        "{error}"
    );
    let unknown = "disks:\n  - mountpoint: /x\n    read_iops: 1\n    read_bandwidth: 1\n    \
                   write_iops: 1\n    write_bandwidth: 1\n    read_iop: 3\n";
    let error = ProfileFile::from_seastar_yaml_str(unknown).unwrap_err();
    assert!(message(&error).contains("read_iop"), "{error}");
    let garbage = "disks:\n  - mountpoint: /x\n    read_iops: fast\n    read_bandwidth: 1\n    \
                   write_iops: 1\n    write_bandwidth: 1\n";
    let error = ProfileFile::from_seastar_yaml_str(garbage).unwrap_err();
    assert!(message(&error).contains("fast"), "{error}");
}

#[test]
fn an_unknown_version_names_the_supported_one() {
    let text = sample().to_toml_string().unwrap().replace(
        &format!("version = {PROFILE_FILE_VERSION}"),
        "version = 7\nfuture_key = true",
    );
    let error = ProfileFile::from_toml_str(&text).unwrap_err();
    assert!(
        message(&error).contains("version 7 is not supported")
            && message(&error).contains(&format!("version {PROFILE_FILE_VERSION}")),
        "{error}"
    );
    let error = ProfileFile::from_toml_str("[device.sda]\nread_iops = 1.0\n").unwrap_err();
    assert!(message(&error).contains("no `version` key"), "{error}");
}

#[test]
fn unknown_keys_are_errors_with_their_name() {
    let text = sample().to_toml_string().unwrap().replace(
        "write_iops = 60000.0",
        "write_iops = 60000.0\nread_iop = 5.0",
    );
    assert!(
        text.contains("read_iop = 5.0"),
        "the fixture changed: {text}"
    );
    let error = ProfileFile::from_toml_str(&text).unwrap_err();
    assert!(message(&error).contains("read_iop"), "{error}");
}

#[test]
fn bad_values_name_the_section_and_key() {
    let text = "version = 1\n[device.sda]\nread_iops = 0.0\nwrite_iops = 1.0\n\
                read_bandwidth = 1.0\nwrite_bandwidth = 1.0\n";
    let error = ProfileFile::from_toml_str(text).unwrap_err();
    assert!(
        message(&error).contains("[device.sda]") && message(&error).contains("read_iops"),
        "{error}"
    );
}

#[test]
fn match_path_resolves_to_the_device_holding_it() {
    let file = sample();
    let resolved = file.resolve().unwrap();
    let root_device = tailguard::device::device_of_path(std::path::Path::new("/"))
        .unwrap()
        .name;
    assert_eq!(resolved.devices[&root_device].read_iops, 200.0);
    assert_eq!(resolved.devices["sda"].max_request_bytes, 256 * 1024);
    assert_eq!(resolved.default.as_ref().unwrap().read_iops, 1000.0);
    let mut missing = sample();
    missing.devices.get_mut("root").unwrap().match_path =
        Some(PathBuf::from("/no/such/tailguard/path"));
    let error = missing.resolve().unwrap_err();
    assert!(
        message(&error).contains("/no/such/tailguard/path"),
        "{error}"
    );
}

#[test]
fn the_scheduler_builder_takes_a_profile_file() {
    let directory =
        std::env::temp_dir().join(format!("tailguard-profile-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let toml_path = directory.join("profile.toml");
    let yaml_path = directory.join("io_properties.yaml");
    let mut file = sample();
    file.save(&toml_path, ProfileFormat::Toml).unwrap();
    file.default = None;
    file.devices.get_mut("sda").unwrap().match_path = Some(directory.clone());
    // One section per device: `/` may be on the directory's device.
    file.devices.remove("root");
    file.save(&yaml_path, ProfileFormat::SeastarYaml).unwrap();
    let built_from_toml = Scheduler::builder()
        .profile_file(&toml_path)
        .and_then(|builder| builder.build());
    let built_from_yaml = Scheduler::builder()
        .profile_file(&yaml_path)
        .and_then(|builder| builder.build());
    std::fs::write(&toml_path, "version = 2\n").unwrap();
    let refused = Scheduler::builder().profile_file(&toml_path);
    std::fs::remove_dir_all(&directory).unwrap();
    built_from_toml.unwrap().shutdown();
    built_from_yaml.unwrap().shutdown();
    let error = refused.unwrap_err().to_string();
    assert!(
        error.contains("profile.toml") && error.contains("version 2"),
        "{error}"
    );
}

#[test]
fn seastar_saturation_lengths_beyond_a_request_size_are_refused_naming_the_key() {
    for length in ["99999999999999999999k", "-1", "2G", ".nan", "1k", "0"] {
        let text = format!(
            "disks:\n  - mountpoint: /srv\n    read_iops: 1\n    read_bandwidth: 1\n    \
             write_iops: 1\n    write_bandwidth: 1\n    write_saturation_length: {length}\n"
        );
        let error = ProfileFile::from_seastar_yaml_str(&text).unwrap_err();
        assert!(
            error.to_string().contains("write_saturation_length"),
            "{length}: {error}"
        );
    }
    let text = "disks:\n  - mountpoint: /srv\n    read_iops: 1\n    read_bandwidth: 1\n    \
                write_iops: 1\n    write_bandwidth: 1\n    write_saturation_length: 1G\n";
    let file = ProfileFile::from_seastar_yaml_str(text).unwrap();
    assert_eq!(file.devices["/srv"].max_request_bytes, Some(1 << 30));
}

#[test]
fn seastar_mountpoints_with_control_characters_read_back_as_themselves() {
    let mut file = sample();
    file.default = None;
    let odd = "/srv/a \"b\"\\c\nd\te\u{1}f";
    file.devices.get_mut("sda").unwrap().match_path = Some(PathBuf::from(odd));
    let text = file.to_seastar_yaml_string().unwrap();
    let back = ProfileFile::from_seastar_yaml_str(&text).unwrap();
    assert_eq!(
        back.devices[odd].match_path.as_deref(),
        Some(std::path::Path::new(odd)),
        "{text}"
    );
}

#[test]
fn two_entries_for_one_device_are_refused() {
    let text = "disks:\n  - mountpoint: /srv\n    read_iops: 1\n    read_bandwidth: 1\n    \
                write_iops: 1\n    write_bandwidth: 1\n  - mountpoint: /srv\n    \
                read_iops: 2\n    read_bandwidth: 2\n    write_iops: 2\n    write_bandwidth: 2\n";
    let error = ProfileFile::from_seastar_yaml_str(text).unwrap_err();
    assert!(
        message(&error).contains("/srv") && message(&error).contains("twice"),
        "{error}"
    );
    // Two TOML sections whose match_path name the same device.
    let mut file = sample();
    let mut twin = file.devices["root"].clone();
    twin.match_path = Some(PathBuf::from("/proc/.."));
    file.devices.insert("root-again".into(), twin);
    file.resolve()
        .expect("two sections of the same values agree");
    file.devices
        .get_mut("root-again")
        .unwrap()
        .latency_target_us = Some(5_000);
    let error = file.resolve().unwrap_err();
    assert!(
        message(&error).contains("[device.root]")
            && message(&error).contains("[device.root-again]"),
        "{error}"
    );
}
