#!/usr/bin/env bash
# The budget policies side by side on a real disk, under the demo workload.
#
# Runs benchmarks/demo-scenario.toml (4 readers of 4 KiB at queue depth 4 in
# one class, 1 MiB sequential writes at depth 4 in another, equal shares),
# shortened to SECONDS with a 6 GiB write file, through `tailguard bench
# --mode tailguard` once per variant per round, variants interleaved within a
# round (A B C A B C ...), so a disk that drifts drifts on all alike. Each run's
# controller decisions are logged (RUST_LOG=tailguard::controller=info). It
# prints each run (read IOPS, read p99 as bench measures it and as the
# scheduler does, p99.99, max, write MB/s, budget changes), then the median
# per variant.
#
# Usage: benchmarks/controller-vs-fixed.sh [DIRECTORY] [ROUNDS] [VARIANT...]
#   DIRECTORY  where the data files are laid out (default target/controller-vs-fixed,
#              on the disk under the repository), in a new subdirectory that
#              is removed at the end (the directory itself is left alone)
#   ROUNDS     rounds (default 3)
#   VARIANT    NAME=CONTROLLER or NAME=BINARY:CONTROLLER, CONTROLLER being
#              fixed or adaptive (default: "fixed=fixed adaptive=adaptive");
#              a BINARY compares builds (an older tailguard against this one)
# Environment: SECONDS_PER_RUN (default 10), RESULTS (default
#              target/controller-vs-fixed-results-DATE: a JSON and a log per
#              run; the summary reads only this run's files).
set -euo pipefail

repository=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=benchmarks/lib.sh
source "$repository/benchmarks/lib.sh"
directory=${1:-$repository/target/controller-vs-fixed}
rounds=${2:-3}
shift $(($# < 2 ? $# : 2))
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(fixed=fixed adaptive=adaptive)
seconds=${SECONDS_PER_RUN:-10}
results=${RESULTS:-$repository/target/controller-vs-fixed-results-$(date +%Y%m%d-%H%M%S)}
need python3 "install it with: apt-get install -y python3"
tailguard=$(tailguard_binary "$repository")

mkdir -p "$directory" "$results"
# Only this subdirectory is ours to remove: DIRECTORY may be a user's mount.
work=$(mktemp -d "$directory/controller-vs-fixed.XXXXXX")
trap 'rm -rf "$work"' EXIT
describe_machine "$directory" | tee "$results/machine.txt"
sed -e "s/^duration_s = .*/duration_s = $seconds/" -e 's/size = "16g"/size = "6g"/' \
  "$repository/benchmarks/demo-scenario.toml" >"$results/scenario.toml"

for round in $(seq 1 "$rounds"); do
  for variant in "${variants[@]}"; do
    name=${variant%%=*}
    spec=${variant#*=}
    binary=$tailguard
    controller=$spec
    if [[ $spec == *:* ]]; then
      binary=${spec%:*}
      controller=${spec##*:}
    fi
    echo "round $round: $name ($binary --controller $controller)" >&2
    RUST_LOG=tailguard::controller=info "$binary" bench "$results/scenario.toml" \
      --target "$work" --mode tailguard --controller "$controller" --json \
      >"$results/$name-$round.json" 2>"$results/$name-$round.log"
  done
done

python3 - "$results" <<'PY'
import collections, glob, json, os, statistics, sys
results = sys.argv[1]
by_variant = collections.defaultdict(list)
print("| run | read IOPS | read p99 (bench) | read p99 (scheduler) | p99.99 | max | write MB/s | budget changes |")
print("|---|---|---|---|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(results, "*-*.json")), key=lambda p: (p.rsplit("-", 1)[1], p)):
    run = os.path.basename(path)[:-5]
    reads, writes = json.load(open(path))[0]["classes"]
    changes = sum("budget changed" in line for line in open(path[:-5] + ".log"))
    row = (reads["iops"], reads["latency_us"]["p99"], reads["scheduler"]["latency_us"]["p99"],
           reads["latency_us"]["p9999"], reads["latency_us"]["max"], writes["mb_per_s"], changes)
    by_variant[run.rsplit("-", 1)[0]].append(row)
    print(f"| {run} | {row[0]:.0f} | {row[1]:.0f} µs | {row[2]:.0f} µs | {row[3]:.0f} µs | {row[4]:.0f} µs | {row[5]:.0f} | {row[6]} |")
print()
print("| variant | runs | read p99 (bench) median [min-max] | read p99 (scheduler) median [min-max] | write MB/s median [min-max] | budget changes median |")
print("|---|---|---|---|---|---|")
for name, rows in by_variant.items():
    def spread(i):
        values = [row[i] for row in rows]
        return f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]"
    print(f"| {name} | {len(rows)} | {spread(1)} µs | {spread(2)} µs | {spread(5)} | {statistics.median(r[6] for r in rows):.0f} |")
PY
