#!/usr/bin/env bash
# tailguard engine benchmarks: NOP overhead, then 4 KiB O_DIRECT random reads vs fio.
#
#   benchmarks/engine-vs-fio.sh            # everything, ~4 minutes
#   DEPTHS="1 16" REPS=5 DRIVERS=block-on benchmarks/engine-vs-fio.sh
#   DRIVERS="block-on raw-plain raw-defer" benchmarks/engine-vs-fio.sh   # + the bare ring
#   DRIVERS="block-on block-on/per-turn raw-plain/batch" ...   # submission variants
#
# Builds the `engine` bench binary once (release), runs `engine nop`, then creates a
# real (non-sparse) test file, and for each queue depth runs REPS interleaved rounds
# of fio (io_uring, O_DIRECT) and `engine randread` with each of DRIVERS (the order
# rotates from round to round), and prints per-depth min/median/max of IOPS, p50,
# and the tailguard/fio ratios computed within each round. A driver named
# raw-plain, raw-coop or raw-defer runs `engine randread-raw` instead (the
# io-uring crate alone with those ring flags: the floor of any library). The test file is
# deleted on exit, failure included. ENGINE_BIN and FIO name prebuilt binaries
# (benchmarks/lib.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benchmarks/lib.sh"
need_fio
need jq "install it with: apt-get install -y jq"
need python3 "install it with: apt-get install -y python3"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BENCH_DIR=${BENCH_DIR:-$CARGO_TARGET_DIR/bench}
SIZE_MB=${SIZE_MB:-1024}
SECS=${SECS:-5}
REPS=${REPS:-3}
DEPTHS=${DEPTHS:-"1 16 64"}
DRIVERS=${DRIVERS:-"block-on engine-thread"}
NOP_SECS=${NOP_SECS:-1}
RESULTS=${RESULTS:-$CARGO_TARGET_DIR/bench-results/$(date +%Y%m%d-%H%M%S)}
FILE="$BENCH_DIR/randread-$$.dat"

mkdir -p "$BENCH_DIR" "$RESULTS"
cleanup() { rm -f "$FILE"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== machine"
describe_machine "$BENCH_DIR" | tee "$RESULTS/machine.txt"

echo "== build (release, once)"
BIN=$(engine_binary "$ROOT")
[ -x "$BIN" ] || { echo "could not build the engine bench" >&2; exit 1; }
echo "binary: $BIN"

echo "== 1. engine overhead: raw io_uring NOPs vs Scheduler::nop (interleaved)"
"$BIN" nop --secs "$NOP_SECS" --reps "$REPS" --depth 256 | tee "$RESULTS/nop.txt"

echo "== 2. 4 KiB random reads vs fio"
echo "creating ${SIZE_MB} MiB test file $FILE (real data, O_DIRECT writes)"
"$FIO" --name=fill --filename="$FILE" --rw=write --bs=1M --size="${SIZE_MB}M" --direct=1 \
  --ioengine=psync --output=/dev/null
sync

run_fio() { # depth rep
  "$FIO" --name=randread --filename="$FILE" --ioengine=io_uring --direct=1 --rw=randread \
    --bs=4k --iodepth="$1" --runtime="$SECS" --time_based --numjobs=1 --lat_percentiles=1 \
    --output-format=json >"$RESULTS/fio-qd$1-rep$2.json"
  jq -r --arg d "$1" --arg r "$2" '.jobs as $jobs | .jobs[0].read |
    "fio\t\($d)\t\($r)\t\(.iops)\t\(.lat_ns.percentile["50.000000"] / 1000)\t\(.lat_ns.percentile["99.000000"] / 1000)\t\(.clat_ns.percentile["50.000000"] / 1000)\t\(($jobs[0].usr_cpu + $jobs[0].sys_cpu) / 100)"' \
    "$RESULTS/fio-qd$1-rep$2.json" | tee -a "$RESULTS/randread.tsv"
}

run_tailguard() { # depth rep driver
  # A name is DRIVER[/SUBMIT]: raw-RING is the io-uring crate alone with those
  # ring flags (SUBMIT each or batch); otherwise an engine driver (SUBMIT each
  # or per-turn).
  # raw-RING/SUBMIT/SPIN adds SPIN ns of busy work per completion.
  local driver=${3%%/*} submit=each spin=0
  [[ $3 == */* ]] && submit=${3#*/} && submit=${submit%%/*}
  [[ $3 == */*/* ]] && spin=${3##*/}
  if [[ $driver == raw-* ]]; then
    line=$("$BIN" randread-raw --file "$FILE" --depth "$1" --secs "$SECS" --ring "${driver#raw-}" \
      --submit "$submit" --spin-ns "$spin" | grep '^RESULT')
  else
    line=$("$BIN" randread --file "$FILE" --depth "$1" --secs "$SECS" --driver "$driver" \
      --submit "$submit" | grep '^RESULT')
  fi
  echo "$line" >>"$RESULTS/tailguard-raw.txt"
  val() { echo "$line" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
  printf 'tailguard-%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$3" "$1" "$2" "$(val iops)" "$(val p50_us)" "$(val p99_us)" \
    "$(val engine_p50_us)" "$(val cpu)" | tee -a "$RESULTS/randread.tsv"
  [ "$(val errors)" = 0 ] || { echo "tailguard reported read errors: $line" >&2; exit 1; }
}

printf 'tool\tdepth\trep\tiops\tp50_us\tp99_us\tp50b_us\tcpu\n' | tee "$RESULTS/randread.tsv"
echo "(fio p50b = clat p50; tailguard p50b = engine latency_ns p50; cpu = CPU-seconds per second: fio job usr+sys, tailguard whole process)"
run_one() { # tool depth rep
  if [ "$1" = fio ]; then run_fio "$2" "$3"; else run_tailguard "$2" "$3" "$1"; fi
}

read -r -a tools <<<"fio $DRIVERS"
for depth in $DEPTHS; do
  for rep in $(seq 1 "$REPS"); do
    # Rotate the order: round r starts with tool r mod n.
    n=${#tools[@]}
    for i in $(seq 0 $((n - 1))); do
      run_one "${tools[$(((rep + i) % n))]}" "$depth" "$rep"
    done
  done
done

echo "== summary (ratios are tailguard / fio within the same interleaved round)"
python3 - "$RESULTS/randread.tsv" <<'EOF' | tee "$RESULTS/summary.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def mmm(values, fmt):
    values = sorted(values)
    return " / ".join(format(v, fmt) for v in (values[0], statistics.median(values), values[-1]))
tools = sorted({r["tool"] for r in rows if r["tool"] != "fio"})
print("| QD | driver | fio IOPS | tailguard IOPS | IOPS ratio | fio p50 µs | tailguard p50 µs | p50 ratio "
      "| fio p99 µs | tailguard p99 µs | engine latency_ns p50 µs | fio CPU | tailguard CPU |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for depth in sorted({int(r["depth"]) for r in rows}):
    for tool in tools:
        pick = lambda name: {r["rep"]: r for r in rows if r["tool"] == name and int(r["depth"]) == depth}
        fio, tg = pick("fio"), pick(tool)
        reps = sorted(set(fio) & set(tg))
        col = lambda d, k: [float(d[r][k]) for r in reps]
        ratio = lambda k: [float(tg[r][k]) / float(fio[r][k]) for r in reps]
        print(f"| {depth} | {tool.removeprefix('tailguard-')} | {mmm(col(fio,'iops'),'.0f')} | {mmm(col(tg,'iops'),'.0f')} "
              f"| {mmm(ratio('iops'),'.3f')} "
              f"| {mmm(col(fio,'p50_us'),'.1f')} | {mmm(col(tg,'p50_us'),'.1f')} | {mmm(ratio('p50_us'),'.3f')} "
              f"| {mmm(col(fio,'p99_us'),'.0f')} | {mmm(col(tg,'p99_us'),'.0f')} | {mmm(col(tg,'p50b_us'),'.1f')} "
              f"| {mmm(col(fio,'cpu'),'.2f')} | {mmm(col(tg,'cpu'),'.2f')} |")
print(f"\n(min / median / max over {len(reps)} interleaved rounds; ratios are tailguard / fio within "
      "each round; p50/p99 are submission to completion: fio lat_ns, tailguard measured by its driver; "
      "CPU is CPU-seconds per second: fio's job usr+sys, tailguard's whole process)")
EOF
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$RESULTS/machine.txt"
echo "results in $RESULTS"
