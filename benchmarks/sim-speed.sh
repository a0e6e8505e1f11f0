#!/usr/bin/env bash
# Simulated seconds per wall-clock second for a ~100k IOPS workload, per policy,
# repeated (policies interleaved A B A B ...). Prints min/median/max.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benchmarks/lib.sh"
repeats=${1:-5}
binary=$(tailguard_binary "$ROOT")
scenario=$ROOT/benchmarks/sim-100k-iops.toml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for policy in tailguard fifo; do : > "$work/$policy"; done
for _ in $(seq "$repeats"); do
    for policy in tailguard fifo; do
        start=$(date +%s.%N)
        "$binary" sim "$scenario" --policy "$policy" --json > "$work/$policy.json"
        end=$(date +%s.%N)
        echo "$start $end" >> "$work/$policy"
    done
done
for policy in tailguard fifo; do
    python3 - "$work" "$policy" <<'PY'
import json, os, statistics, sys
work, policy = sys.argv[1], sys.argv[2]
report = json.load(open(os.path.join(work, f"{policy}.json")))
ops = sum(row["ops"] for row in report["classes"])
simulated = report["duration_s"]
rates = sorted(simulated / (float(e) - float(s)) for s, e in (l.split() for l in open(os.path.join(work, policy))))
print(f"{policy:10} {ops / simulated:9.0f} IOPS simulated: simulated s per wall s "
      f"min {rates[0]:.2f} median {statistics.median(rates):.2f} max {rates[-1]:.2f} "
      f"({ops / simulated * statistics.median(rates) / 1e6:.2f} M simulated requests per wall s)")
PY
done
