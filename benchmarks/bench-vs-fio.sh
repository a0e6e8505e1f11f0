#!/usr/bin/env bash
# Is `tailguard bench` an honest measuring tool? Runs the same fio job file
# through fio and through `tailguard bench --fio FILE --mode kernel-direct`, on
# the same file, interleaved, and compares IOPS and median latency.
#
#   benchmarks/bench-vs-fio.sh                    # QD 1 and 16, 5 pairs each, ~2 minutes
#   DEPTHS="1 16 64" REPS=7 SECS=5 benchmarks/bench-vs-fio.sh
#
# For each queue depth, one fio job file (4 KiB randread, ioengine=io_uring,
# direct=1, time_based) is written and run REPS times by each tool, alternating
# which goes first (fio, bench, bench, fio, ...). Ratios are bench / fio within
# each pair; the summary prints min / median / max. Goal (issue 4): IOPS within
# 10% and p50 within 15% of fio's. The test file is deleted on exit, failure
# included. Latency: fio's lat_ns (submission to completion); bench's latency
# from the intended start (for a closed loop, the previous completion).
# TAILGUARD_BIN and FIO name prebuilt binaries (benchmarks/lib.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benchmarks/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BENCH_DIR=${BENCH_DIR:-$CARGO_TARGET_DIR/bench-vs-fio}
SIZE_MB=${SIZE_MB:-1024}
SECS=${SECS:-5}
REPS=${REPS:-5}
DEPTHS=${DEPTHS:-"1 16"}
RESULTS=${RESULTS:-$CARGO_TARGET_DIR/bench-results/bench-vs-fio-$(date +%Y%m%d-%H%M%S)}

need_fio
need python3 "install it with: apt-get install -y python3"

mkdir -p "$BENCH_DIR" "$RESULTS"
FILE="$BENCH_DIR/randread-$$.dat"
cleanup() { rm -f "$FILE"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== machine"
describe_machine "$BENCH_DIR" | tee "$RESULTS/machine.txt"

echo "== build (release)"
BIN=$(tailguard_binary "$ROOT")
[ -x "$BIN" ] || { echo "could not build $BIN" >&2; exit 1; }

echo "== creating ${SIZE_MB} MiB test file $FILE (real data, O_DIRECT writes)"
"$FIO" --name=fill --filename="$FILE" --rw=write --bs=1M --size="${SIZE_MB}M" --direct=1 \
  --ioengine=psync --output=/dev/null
sync

job_file() { # depth -> path of the fio job file both tools run
  local path="$RESULTS/randread-qd$1.fio"
  cat >"$path" <<EOF
[global]
filename=$FILE
ioengine=io_uring
direct=1
rw=randread
bs=4k
size=${SIZE_MB}m
runtime=$SECS
time_based
lat_percentiles=1

[randread-qd$1]
iodepth=$1
EOF
  echo "$path"
}

run_fio() { # depth rep job
  "$FIO" --output-format=json "$3" >"$RESULTS/fio-qd$1-rep$2.json"
  python3 - "$RESULTS/fio-qd$1-rep$2.json" "$1" "$2" <<'EOF' | tee -a "$RESULTS/pairs.tsv"
import json, sys
read = json.load(open(sys.argv[1]))["jobs"][0]["read"]
print(f"fio\t{sys.argv[2]}\t{sys.argv[3]}\t{read['iops']:.1f}\t{read['lat_ns']['percentile']['50.000000'] / 1000:.2f}\t{read['lat_ns']['percentile']['99.000000'] / 1000:.2f}")
EOF
}

run_bench() { # depth rep job
  "$BIN" bench --fio "$3" --mode kernel-direct --json >"$RESULTS/bench-qd$1-rep$2.json" \
    2>>"$RESULTS/bench-stderr.txt"
  python3 - "$RESULTS/bench-qd$1-rep$2.json" "$1" "$2" <<'EOF' | tee -a "$RESULTS/pairs.tsv"
import json, sys
row = json.load(open(sys.argv[1]))[0]["classes"][0]
print(f"bench\t{sys.argv[2]}\t{sys.argv[3]}\t{row['iops']:.1f}\t{row['latency_us']['p50']:.2f}\t{row['latency_us']['p99']:.2f}")
EOF
}

echo "== 4 KiB random reads, O_DIRECT, io_uring: fio vs tailguard bench --mode kernel-direct"
printf 'tool\tdepth\trep\tiops\tp50_us\tp99_us\n' | tee "$RESULTS/pairs.tsv"
for depth in $DEPTHS; do
  job=$(job_file "$depth")
  for rep in $(seq 1 "$REPS"); do
    if [ $((rep % 2)) = 1 ]; then
      run_fio "$depth" "$rep" "$job"; run_bench "$depth" "$rep" "$job"
    else
      run_bench "$depth" "$rep" "$job"; run_fio "$depth" "$rep" "$job"
    fi
  done
done

echo "== summary (ratios are bench / fio within each interleaved pair)"
python3 - "$RESULTS/pairs.tsv" <<'EOF' | tee "$RESULTS/summary.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def mmm(values, fmt):
    values = sorted(values)
    return " / ".join(format(v, fmt) for v in (values[0], statistics.median(values), values[-1]))
print("| QD | fio IOPS | bench IOPS | IOPS ratio | fio p50 µs | bench p50 µs | p50 ratio | fio p99 µs | bench p99 µs |")
print("|---:|---|---|---|---|---|---|---|---|")
verdicts = []
for depth in sorted({int(r["depth"]) for r in rows}):
    pick = lambda tool: {r["rep"]: r for r in rows if r["tool"] == tool and int(r["depth"]) == depth}
    fio, bench = pick("fio"), pick("bench")
    reps = sorted(set(fio) & set(bench))
    col = lambda d, k: [float(d[r][k]) for r in reps]
    ratio = lambda k: [float(bench[r][k]) / float(fio[r][k]) for r in reps]
    print(f"| {depth} | {mmm(col(fio,'iops'),'.0f')} | {mmm(col(bench,'iops'),'.0f')} | {mmm(ratio('iops'),'.3f')} "
          f"| {mmm(col(fio,'p50_us'),'.1f')} | {mmm(col(bench,'p50_us'),'.1f')} | {mmm(ratio('p50_us'),'.3f')} "
          f"| {mmm(col(fio,'p99_us'),'.0f')} | {mmm(col(bench,'p99_us'),'.0f')} |")
    iops, p50 = statistics.median(ratio("iops")), statistics.median(ratio("p50_us"))
    verdicts.append(f"QD {depth}: IOPS ratio {iops:.3f} ({'met' if abs(iops - 1) <= 0.10 else 'NOT met'}: within 10%), "
                    f"p50 ratio {p50:.3f} ({'met' if abs(p50 - 1) <= 0.15 else 'NOT met'}: within 15%)")
print(f"\n(min / median / max over {len(reps)} interleaved pairs)\n")
print("\n".join(verdicts))
EOF
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$RESULTS/machine.txt"
echo "results in $RESULTS"
