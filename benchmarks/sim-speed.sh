#!/usr/bin/env bash
# Simulated seconds per wall-clock second for a ~100k IOPS workload, per policy,
# repeated (policies interleaved A B A B ...). Prints min/median/max.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-5}
cargo build --release -q -p tailguard-cli
binary=target/release/tailguard
scenario=benchmarks/sim-100k-iops.toml
for policy in tailguard fifo; do : > "/tmp/sim-speed-$policy"; done
for _ in $(seq "$repeats"); do
    for policy in tailguard fifo; do
        start=$(date +%s.%N)
        "$binary" sim "$scenario" --policy "$policy" --json > "/tmp/sim-speed-$policy.json"
        end=$(date +%s.%N)
        echo "$start $end" >> "/tmp/sim-speed-$policy"
    done
done
for policy in tailguard fifo; do
    python3 - "$policy" <<'PY'
import json, statistics, sys
policy = sys.argv[1]
report = json.load(open(f"/tmp/sim-speed-{policy}.json"))
ops = sum(row["ops"] for row in report["classes"])
simulated = report["duration_s"]
rates = sorted(simulated / (float(e) - float(s)) for s, e in (l.split() for l in open(f"/tmp/sim-speed-{policy}")))
print(f"{policy:10} {ops / simulated:9.0f} IOPS simulated: simulated s per wall s "
      f"min {rates[0]:.2f} median {statistics.median(rates):.2f} max {rates[-1]:.2f} "
      f"({ops / simulated * statistics.median(rates) / 1e6:.2f} M simulated requests per wall s)")
PY
done
