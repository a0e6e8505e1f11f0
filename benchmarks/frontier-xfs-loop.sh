#!/usr/bin/env bash
# `tailguard frontier` on XFS over a loop device over the disk under test: the
# static O_DIRECT writers and tailguard's points beside the demo's 16 readers,
# interleaved over ROUNDS rounds, with the verdict against the best static
# setting at each tailguard point's write rate.
#
#   sudo benchmarks/frontier-xfs-loop.sh                 # 3 rounds, 5 s points
#   ROUNDS=2 FRONTIER_FLAGS="--quick" benchmarks/frontier-xfs-loop.sh
#   FRONTIER_FLAGS="--depths 1,2 --sizes 128k,256k,1m" benchmarks/frontier-xfs-loop.sh
#
# Needs root, losetup, mkfs.xfs (apt-get install -y xfsprogs). Sets up a sparse
# image under $IMAGE_DIR (default: target/frontier-xfs, on the disk under
# test), a loop device over it (--direct-io=on, so the loop device passes I/O
# through instead of caching it twice) and XFS on it; the frontier's own files
# live there. Everything is torn down on exit, failure and Ctrl-C included.
# Results (table, JSON, HTML chart, machine description) go to $RESULTS.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benchmarks/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
IMAGE_DIR=${IMAGE_DIR:-$CARGO_TARGET_DIR/frontier-xfs}
IMAGE_GB=${IMAGE_GB:-8}
ROUNDS=${ROUNDS:-3}
FRONTIER_FLAGS=${FRONTIER_FLAGS:-}
RESULTS=${RESULTS:-$CARGO_TARGET_DIR/bench-results/frontier-xfs-$(date +%Y%m%d-%H%M%S)}

xfs_loop_prepare "$IMAGE_DIR"

mkdir -p "$IMAGE_DIR" "$RESULTS"
echo "== build (release)"
BIN=$(tailguard_binary "$ROOT")

echo "== set up: ${IMAGE_GB} GiB sparse image, loop device, XFS"
xfs_loop_up "$IMAGE_GB"
{
  describe_machine "$MOUNT_POINT"
  echo "loop device $LOOP over $IMAGE ($(findmnt -no SOURCE,FSTYPE --target "$IMAGE_DIR" | xargs))"
} | tee "$RESULTS/machine.txt"

echo "== frontier ($ROUNDS rounds)"
read -r -a flags <<<"$FRONTIER_FLAGS"
"$BIN" frontier "$MOUNT_POINT" --rounds "$ROUNDS" "${flags[@]}" \
  --json "$RESULTS/frontier.json" --report "$RESULTS/frontier.html" | tee "$RESULTS/frontier.txt"
echo "results in $RESULTS"
