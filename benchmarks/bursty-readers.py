#!/usr/bin/env python3
"""Readers that come and go beside a writer that never stops: tailguard's
default against static O_DIRECT writer settings, interleaved.

16 closed-loop readers of 4 KiB at depth 1 run for ON seconds, then pause for
OFF seconds, PERIODS times; a sequential writer runs throughout (every writer
cycles through 8 MiB of buffers, as in `tailguard frontier`). Each round runs
every point once, the order rotated each round. Per point it prints the
readers' rate while they run (reads over the ON time) over the solo run's,
their p99 and p99.99, and the writer's MB/s over the whole run, as medians
[min-max] over the rounds.

A static writer's depth is the same whether the readers run or pause, so it
must be chosen for when they run; tailguard's default lets writes stream
while no one reads (the quiet-reads rule, crates/tailguard-core/src/quiet_reads.rs).

The product way to measure this is `tailguard frontier DIR --readers-run 1s
--readers-pause 1s` (docs/reference/cli.md): the same readers that pause
beside the full grid of static settings and tailguard's points, with the
readers' worst 0.5 s rate counted only over windows inside their running
spans (the bench report leaves the pauses out), the disk's own write rate,
a verdict per tailguard point, JSON and a chart. This script stays as a
small, fixed set of points with p99 and `--quiet-reads off` beside them.

Usage: benchmarks/bursty-readers.py DIR [TAILGUARD_BINARY] [ROUNDS] [PERIODS]
(default binary target/release/tailguard, 5 rounds, 3 periods; ON and OFF
from the environment, default 1 s each). DIR must be on the disk to measure;
the bench lays its files out there and removes them.
"""
import json
import os
import statistics
import subprocess
import sys

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = sys.argv[1] if len(sys.argv) > 1 else sys.exit(__doc__)
BINARY = sys.argv[2] if len(sys.argv) > 2 else os.path.join(REPOSITORY, "target/release/tailguard")
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
PERIODS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
ON_S = float(os.environ.get("ON", "1"))
OFF_S = float(os.environ.get("OFF", "1"))
# (name, bench mode, writer request size, writer queue depth, bench flags);
# depth 0: no writer.
POINTS = [
    ("solo", "kernel-direct", "4k", 0, []),
    ("direct QD1 128k", "kernel-direct", "128k", 1, []),
    ("direct QD1 256k", "kernel-direct", "256k", 1, []),
    ("direct QD2 256k", "kernel-direct", "256k", 2, []),
    ("direct QD1 1m", "kernel-direct", "1m", 1, []),
    ("tailguard (default)", "tailguard", "1m", 4, []),
    ("tailguard, --quiet-reads off", "tailguard", "1m", 4, ["--quiet-reads", "off"]),
]


def job_text(request_size, queue_depth):
    text = f'duration_s = {PERIODS * (ON_S + OFF_S)}\nseed = 1\n'
    text += '[[class]]\nname = "reads"\nshares = 400\n'
    for period in range(PERIODS):
        start_s = period * (ON_S + OFF_S)
        text += (f'[[job]]\nname = "readers{period}"\nclass = "reads"\npattern = "randread"\n'
                 f'block_size = "4k"\nqueue_depth = 1\nnumjobs = 16\nsize = "512m"\n'
                 f'start_s = {start_s}\nstop_s = {start_s + ON_S}\n')
    if queue_depth:
        text += ('[[class]]\nname = "writes"\nshares = 100\n'
                 '[[job]]\nname = "writer"\nclass = "writes"\npattern = "seqwrite"\n'
                 f'block_size = "{request_size}"\nqueue_depth = {queue_depth}\nsize = "512m"\n'
                 'write_buffers = "8m"\n')
    return text


def run(point, job_path):
    name, mode, request_size, queue_depth, flags = point
    with open(job_path, "w") as job:
        job.write(job_text(request_size, queue_depth))
    out = subprocess.run([BINARY, "bench", job_path, "--target", TARGET, "--mode", mode, "--json"] + flags,
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{name}: {out.stderr[-2000:]}")
    classes = {c["name"]: c for c in json.loads(out.stdout)[0]["classes"]}
    reads = classes["reads"]
    on_fraction = ON_S / (ON_S + OFF_S)
    return {
        "reads_per_on_s": reads["iops"] / on_fraction,
        "p99_us": reads["latency_us"]["p99"],
        "p9999_us": reads["latency_us"]["p9999"],
        "write_mb_per_s": classes["writes"]["mb_per_s"] if "writes" in classes else 0.0,
    }


def cell(values, digits=0):
    return (f"{statistics.median(values):.{digits}f} "
            f"[{min(values):.{digits}f}-{max(values):.{digits}f}]")


def main():
    job_path = os.path.join(TARGET, "bursty-readers-job.toml")
    results = {point[0]: [] for point in POINTS}
    for round_index in range(ROUNDS):
        shift = round_index % len(POINTS)
        for point in POINTS[shift:] + POINTS[:shift]:
            sample = run(point, job_path)
            results[point[0]].append((round_index, sample))
            print(f"round {round_index + 1}: {point[0]}: {sample}", file=sys.stderr, flush=True)
    os.remove(job_path)
    solo = {round_index: sample["reads_per_on_s"] for round_index, sample in results["solo"]}
    print(f"{PERIODS} x ({ON_S:g} s readers, {OFF_S:g} s pause), {ROUNDS} interleaved rounds, "
          "medians [min-max]")
    print("| point | writer MB/s | reads while running / solo | read p99 µs | read p99.99 µs |")
    print("|---|---|---|---|---|")
    for name, *_ in POINTS:
        samples = results[name]
        ratio = [sample["reads_per_on_s"] / solo[round_index] for round_index, sample in samples]
        print(f"| {name} | {cell([s['write_mb_per_s'] for _, s in samples])} | {cell(ratio, 2)} | "
              f"{cell([s['p99_us'] for _, s in samples])} | "
              f"{cell([s['p9999_us'] for _, s in samples])} |")


main()
