#!/usr/bin/env bash
# Futures awaited on another runtime, with and without the engine thread's
# linger: 16 closed-loop readers of 4 KiB at depth 1 (benchmarks/readers-16.toml)
# through `tailguard bench --driver engine-thread`, each run paired with kernel
# O_DIRECT in the same process (the ratio is within the pair), lingers
# interleaved and their order rotated round by round. Then, per linger, the CPU
# each read costs in tailguard mode alone (perf stat; skipped without perf):
# the closed loop, and sparse open-loop readers (5000 reads/s), the linger's
# worst case.
#
#   benchmarks/engine-linger.sh DIR                    # DIR on the disk to measure
#   ROUNDS=8 LINGERS="0 50 100" benchmarks/engine-linger.sh DIR
#   benchmarks/ram-xfs.sh sh -c 'benchmarks/engine-linger.sh "$MOUNT_POINT"'
#
# Prints one line per run and min / median / max per linger at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benchmarks/lib.sh"
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
TARGET=$1
ROUNDS=${ROUNDS:-8}
LINGERS=${LINGERS:-"0 50"}
need python3 "install python3"
TAILGUARD_BIN=$(tailguard_binary "$ROOT")
describe_machine "$TARGET"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/sparse.toml" <<'TOML'
duration_s = 3
seed = 1

[[class]]
name = "reads"
shares = 100

[[job]]
name = "readers"
class = "reads"
pattern = "randread"
block_size = "4k"
rate_iops = 5000.0
size = "512m"
TOML
bench() { # LINGER JOB MODES
  "$TAILGUARD_BIN" bench "$2" --target "$TARGET" --mode "$3" --driver engine-thread \
    --engine-linger-us "$1" --json 2>/dev/null
}
for round in $(seq 1 "$ROUNDS"); do
  # Rotate the order of the lingers by one each round.
  order=$(echo $LINGERS | tr ' ' '\n' | awk -v r="$round" '{a[NR]=$0} END {for (k=0;k<NR;k++) print a[(k+r)%NR+1]}')
  for linger in $order; do
    bench "$linger" "$ROOT/benchmarks/readers-16.toml" kernel-direct,tailguard > "$WORK/pair.json"
    python3 - "$WORK/pair.json" "$linger" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))
kernel, tailguard = (run["classes"][0]["iops"] for run in runs)
print(f"ratio linger_us={sys.argv[2]} kernel-direct {kernel:.0f} tailguard {tailguard:.0f} ratio {tailguard / kernel:.3f}")
PY
    command -v perf >/dev/null || continue
    for job in "$ROOT/benchmarks/readers-16.toml" "$WORK/sparse.toml"; do
      perf stat -x, -e task-clock,context-switches -o "$WORK/perf.csv" \
        "$TAILGUARD_BIN" bench "$job" --target "$TARGET" --mode tailguard --driver engine-thread \
        --engine-linger-us "$linger" --json 2>/dev/null > "$WORK/alone.json"
      python3 - "$WORK/alone.json" "$WORK/perf.csv" "$linger" "$(basename "$job" .toml)" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))[0]
reads = run["classes"][0]["iops"] * run["duration_s"]
counters = {line.split(",")[2]: float(line.split(",")[0])
            for line in open(sys.argv[2]) if line.count(",") > 3}
print(f"cpu linger_us={sys.argv[3]} {sys.argv[4]} cpu_us_per_read "
      f"{counters['task-clock'] * 1000 / reads:.2f} context_switches_per_read "
      f"{counters['context-switches'] / reads:.3f}")
PY
    done
  done
done | tee "$WORK/lines"
python3 - "$WORK/lines" <<'PY'
import statistics, sys
groups = {}
for line in open(sys.argv[1]):
    fields = line.split()
    if fields[0] == "ratio":
        groups.setdefault((fields[1], "ratio"), []).append(float(fields[-1]))
    elif fields[0] == "cpu":
        groups.setdefault((fields[1], fields[2] + " cpu_us_per_read"), []).append(float(fields[4]))
print("summary (min / median / max):")
for (linger, what), values in sorted(groups.items()):
    print(f"  {linger} {what}: {min(values):.3f} / {statistics.median(values):.3f} / "
          f"{max(values):.3f} ({len(values)} rounds)")
PY
