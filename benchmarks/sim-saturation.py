#!/usr/bin/env python3
"""Saturating classes in the simulator, tailguard against no scheduler (fifo).

For every device model: one class alone (4 KiB random and 128 KiB sequential,
reads and writes, 2 x 32 outstanding), then two saturating classes with shares
100 and 300 (several mixes), then three with shares 100, 200 and 400. Each scenario runs under fifo and the default
tailguard policy on the same seed. Prints, per case, tailguard's bytes over
fifo's (one class) or the device's busy fraction and class b's part of it (two
classes: each class's rate over the same pattern's rate alone under fifo,
summed), for both policies.

Usage: benchmarks/sim-saturation.py [TAILGUARD_BINARY] [SECONDS] [SEED]
(default: target/release/tailguard, 10 simulated seconds, seed 1).
"""
import json
import os
import subprocess
import sys
import tempfile

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPOSITORY, "target/release/tailguard")
SECONDS = sys.argv[2] if len(sys.argv) > 2 else "10"
SEED = sys.argv[3] if len(sys.argv) > 3 else "1"
MODELS = ["nvme", "sata-ssd", "hdd", "usb-flash"]
PATTERNS = {"randread": "4k", "randwrite": "4k", "seqread": "128k", "seqwrite": "128k"}
MIXES = [("randread", "randread"), ("randread", "seqwrite"), ("seqwrite", "seqwrite"),
         ("randread", "randwrite"), ("seqread", "seqwrite")]
# Three saturating classes, shares 100, 200 and 400, regions 16 GiB apart.
TRIPLES = [("randread",) * 3, ("seqwrite",) * 3, ("randread", "randread", "seqwrite")]
TRIPLE_SHARES = (100, 200, 400)


def job(name, shares, pattern, offset):
    return f"""
[[class]]
name = "{name}"
shares = {shares}
[[job]]
name = "{name}"
class = "{name}"
device = "d"
pattern = "{pattern}"
block_size = "{PATTERNS[pattern]}"
queue_depth = 32
numjobs = 2
offset = "{offset}"
size = "16g"
"""


def run_scenario(text, binary=BINARY):
    """Runs the scenario `text` in the simulator; returns its JSON report."""
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as scenario:
        scenario.write(text)
    try:
        output = subprocess.run([binary, "sim", scenario.name, "--json"],
                                capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(scenario.name)
    return json.loads(output)


def simulate(model, jobs):
    text = f'duration_s = {SECONDS}\nseed = {SEED}\npolicies = ["fifo", "tailguard"]\n'
    text += f'[[device]]\nname = "d"\nmodel = "{model}"\n' + jobs
    return {run["policy"]: {c["name"]: c["mb_per_s"] for c in run["classes"]}
            for run in run_scenario(text)}


def main():
    alone = {}
    print("one class alone: tailguard / fifo (bytes moved)")
    for model in MODELS:
        for pattern in PATTERNS:
            rates = simulate(model, job("a", 100, pattern, "0"))
            alone[model, pattern] = rates["fifo"]["a"]
            print(f"  {model:10} {pattern:10} {rates['tailguard']['a'] / rates['fifo']['a']:.3f}")
    print("two classes (shares 100:300): busy = sum of rate / rate alone; b = class b's part")
    for model in MODELS:
        for first, second in MIXES:
            rates = simulate(model, job("a", 100, first, "0") + job("b", 300, second, "16g"))
            cells = []
            for policy in ("fifo", "tailguard"):
                a = rates[policy]["a"] / alone[model, first]
                b = rates[policy]["b"] / alone[model, second]
                cells.append(f"{policy} busy {a + b:.3f} b {b / (a + b):.2f}")
            print(f"  {model:10} {first}+{second:10} " + " | ".join(cells))
    print("three classes (shares 100:200:400): busy, and each class's part")
    for model in MODELS:
        for patterns in TRIPLES:
            names = ("a", "b", "c")
            jobs = "".join(job(name, shares, pattern, f"{16 * index}g")
                           for index, (name, shares, pattern)
                           in enumerate(zip(names, TRIPLE_SHARES, patterns)))
            rates = simulate(model, jobs)
            cells = []
            for policy in ("fifo", "tailguard"):
                parts = [rates[policy][name] / alone[model, pattern]
                         for name, pattern in zip(names, patterns)]
                busy = sum(parts)
                cells.append(f"{policy} busy {busy:.3f} parts "
                             + " ".join(f"{part / busy:.2f}" for part in parts))
            print(f"  {model:10} {'+'.join(patterns):28} " + " | ".join(cells))


if __name__ == "__main__":
    main()
