#!/usr/bin/env bash
# benchmarks/bursty-readers.py on XFS over a loop device over the disk under
# test: readers that come and go beside a writer that never stops, static
# O_DIRECT settings against tailguard, interleaved over ROUNDS rounds.
#
#   sudo benchmarks/bursty-readers-xfs-loop.sh              # 5 rounds, 3 periods
#   ROUNDS=3 PERIODS=2 benchmarks/bursty-readers-xfs-loop.sh
#
# Needs root, losetup, mkfs.xfs (apt-get install -y xfsprogs). Sets up a sparse
# image under $IMAGE_DIR (default: target/bursty-xfs, on the disk under test),
# a loop device over it (--direct-io=on) and XFS on it; everything is torn
# down on exit, failure and Ctrl-C included.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benchmarks/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
IMAGE_DIR=${IMAGE_DIR:-$CARGO_TARGET_DIR/bursty-xfs}
ROUNDS=${ROUNDS:-5}
PERIODS=${PERIODS:-3}

xfs_loop_prepare "$IMAGE_DIR"
mkdir -p "$IMAGE_DIR"
echo "== build (release)"
BIN=$(tailguard_binary "$ROOT")
echo "== set up: 8 GiB sparse image, loop device, XFS"
xfs_loop_up 8
describe_machine "$MOUNT_POINT"
echo "== readers that come and go ($ROUNDS rounds)"
python3 "$ROOT/benchmarks/bursty-readers.py" "$MOUNT_POINT" "$BIN" "$ROUNDS" "$PERIODS"
