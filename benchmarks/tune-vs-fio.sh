#!/usr/bin/env bash
# tailguard tune against fio, on the same file, interleaved (tune, fio, tune, fio).
#
# For each pattern in turn (4 KiB randread, randwrite, sequential read, write),
# each round runs `tailguard tune FILE --allow-write --curves PATTERN`, reads
# the knee (request size and depth) and steady rate from the profile it wrote,
# then runs fio (ioengine=io_uring, direct=1) right after on the same file with
# the same pattern at that depth. Pattern by pattern, tune and fio alternate
# within seconds, so a shared or throttled disk drifts on both alike.
# It prints tune's steady rate, fio's rate and their ratio per round, then
# min/median/max of the ratios per pattern. The goal is within 15%.
#
# Usage: benchmarks/tune-vs-fio.sh [DIRECTORY] [ROUNDS]
#   DIRECTORY  where the test file is laid out (default target/tune-vs-fio,
#              on the disk under the repository), in a new subdirectory that
#              is removed at the end (the directory itself and what else it
#              holds are left alone)
#   ROUNDS     tune/fio pairs per pattern (default 3)
# Environment: SIZE (test file, default 1g), TUNE_DURATION (per pattern, default 15s),
#              FIO_RAMP (seconds fio runs before it measures, default 3),
#              FIO_SECONDS (seconds fio measures, default 3),
#              PATTERNS (default: all four, "random_read random_write sequential_read sequential_write").
#
# Like for like: tune's profile rate is the steady (second) half of its
# sustained run at the knee; the profile's notes name that window per curve
# ("... (fio: iodepth=N bs=B ramp_time=Rs runtime=Ss)"), and fio runs with that
# ramp_time and runtime, so both measure the same seconds of load. FIO_RAMP and
# FIO_SECONDS are used only if a profile has no such note.
set -euo pipefail

repository=$(cd "$(dirname "$0")/.." && pwd)
directory=${1:-$repository/target/tune-vs-fio}
rounds=${2:-3}
size=${SIZE:-1g}
tune_duration=${TUNE_DURATION:-15s}
fio_seconds=${FIO_SECONDS:-3}
fio_ramp=${FIO_RAMP:-3}
patterns=${PATTERNS:-random_read random_write sequential_read sequential_write}

. "$repository/benchmarks/lib.sh"
need_fio
need python3 "install it with: apt-get install -y python3"
tailguard=$(tailguard_binary "$repository")

mkdir -p "$directory"
# Only this subdirectory is ours to remove: DIRECTORY may be a user's mount.
work=$(mktemp -d "$directory/tune-vs-fio.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
echo "== machine" >&2
describe_machine "$directory" >&2
file=$work/data
results=$work/results.tsv

echo "laying out $file ($size) with fio" >&2
"$FIO" --name=layout --filename="$file" --size="$size" --rw=write --bs=1M --direct=1 \
    --ioengine=io_uring --iodepth=8 --output-format=terse >/dev/null

: >"$results"
fio_rw() {
    case $1 in
        random_read) echo randread ;; random_write) echo randwrite ;;
        sequential_read) echo read ;; sequential_write) echo write ;;
    esac
}
for round in $(seq 1 "$rounds"); do
    for name in $patterns; do
        profile=$work/profile-$round-$name.toml
        echo "round $round: tailguard tune --curves $name --duration $tune_duration" >&2
        "$tailguard" tune "$file" --allow-write --curves "$name" --duration "$tune_duration" \
            --output "$profile" >"$work/tune-$round-$name.txt"
        # request bytes, depth, tune's steady rate, its unit, fio's ramp and runtime
        read -r request_bytes depth tune_rate unit ramp runtime < <(python3 - "$profile" "$name" \
            "$fio_ramp" "$fio_seconds" <<'EOF'
import re, sys, tomllib
profile = tomllib.load(open(sys.argv[1], "rb"))
name = sys.argv[2]
(device,) = profile["device"].values()
key = {"random_read": "read_iops", "random_write": "write_iops",
       "sequential_read": "read_bandwidth", "sequential_write": "write_bandwidth"}[name]
knee = device["knee"][name]
unit = "iops" if name.startswith("random") else "bytes/s"
ramp, runtime = sys.argv[3], sys.argv[4]
for note in profile.get("metadata", {}).get("notes", []):
    window = re.search(r"ramp_time=([\d.]+)s runtime=([\d.]+)s", note)
    if note.startswith(name + ":") and window:
        ramp, runtime = window.groups()
print(knee["request_bytes"], knee["queue_depth"], device[key], unit, ramp, runtime)
EOF
        )
        rw=$(fio_rw "$name")
        echo "round $round: fio $rw bs=$request_bytes iodepth=$depth ramp_time=${ramp}s runtime=${runtime}s" >&2
        fio_json=$("$FIO" --name="$name" --filename="$file" --rw="$rw" --bs="$request_bytes" \
            --iodepth="$depth" --direct=1 --ioengine=io_uring --time_based \
            --ramp_time="$ramp" --runtime="$runtime" --size="$size" --randrepeat=0 --output-format=json)
        fio_rate=$(python3 -c '
import json, sys
job = json.loads(sys.stdin.read())["jobs"][0]
side = job["write"] if job["write"]["io_bytes"] > 0 else job["read"]
print(side["iops"] if sys.argv[1] == "iops" else side["bw_bytes"])' "$unit" <<<"$fio_json")
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$request_bytes" "$depth" \
            "$unit" "$tune_rate" "$fio_rate" >>"$results"
    done
done

python3 - "$results" <<'EOF'
import statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
def show(rate, unit):
    return f"{rate:,.0f} IOPS" if unit == "iops" else f"{rate / 1e6:,.0f} MB/s"
print("| round | pattern | request | depth | tune (steady) | fio | tune / fio |")
print("|---|---|---|---|---|---|---|")
ratios = {}
for round_, name, request, depth, unit, tune, fio in rows:
    ratio = float(tune) / float(fio)
    ratios.setdefault(name, []).append(ratio)
    print(f"| {round_} | {name} | {int(request) // 1024} KiB | {depth} | "
          f"{show(float(tune), unit)} | {show(float(fio), unit)} | {ratio:.2f} |")
print()
print("| pattern | tune / fio min | median | max | within 15% |")
print("|---|---|---|---|---|")
for name, values in ratios.items():
    within = all(abs(value - 1) <= 0.15 for value in values)
    print(f"| {name} | {min(values):.2f} | {statistics.median(values):.2f} | "
          f"{max(values):.2f} | {'yes' if within else 'no'} |")
EOF
