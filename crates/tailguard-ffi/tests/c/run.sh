#!/usr/bin/env bash
# Builds the C ABI, then compiles the C test suite and the C example with the
# system C compiler and runs them: once as they are, and the test suite once
# more under AddressSanitizer (leaks, use-after-free and overflows across the
# boundary; ASan intercepts the Rust side's malloc and free too).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
target="${CARGO_TARGET_DIR:-target}"
# The test profile: its artifacts are the ones `cargo test --workspace`
# builds anyway (both land in target/debug).
cargo build --locked -p tailguard-ffi --profile test
out="$target/c"
scratch="$out/scratch"
mkdir -p "$out" "$scratch"
flags=(-std=c11 -Wall -Wextra -Werror -g -I crates/tailguard-ffi/include)
libs=("$target/debug/libtailguard_ffi.a" -lpthread -ldl -lm)

cc "${flags[@]}" crates/tailguard-ffi/tests/c/test_tailguard.c "${libs[@]}" -o "$out/test_tailguard"
cc "${flags[@]}" crates/tailguard-ffi/examples/c/example.c "${libs[@]}" -o "$out/example"
cc "${flags[@]}" -fsanitize=address -fno-omit-frame-pointer \
    crates/tailguard-ffi/tests/c/test_tailguard.c "${libs[@]}" -o "$out/test_tailguard_asan"

echo "-- the example"
"$out/example" "$scratch/example.data" > "$out/example.out"
head -3 "$out/example.out"
echo "-- the C test suite"
"$out/test_tailguard" "$scratch"
echo "-- the C test suite under AddressSanitizer"
ASAN_OPTIONS=detect_leaks=1 "$out/test_tailguard_asan" "$scratch"
