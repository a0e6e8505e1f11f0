#!/usr/bin/env bash
# The demo scenario of issue 4 on XFS over a loop device over the virtio disk:
# 4 KiB random readers (a latency class) alone; beside heavy writes through the
# page cache (kernel writeback); beside the same writes through tailguard in a
# background class. Three columns, REPS interleaved repetitions (solo, buffered,
# tailguard, solo, ...), then the issue's criteria.
#
#   sudo benchmarks/demo-xfs-loop.sh                # 3 repetitions of 3 x 20 s, ~4 minutes
#   REPS=1 DURATION_S=10 benchmarks/demo-xfs-loop.sh
#   TAILGUARD_FLAGS="--controller adaptive" benchmarks/demo-xfs-loop.sh
#
# Needs root, losetup, mkfs.xfs (apt-get install -y xfsprogs) and python3. Sets
# up a sparse image file under $IMAGE_DIR (default: target/demo-xfs in the
# repository, on the disk under test), a loop device over it (--direct-io=on,
# so the loop device passes I/O to the disk instead of caching it twice), XFS
# on it, and one data file of 18 GiB (the readers' first 2 GiB filled with
# random data); everything is torn down on exit, failure and Ctrl-C included.
#
# The workload is benchmarks/demo-scenario.toml (readers + writers) and
# benchmarks/demo-readers.toml (readers alone), run by `tailguard bench` with
# --json. Once `tailguard demo DIR` exists, only run_column needs to change.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benchmarks/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
IMAGE_DIR=${IMAGE_DIR:-$CARGO_TARGET_DIR/demo-xfs}
IMAGE_GB=${IMAGE_GB:-24}
DATA_GB=${DATA_GB:-18}
READ_REGION_MB=${READ_REGION_MB:-2048}
REPS=${REPS:-3}
# Extra bench flags for the tailguard column (--profile, --controller, ...).
TAILGUARD_FLAGS=${TAILGUARD_FLAGS:-}
DURATION_S=${DURATION_S:-20}
RESULTS=${RESULTS:-$CARGO_TARGET_DIR/bench-results/demo-xfs-$(date +%Y%m%d-%H%M%S)}

xfs_loop_prepare "$IMAGE_DIR"
need python3 "install it with: apt-get install -y python3"

mkdir -p "$IMAGE_DIR" "$RESULTS"
echo "== machine"
{
  describe_machine "$IMAGE_DIR"
  echo "dirty_background_ratio: $(cat /proc/sys/vm/dirty_background_ratio), dirty_ratio: $(cat /proc/sys/vm/dirty_ratio)"
} | tee "$RESULTS/machine.txt"

echo "== build (release)"
BIN=$(tailguard_binary "$ROOT")

echo "== set up: ${IMAGE_GB} GiB sparse image, loop device, XFS"
xfs_loop_up "$IMAGE_GB"
echo "loop device $LOOP ($(cat /sys/block/"$(basename "$LOOP")"/queue/scheduler)), XFS at $MOUNT_POINT" |
  tee -a "$RESULTS/machine.txt"
DATA="$MOUNT_POINT/demo.data"
fallocate -l "${DATA_GB}G" "$DATA"
echo "filling the readers' ${READ_REGION_MB} MiB with random data"
dd if=/dev/urandom of="$DATA" bs=1M count="$READ_REGION_MB" conv=notrunc oflag=direct status=none
sync

# The job files with this run's duration.
for job in demo-scenario demo-readers; do
  sed "s/^duration_s = .*/duration_s = $DURATION_S/" "$ROOT/benchmarks/$job.toml" >"$RESULTS/$job.toml"
done

run_column() { # column rep: one run of one column, JSON to $RESULTS/COLUMN-REP.json
  local column=$1 rep=$2 job mode flags=()
  case "$column" in
    solo) job=demo-readers; mode=tailguard ;;
    buffered) job=demo-scenario; mode=kernel-buffered ;;
    tailguard) job=demo-scenario; mode=tailguard; read -r -a flags <<<"$TAILGUARD_FLAGS" ;;
  esac
  echo "-- rep $rep: $column ($DURATION_S s)"
  "$BIN" bench "$RESULTS/$job.toml" --target "$DATA" --mode "$mode" "${flags[@]}" --json \
    >"$RESULTS/$column-$rep.json" 2>>"$RESULTS/bench-stderr.txt"
}

echo "== runs (interleaved: solo, buffered, tailguard)"
for rep in $(seq 1 "$REPS"); do
  for column in solo buffered tailguard; do
    run_column "$column" "$rep"
  done
done

echo "== summary"
python3 - "$RESULTS" "$REPS" <<'EOF' | tee "$RESULTS/summary.md"
import json, statistics, sys
results, reps = sys.argv[1], int(sys.argv[2])
def row(column, rep, name):
    runs = json.load(open(f"{results}/{column}-{rep}.json"))
    return next(c for c in runs[0]["classes"] if c["name"] == name)
def p9999(latency):
    # p99.99 when bench reports it; else p99.9, marked.
    for key, value in latency.items():
        if "9999" in key:
            return value, "p99.99"
    return latency["p999"], "p99.9 (p99.99 not reported yet)"
def worst_rate(cls):
    for key, value in cls.items():
        if "worst" in key and isinstance(value, (int, float)):
            return value
    return None
print("| rep | column | read IOPS | read p99 | read p99.9 | read max | worst 0.5 s read rate | write MB/s |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
checks = {"rate": [], "max": [], "write": []}
tail_name = "p99.99"
for rep in range(1, reps + 1):
    reads = {c: row(c, rep, "reads") for c in ("solo", "buffered", "tailguard")}
    writes = {c: row(c, rep, "background") for c in ("buffered", "tailguard")}
    for column in ("solo", "buffered", "tailguard"):
        r = reads[column]
        worst = worst_rate(r)
        mbs = f"{writes[column]['mb_per_s']:.1f}" if column in writes else "–"
        print(f"| {rep} | {column} | {r['iops']:.0f} | {r['latency_us']['p99']:.0f} µs | {r['latency_us']['p999']:.0f} µs "
              f"| {r['latency_us']['max'] / 1000:.1f} ms | {'pending' if worst is None else f'{worst:.0f}/s'} | {mbs} |")
    solo_tail, tail_name = p9999(reads["solo"]["latency_us"])
    worst = worst_rate(reads["tailguard"])
    if worst is not None:
        checks["rate"].append(worst / reads["solo"]["iops"])
    checks["max"].append(reads["tailguard"]["latency_us"]["max"] / solo_tail)
    checks["write"].append(writes["tailguard"]["mb_per_s"] / writes["buffered"]["mb_per_s"])
def mmm(values):
    values = sorted(values)
    return f"{values[0]:.3f} / {statistics.median(values):.3f} / {values[-1]:.3f}"
print(f"\nCriteria (min / median / max over {reps} repetitions; each judged at the worst repetition):")
if checks["rate"]:
    print(f"- tailguard's worst 0.5 s read rate / solo read rate: {mmm(checks['rate'])} "
          f"({'met' if min(checks['rate']) >= 0.5 else 'NOT met'}: >= 0.5)")
else:
    print("- tailguard's worst 0.5 s read rate / solo read rate: pending (bench does not report the worst 0.5 s rate yet)")
print(f"- tailguard read max / solo {tail_name}: {mmm(checks['max'])} ({'met' if max(checks['max']) <= 3 else 'NOT met'}: <= 3)")
print(f"- tailguard write MB/s / buffered write MB/s: {mmm(checks['write'])} ({'met' if min(checks['write']) >= 0.5 else 'NOT met'}: >= 0.5)")
EOF
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$RESULTS/machine.txt"
echo "results in $RESULTS"
