//! A run is a pure function of (scenario, policy, seed): the same inputs give
//! byte-identical JSON, and another seed gives different numbers.

use std::path::Path;
use tailguard_sim::engine::run;
use tailguard_sim::policy::PolicyName;
use tailguard_sim::scenario::Scenario;

fn json(scenario: &Scenario, policy: PolicyName, seed: u64) -> String {
    serde_json::to_string(&run(scenario, policy, seed).unwrap()).unwrap()
}

#[test]
fn same_scenario_and_seed_give_identical_json() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/seed-002-starvation.toml");
    let mut scenario = Scenario::from_file(&path).unwrap();
    scenario.duration_ns = 2_000_000_000;
    for policy in [
        PolicyName::Tailguard,
        PolicyName::CfqFixed,
        PolicyName::Fifo,
    ] {
        let first = json(&scenario, policy, 42);
        let second = json(&scenario, policy, 42);
        assert_eq!(first, second, "{policy} is not deterministic");
        let other_seed = json(&scenario, policy, 43);
        assert_ne!(first, other_seed, "{policy}: the seed changes nothing");
    }
}
