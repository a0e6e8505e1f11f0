#!/usr/bin/env python3
"""Round-by-round verdicts of a `tailguard frontier --json` result.

The frontier's table compares medians: each point's median over the rounds
against the static points' medians. A disk that drifts during a run (one
static point wrote 1604-2370 MB/s within one run) moves every point of a
round together, and medians taken point by point do not cancel that drift.
This script pairs within each round instead: for every tailguard point and
every round, it draws that round's static Pareto frontier (the static points
of the same round), reads the line at the tailguard point's write rate of
that round, and takes the difference in the readers' worst 0.5 s rate over
that round's solo rate; likewise against the best static point of the round
within +-10% of its write rate. It prints the median [min-max] of those
differences and in how many rounds tailguard was at or above.

Usage: benchmarks/frontier-paired.py FRONTIER.json
(`tailguard frontier DIR --json FILE ...`; the file must not exist before.)
"""
import json
import statistics
import sys

MATCH_TOLERANCE = 0.10


def rate(sample):
    disk = sample.get("disk_write_mb_per_s")
    return disk if disk is not None else sample["writer_mb_per_s"]


def worst(sample, solo):
    value = sample.get("read_worst_500ms_iops")
    return (value if value is not None else sample["read_iops"]) / solo


def line_at(write, statics):
    """The static Pareto frontier's line at `write` (None outside it)."""
    frontier = [
        (w, y) for (w, y) in statics
        if not any(w2 >= w and y2 >= y and (w2, y2) != (w, y) for (w2, y2) in statics)
    ]
    frontier.sort()
    for (low_w, low_y), (high_w, high_y) in zip(frontier, frontier[1:]):
        if low_w <= write <= high_w:
            if high_w == low_w:
                return max(low_y, high_y)
            return low_y + (write - low_w) / (high_w - low_w) * (high_y - low_y)
    return None


def summary(values):
    if not values:
        return "none"
    at_or_above = sum(value >= 0 for value in values)
    return (f"{statistics.median(values):+.3f} [{min(values):+.3f} {max(values):+.3f}], "
            f"at or above in {at_or_above} of {len(values)} rounds")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as file:
        result = json.load(file)
    points = result["points"]
    rounds = sorted({sample["round"] for point in points for sample in point["samples"]})
    by_round = {
        point["name"]: {sample["round"]: sample for sample in point["samples"]} for point in points
    }
    solo = next(point["name"] for point in points if point["kind"] == "solo")
    statics = [point["name"] for point in points if point["kind"] == "static"]
    print(f"{sys.argv[1]}: {len(rounds)} rounds; differences in worst 0.5 s / solo")
    for point in (point for point in points if point["kind"] == "tailguard"):
        to_line, to_match = [], []
        for round_ in rounds:
            ours = by_round[point["name"]].get(round_)
            solo_sample = by_round[solo].get(round_)
            if ours is None or solo_sample is None:
                continue
            solo_rate = solo_sample["read_iops"]
            positions = [
                (rate(by_round[name][round_]), worst(by_round[name][round_], solo_rate))
                for name in statics if round_ in by_round[name]
            ]
            write, reads = rate(ours), worst(ours, solo_rate)
            line = line_at(write, positions)
            if line is not None:
                to_line.append(reads - line)
            matched = [y for (w, y) in positions if abs(w - write) <= MATCH_TOLERANCE * write]
            if matched:
                to_match.append(reads - max(matched))
        print(f"  {point['name']}:")
        print(f"    against the round's static line at its rate: {summary(to_line)}")
        print(f"    against the round's best static point within +-10%: {summary(to_match)}")


main()
