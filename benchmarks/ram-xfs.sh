#!/usr/bin/env bash
# Runs a benchmark on a device faster than the software path: XFS over a loop
# device over a file in RAM (/dev/shm), where a 4 KiB read costs the device a
# few microseconds and the CPU spent per request (system calls, interrupts,
# wake-ups) decides the rate, as on a fast NVMe disk.
#
#   benchmarks/ram-xfs.sh benchmarks/engine-vs-fio.sh          # BENCH_DIR is set
#   DEPTHS="1 16" REPS=4 SECS=3 benchmarks/ram-xfs.sh benchmarks/engine-vs-fio.sh
#   benchmarks/ram-xfs.sh sh -c 'tailguard bench JOB.toml --target "$MOUNT_POINT"'
#
# Needs root, losetup, mkfs.xfs (apt-get install -y xfsprogs) and IMAGE_GB
# (default 4) GiB of free memory. Exports MOUNT_POINT and BENCH_DIR (both the
# mounted XFS) to the command; tears everything down on exit, failure and
# Ctrl-C included. The loop device runs on the same CPUs as the benchmark, so
# read its figures as CPU per request, not as a disk's speed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benchmarks/lib.sh"
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
IMAGE_GB=${IMAGE_GB:-4}

xfs_loop_prepare /dev/shm
echo "== set up: ${IMAGE_GB} GiB image in /dev/shm, loop device, XFS"
xfs_loop_up "$IMAGE_GB"
echo "loop device $LOOP over $IMAGE, XFS at $MOUNT_POINT"
export MOUNT_POINT BENCH_DIR="$MOUNT_POINT"
"$@"
