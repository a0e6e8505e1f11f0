//! The scenario reference (`docs/reference/scenario-files.md`) documents exactly
//! the parameters the code accepts: every device model's and policy's parameter
//! struct is serialised with its defaults and its keys are compared with the
//! document's tables, and so are the `[device.profile]` keys (each of which
//! must also parse in a scenario), so the docs cannot drift silently.

use serde::Serialize;
use std::collections::BTreeSet;
use std::path::Path;
use tailguard_sim::device::{hdd, nvme, sata_ssd, usb_flash};
use tailguard_sim::policy::{cfq, deadline, global_cap, tailguard};

const REFERENCE: &str = "docs/reference/scenario-files.md";

fn reference() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(REFERENCE);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

fn keys_of(parameters: &impl Serialize) -> BTreeSet<String> {
    let value = toml::Value::try_from(parameters).unwrap();
    value.as_table().unwrap().keys().cloned().collect()
}

/// The backticked keys in the first column of the table under `heading` (up
/// to the next heading).
fn first_column_keys(reference: &str, heading: &str) -> BTreeSet<String> {
    let section = reference
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no {heading} in {REFERENCE}"));
    let section = section.split("\n#").next().unwrap();
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .map(|rest| rest.split('`').next().unwrap().to_string())
        .collect()
}

/// The backticked keys in the first column of the table under `### `model``.
fn documented_model_keys(reference: &str, model: &str) -> BTreeSet<String> {
    first_column_keys(reference, &format!("### `{model}`"))
}

#[test]
fn every_device_parameter_is_documented_and_every_documented_one_exists() {
    let reference = reference();
    let cases = [
        ("sata-ssd", keys_of(&sata_ssd::SataSsdParameters::default())),
        ("nvme", keys_of(&nvme::NvmeParameters::default())),
        ("hdd", keys_of(&hdd::HddParameters::default())),
        (
            "usb-flash",
            keys_of(&usb_flash::UsbFlashParameters::default()),
        ),
    ];
    for (model, accepted) in cases {
        assert_eq!(
            documented_model_keys(&reference, model),
            accepted,
            "{REFERENCE}, table of {model}"
        );
    }
}

#[test]
fn the_slowdown_parameter_of_every_model_is_documented() {
    let reference = reference();
    assert_eq!(
        documented_model_keys(&reference, "every model"),
        BTreeSet::from(["slowdown".to_string()])
    );
    let window = tailguard_sim::device::SlowdownWindow {
        start_s: 1.0,
        stop_s: 2.0,
        factor: 0.5,
    };
    for key in keys_of(&window) {
        assert!(
            reference.contains(&format!("{key} = ")),
            "{REFERENCE} lacks {key}"
        );
    }
}

#[test]
fn every_policy_parameter_is_documented() {
    let reference = reference();
    let section = reference.split("## Policy parameters").nth(1).unwrap();
    let section = section.split("\n## ").next().unwrap();
    let cases = [
        (
            "`tailguard`",
            keys_of(&tailguard::TailguardParameters {
                budget_us: Some(1),
                slice_us: Some(1),
                ..Default::default()
            }),
        ),
        (
            "`global-cap`",
            keys_of(&global_cap::GlobalCapParameters::default()),
        ),
        ("`cfq`", keys_of(&cfq::CfqParameters::default())),
        (
            "`deadline`",
            keys_of(&deadline::DeadlineParameters::default()),
        ),
    ];
    for (policy, accepted) in cases {
        let documented: BTreeSet<String> = section
            .lines()
            .filter(|line| line.starts_with(&format!("| {policy}")))
            .map(|line| {
                line.split('|')
                    .nth(2)
                    .unwrap()
                    .trim()
                    .trim_matches('`')
                    .to_string()
            })
            .collect();
        assert_eq!(documented, accepted, "{REFERENCE}, rows of {policy}");
    }
}

/// The backticked keys in the first column of the `[device.profile]` table.
fn documented_profile_keys(reference: &str) -> BTreeSet<String> {
    first_column_keys(reference, "## `[device.profile]` keys")
}

#[test]
fn every_profile_key_is_documented_and_each_parses_in_a_scenario() {
    let reference = reference();
    let documented = documented_profile_keys(&reference);
    let profile = tailguard_core::DeviceProfile::uncalibrated(131_072, 300);
    assert_eq!(
        documented,
        keys_of(&profile),
        "{REFERENCE}, table of `[device.profile]` keys"
    );
    for key in &documented {
        let text = format!(
            "duration_s = 1\n\
             [[device]]\nname = \"disk\"\nmodel = \"sata-ssd\"\n\
             [device.profile]\n{key} = 65536\n\
             [[class]]\nname = \"reads\"\nshares = 100\n\
             [[job]]\nclass = \"reads\"\ndevice = \"disk\"\npattern = \"randread\"\nblock_size = \"4k\"\n"
        );
        if let Err(error) = tailguard_sim::scenario::Scenario::from_toml(&text) {
            panic!(
                "{REFERENCE} documents `[device.profile] {key}`, which a scenario refuses: {error}"
            );
        }
    }
}

/// The TOML example under "## Format".
fn format_example(reference: &str) -> String {
    let section = reference.split("## Format").nth(1).unwrap();
    let block = section.split("```toml\n").nth(1).unwrap();
    block.split("```").next().unwrap().to_string()
}

#[test]
fn the_format_example_parses_and_its_policy_tables_build() {
    let text = format_example(&reference());
    let scenario = tailguard_sim::scenario::Scenario::from_toml(&text)
        .unwrap_or_else(|error| panic!("{REFERENCE}'s example is refused: {error}"));
    let context = scenario.policy_context();
    for (&name, parameters) in &scenario.policy_parameters {
        if let Err(error) = tailguard_sim::policy::build(name, &context, parameters) {
            panic!("{REFERENCE}'s example [policy.{name}] is refused: {error}");
        }
    }
    assert!(!scenario.policy_parameters.is_empty());
}
