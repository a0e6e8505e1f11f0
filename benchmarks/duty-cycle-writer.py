#!/usr/bin/env python3
"""Does a writer that alternates full speed and silence beat every static
O_DIRECT setting? A check of the static curve's shape, kernel O_DIRECT only.

If the readers' worst 0.5 s rate fell with the write rate along a convex
curve, a writer that ran at its heaviest setting for a fraction of each short
period and was silent the rest would land on the chord between "readers
alone" and that setting, above every static point in between, and a
scheduler could win by duty-cycling writes. This script measures the chord
against the static points on the same disk, interleaved.

16 closed-loop readers of 4 KiB at depth 1 (as in `tailguard frontier`) run
beside one of: no writer (solo); a sequential writer at a static request size
and depth for the whole run; or the same writer duty-cycled, running ON
milliseconds of every ON+OFF (one bench job per burst, `start_s`/`stop_s`).
Every writer cycles through 8 MiB of buffers. Each round runs every point
once, the order rotated and reversed on odd rounds. Per point it prints the
readers' worst 0.5 s rate and mean rate over the round's solo mean, the
writer's MB/s (its own bytes over the run: O_DIRECT, so what the disk got),
and p99.99, as medians [min-max] over rounds.

Usage: benchmarks/duty-cycle-writer.py DIR [TAILGUARD_BINARY] [ROUNDS]
(default binary target/release/tailguard, 5 rounds, 3 s runs). DIR must be
on the disk to measure; the bench lays its files out there and removes them.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = sys.argv[1] if len(sys.argv) > 1 else sys.exit(__doc__)
BINARY = sys.argv[2] if len(sys.argv) > 2 else os.path.join(REPOSITORY, "target/release/tailguard")
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
DURATION_S = 3.0

# (name, block size, depth, on ms, off ms); off 0 is a static writer, None no writer.
POINTS = [
    ("solo", None, 0, 0, 0),
    ("static 256k QD1", "256k", 1, 0, 0),
    ("static 256k QD2", "256k", 2, 0, 0),
    ("static 1m QD1", "1m", 1, 0, 0),
    ("1m QD1 100/100 ms", "1m", 1, 100, 100),
    ("1m QD1 50/50 ms", "1m", 1, 50, 50),
    ("1m QD1 20/20 ms", "1m", 1, 20, 20),
    ("1m QD2 50/50 ms", "1m", 2, 50, 50),
]

READERS = """duration_s = {duration}
seed = 1

[[class]]
name = "reads"
shares = 400

[[class]]
name = "writes"
shares = 100

[[job]]
name = "readers"
class = "reads"
pattern = "randread"
block_size = "4k"
queue_depth = 1
numjobs = 16
size = "512m"
"""

WRITER = """
[[job]]
name = "{name}"
class = "writes"
pattern = "seqwrite"
block_size = "{block}"
queue_depth = {depth}
size = "{size}"
write_buffers = "8m"
start_s = {start:.4f}
stop_s = {stop:.4f}
"""


def job_file(block, depth, on_ms, off_ms):
    """The bench job file of one point."""
    text = READERS.format(duration=DURATION_S)
    if block is None:
        return text
    if off_ms == 0:
        return text + WRITER.format(name="writer", block=block, depth=depth, size="2g",
                                    start=0.0, stop=DURATION_S)
    period_s = (on_ms + off_ms) / 1000
    bursts = int(DURATION_S / period_s + 0.999)
    for burst in range(bursts):
        start = burst * period_s
        stop = min(start + on_ms / 1000, DURATION_S)
        text += WRITER.format(name=f"burst{burst}", block=block, depth=depth, size="128m",
                              start=start, stop=stop)
    return text


def run(path):
    """One kernel O_DIRECT bench run: (worst 0.5 s reads/s, reads/s, write MB/s, p99.99 µs)."""
    output = subprocess.run([BINARY, "bench", path, "--target", TARGET, "--mode",
                             "kernel-direct", "--json"], capture_output=True, text=True, check=True)
    classes = {entry["name"]: entry for entry in json.loads(output.stdout)[0]["classes"]}
    reads = classes["reads"]
    writes_mb_per_s = classes["writes"]["mb_per_s"] if "writes" in classes else 0.0
    return (reads["worst_500ms_iops"], reads["iops"], writes_mb_per_s,
            reads["latency_us"]["p9999"])


def spread(values, digits):
    values = sorted(values)
    return f"{statistics.median(values):.{digits}f} [{values[0]:.{digits}f}-{values[-1]:.{digits}f}]"


def main():
    directory = tempfile.mkdtemp(prefix="duty-cycle-")
    paths = {}
    for name, block, depth, on_ms, off_ms in POINTS:
        paths[name] = os.path.join(directory, f"{len(paths)}.toml")
        with open(paths[name], "w") as file:
            file.write(job_file(block, depth, on_ms, off_ms))
    results = {name: [] for name in paths}
    names = list(paths)
    for round_number in range(ROUNDS):
        shift = round_number % len(names)
        order = names[shift:] + names[:shift]
        if round_number % 2:
            order.reverse()
        solo = None
        measured = {}
        for name in order:
            measured[name] = run(paths[name])
            print(round_number, name, measured[name], file=sys.stderr, flush=True)
        solo = measured["solo"][1]
        for name, (worst, mean, mb_per_s, p9999) in measured.items():
            results[name].append((worst / solo, mean / solo, mb_per_s, p9999))
    print(f"{'point':20s} {'worst 0.5 s / solo':22s} {'mean / solo':22s} {'write MB/s':18s} p99.99 µs")
    for name in names:
        rows = results[name]
        print(f"{name:20s} {spread([r[0] for r in rows], 3):22s} {spread([r[1] for r in rows], 3):22s} "
              f"{spread([r[2] for r in rows], 0):18s} {spread([r[3] for r in rows], 0)}")
    for path in paths.values():
        os.remove(path)
    os.rmdir(directory)


if __name__ == "__main__":
    main()
