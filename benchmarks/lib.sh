# Shared by the benchmark scripts (sourced, not run): tool checks, the machine
# description every result folder starts with, and where the binaries come from.
#
# Binaries: each script builds what it runs with cargo (release) unless the
# environment names a prebuilt one, which is how the scripts run on a machine
# without a Rust toolchain (copy the binaries over, then set):
#   TAILGUARD_BIN  the `tailguard` CLI          (default: cargo build --release)
#   ENGINE_BIN     the `engine` bench binary     (default: cargo bench --no-run)
#   FIO            fio                           (default: fio on PATH)

# need COMMAND HOW: exit with a message that says how to get COMMAND.
need() {
  command -v "$1" >/dev/null || { echo "$1 is not installed; $2" >&2; exit 1; }
}

# need_fio: fio, from $FIO or PATH.
need_fio() {
  FIO=${FIO:-fio}
  need "$FIO" "install it with: apt-get install -y fio (or set FIO=/path/to/fio)"
}

# describe_machine DIRECTORY: what the results were measured on, for the
# filesystem and block device holding DIRECTORY.
describe_machine() {
  echo "date: $(date -Is)"
  echo "kernel: $(uname -r)"
  echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ -n "${FIO:-}" ] && command -v "$FIO" >/dev/null; then echo "fio: $("$FIO" --version)"; fi
  echo "filesystem: $(findmnt -no SOURCE,FSTYPE --target "$1" | xargs)"
  local device
  device=$(basename "$(findmnt -no SOURCE --target "$1")")
  # A partition's queue settings live on its whole disk.
  if [ ! -e "/sys/block/$device" ] && [ -e "/sys/class/block/$device/partition" ]; then
    device=$(basename "$(dirname "$(readlink -f "/sys/class/block/$device")")")
  fi
  if [ -e "/sys/block/$device/queue/scheduler" ]; then
    local queue=/sys/block/$device/queue
    echo "block device $device: scheduler $(cat $queue/scheduler), nr_requests $(cat $queue/nr_requests)," \
      "rotational $(cat $queue/rotational), write cache $(cat $queue/write_cache 2>/dev/null || echo '?')"
  fi
}

# tailguard_binary ROOT: path of the tailguard CLI (built here unless TAILGUARD_BIN).
tailguard_binary() {
  if [ -n "${TAILGUARD_BIN:-}" ]; then
    echo "$TAILGUARD_BIN"
    return
  fi
  # `set -e` does not reach inside the caller's $(...): fail explicitly, so
  # that a failed build never runs the binary an earlier build left.
  (cd "$1" && cargo build --release -q -p tailguard-cli) >&2 ||
    { echo "building tailguard failed (is cargo on root's PATH? try sudo -E)" >&2; return 1; }
  echo "${CARGO_TARGET_DIR:-$1/target}/release/tailguard"
}

# engine_binary ROOT: path of the `engine` bench binary (built here unless ENGINE_BIN).
engine_binary() {
  if [ -n "${ENGINE_BIN:-}" ]; then
    echo "$ENGINE_BIN"
    return
  fi
  need jq "install it with: apt-get install -y jq"
  (cd "$1" && cargo bench -p tailguard --bench engine --no-run --message-format=json 2>/dev/null) |
    jq -r 'select(.reason == "compiler-artifact" and .target.name == "engine" and .executable != null) | .executable' |
    tail -1
}

# XFS over a loop device, for the scripts that measure on it (needs root,
# losetup, mkfs.xfs). xfs_loop_prepare DIRECTORY names the image and mount
# point under DIRECTORY (IMAGE, MOUNT_POINT) and installs the teardown: on
# exit, failure and Ctrl-C included, it unmounts, detaches the loop device
# and removes the image. xfs_loop_up GIB then creates a sparse image of GIB
# GiB, a loop device over it with direct I/O (so the loop device passes I/O
# through instead of caching it twice; sets LOOP), XFS on it, mounted at
# MOUNT_POINT.
xfs_loop_prepare() {
  [ "$(id -u)" = 0 ] || { echo "needs root (loop devices, mkfs, mount); run it with sudo" >&2; exit 1; }
  need losetup "install it with: apt-get install -y mount"
  need mkfs.xfs "install it with: apt-get install -y xfsprogs"
  IMAGE="$1/xfs-$$.img"
  MOUNT_POINT="$1/mnt-$$"
  LOOP=""
  trap xfs_loop_teardown EXIT
  trap 'exit 130' INT TERM
}

xfs_loop_teardown() {
  set +e
  # A second Ctrl-C (unmounting can take a while to write back) must not cut
  # the teardown short and leave the loop device and the image behind.
  trap '' INT TERM
  if mountpoint -q "$MOUNT_POINT" 2>/dev/null; then
    # A process that just exited may still hold files open for a moment.
    for _ in 1 2 3 4 5; do umount "$MOUNT_POINT" 2>/dev/null && break; sleep 1; done
    if mountpoint -q "$MOUNT_POINT"; then
      echo "note: $MOUNT_POINT is busy; unmounting it lazily" >&2
      umount -l "$MOUNT_POINT"
    fi
  fi
  [ -d "$MOUNT_POINT" ] && rmdir "$MOUNT_POINT"
  # Attached but not yet recorded (a signal in between): find it by its image.
  [ -z "$LOOP" ] && [ -e "$IMAGE" ] && LOOP=$(losetup -j "$IMAGE" -n -O NAME | head -1)
  # A loop device still in use detaches (autoclear) once its last user goes.
  [ -n "$LOOP" ] && losetup -d "$LOOP"
  rm -f "$IMAGE"
}

xfs_loop_up() {
  truncate -s "${1}G" "$IMAGE"
  LOOP=$(losetup --find --show --direct-io=on "$IMAGE")
  if [ "$(cat "/sys/block/$(basename "$LOOP")/loop/dio" 2>/dev/null)" != 1 ]; then
    echo "note: $LOOP does not use direct I/O (kernel or block size): it caches" \
      "in the page cache, so its figures are not those of the disk under it" >&2
  fi
  mkfs.xfs -q -f "$LOOP"
  mkdir -p "$MOUNT_POINT"
  mount "$LOOP" "$MOUNT_POINT"
}
