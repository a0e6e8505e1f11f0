#!/usr/bin/env python3
"""Saturating classes on the simulator's disk: their parts and their longest waits.

Each case runs two or three saturating classes (2 x 32 outstanding each,
regions 16 GiB apart) on the `hdd` model under the default tailguard policy
and prints, per class, its part of the bytes moved, the longest time one of
its requests waited in the queue and its p99 latency. With slices that go in
turns by shares, a class's wait is bounded by a few rounds of one slice per
class, whatever the ratio of the shares; with turns of one slice of each
class's own device time it grew with the ratio.

Usage: benchmarks/hdd-slice-turns.py [TAILGUARD_BINARY] [SECONDS] [SEED]
(default: target/release/tailguard, 20 simulated seconds, seed 1).
"""
import importlib.util
import os
import sys

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPOSITORY, "target/release/tailguard")
SECONDS = sys.argv[2] if len(sys.argv) > 2 else "20"
SEED = sys.argv[3] if len(sys.argv) > 3 else "1"

# The saturating job (2 x 32 outstanding) is the saturation script's.
_SPEC = importlib.util.spec_from_file_location(
    "sim_saturation", os.path.join(REPOSITORY, "benchmarks/sim-saturation.py"))
_SATURATION = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_SATURATION)


def job(name, shares, pattern, index):
    return _SATURATION.job(name, shares, pattern, f"{16 * index}g")


CASES = [
    ("two sequential writers 100:300", [(100, "seqwrite"), (300, "seqwrite")]),
    ("two sequential writers 100:1000", [(100, "seqwrite"), (1000, "seqwrite")]),
    ("two random readers 100:300", [(100, "randread"), (300, "randread")]),
    ("three sequential writers 100:200:400", [(100, "seqwrite"), (200, "seqwrite"), (400, "seqwrite")]),
    ("three random readers 100:200:400", [(100, "randread"), (200, "randread"), (400, "randread")]),
]


def simulate(classes):
    text = f'duration_s = {SECONDS}\nseed = {SEED}\npolicies = ["tailguard"]\n'
    text += '[[device]]\nname = "d"\nmodel = "hdd"\n'
    text += "".join(job(chr(ord("a") + index), shares, pattern, index)
                    for index, (shares, pattern) in enumerate(classes))
    return _SATURATION.run_scenario(text, BINARY)["classes"]


def main():
    for name, classes in CASES:
        results = simulate(classes)
        total = sum(result["mb_per_s"] for result in results)
        cells = [f"{result['name']} part {result['mb_per_s'] / total:.2f}"
                 f" wait max {result['queue_wait_us_max'] / 1e6:.2f} s"
                 f" p99 {result['latency_us']['p99'] / 1e6:.2f} s" for result in results]
        print(f"{name:38} " + " | ".join(cells))


if __name__ == "__main__":
    main()
