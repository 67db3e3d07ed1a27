#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `opendnn validate` and `opendnn run` on careless or hostile input: bounded reads, OS reasons in I/O
# errors, missing inputs, data type and shape mismatches, offsets out of range, unique output files.
# Usage: run_checks.sh PATH_TO_OPENDNN_TOOL GRAPHS_DIR (tests/cli/graphs)
set -u
tool=$1; graphs=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0

# expect_fail NAME TEXT CMD...: CMD exits non-zero and prints TEXT.
expect_fail() {
  local name=$1 text=$2; shift 2
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  if [ "$rc" -eq 0 ]; then echo "FAIL $name: exited 0"; echo "$out" | tail -3; fails=$((fails + 1))
  elif ! grep -qF -- "$text" <<<"$out"; then echo "FAIL $name (exit $rc): expected '$text'"; echo "$out" | tail -3; fails=$((fails + 1))
  else passes=$((passes + 1)); fi
}
# expect_ok NAME CMD...: CMD exits 0.
expect_ok() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then passes=$((passes + 1)); else echo "FAIL $name: exit $?"; echo "$out" | tail -3; fails=$((fails + 1)); fi
}
# mknpy PATH DESCR SHAPE: a version 1.0 .npy whose data comes from stdin.
mknpy() {
  local dict="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
  local hlen=$(( ${#dict} + 1 ))
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $((hlen & 255)))\\x$(printf %02x $((hlen >> 8)))"
    printf '%s\n' "$dict"; cat; } > "$1"
}
int32s() { for v in "$@"; do printf "\\x$(printf %02x $((v & 255)))\\x$(printf %02x $(((v >> 8) & 255)))\\x$(printf %02x $(((v >> 16) & 255)))\\x$(printf %02x $(((v >> 24) & 255)))"; done; }

two="$graphs/two_outputs_one_name.json"   # x HALF [1,4,8] -> relu -> y (uid 2), neg -> y (uid 3)

# Bounded reads: an endless file or stream stops at the document cap, quickly.
expect_fail validate_dev_zero "larger than 64 MiB" timeout 60 "$tool" validate /dev/zero
expect_fail validate_endless_stdin "larger than 64 MiB" timeout 60 bash -c "cat /dev/zero | '$tool' validate -"
expect_fail validate_directory "cannot read $tmp: Is a directory" "$tool" validate "$tmp"
expect_fail validate_missing "cannot read $tmp/none.json: No such file or directory" "$tool" validate "$tmp/none.json"

# Missing inputs are errors, never random data.
expect_fail run_missing_inputs_dir "--inputs $tmp/nope: no such directory" "$tool" run "$two" --inputs "$tmp/nope"
mkdir -p "$tmp/empty"
expect_fail run_missing_input_file "has no x.npy (or 1.npy) for input tensor \"x\"" "$tool" run "$two" --inputs "$tmp/empty"
expect_ok run_fill_missing "$tool" run "$two" --inputs "$tmp/empty" --fill-missing

# Data types must match exactly; --convert converts values.
mkdir -p "$tmp/bf16" "$tmp/f4" "$tmp/f2" "$tmp/shape" "$tmp/squeeze"
head -c 64 /dev/zero | mknpy "$tmp/bf16/x.npy" '<V2' '(1, 4, 8)'
expect_fail run_bf16_for_half "holds BFLOAT16 (<V2) but tensor \"x\" is HALF; pass --convert" "$tool" run "$two" --inputs "$tmp/bf16"
expect_ok run_bf16_for_half_converted "$tool" run "$two" --inputs "$tmp/bf16" --convert
head -c 128 /dev/zero | mknpy "$tmp/f4/x.npy" '<f4' '(1, 4, 8)'
expect_fail run_float_for_half "holds FLOAT (<f4) but tensor \"x\" is HALF" "$tool" run "$two" --inputs "$tmp/f4"
head -c 64 /dev/zero | mknpy "$tmp/f2/x.npy" '<f2' '(1, 4, 8)'
expect_ok run_half_for_half "$tool" run "$two" --inputs "$tmp/f2"

# Shapes must match dims (dims of 1 aside).
head -c 64 /dev/zero | mknpy "$tmp/shape/x.npy" '<f2' '(8, 4)'
expect_fail run_transposed_shape "shape (8, 4) does not match the dims [1,4,8] of tensor \"x\"" "$tool" run "$two" --inputs "$tmp/shape"
head -c 64 /dev/zero | mknpy "$tmp/squeeze/x.npy" '<f2' '(4, 8)'
expect_ok run_squeezed_shape "$tool" run "$two" --inputs "$tmp/squeeze"

# A header that claims more than the file holds.
printf '' | mknpy "$tmp/shape/x.npy" '<f2' '(65536, 65536)'
expect_fail run_npy_claim "the header claims 8589934592 bytes of data, but the file holds 0" "$tool" run "$two" --inputs "$tmp/shape"

# Two outputs with one name get one file each.
expect_ok run_save_duplicates "$tool" run "$two" --save "$tmp/out"
for f in y_uid2.npy y_uid3.npy; do
  if [ -f "$tmp/out/$f" ]; then passes=$((passes + 1)); else echo "FAIL run_save_duplicates: no $f"; ls "$tmp/out"; fails=$((fails + 1)); fi
done
expect_fail run_save_unwritable "cannot create /dev/null/out" "$tool" run "$two" --save /dev/null/out

# A tensor too large for memory is a clear error (ASan is asked to fail the allocation, not abort).
expect_fail run_out_of_memory "cannot allocate 288230376151711744 bytes for tensor \"x\" [268435456,268435456]: out of memory" \
  env ASAN_OPTIONS=allocator_may_return_null=1 "$tool" run "$graphs/huge_tensor.json"

# Generated sequence lengths and ragged offsets stay inside their tensors (Skv < Sq: each side its own).
expect_ok run_generated_cu_seq_len "$tool" run "$graphs/sdpa_cu_seq_len.json" --engine reference
expect_ok run_generated_ragged "$tool" run "$graphs/sdpa_ragged.json" --engine reference
# Ragged offsets and cumulative lengths from the user are range-checked before anything runs.
mkdir -p "$tmp/ragged_ok" "$tmp/ragged_bad" "$tmp/cu_bad"
int32s 0 256 512 | mknpy "$tmp/ragged_ok/ragged_q.npy" '<i4' '(3, 1, 1, 1)'
expect_ok run_ragged_in_range "$tool" run "$graphs/sdpa_ragged.json" --engine reference --inputs "$tmp/ragged_ok" --fill-missing
int32s 0 100000 0 | mknpy "$tmp/ragged_bad/ragged_q.npy" '<i4' '(3, 1, 1, 1)'
expect_fail run_ragged_out_of_range "ragged offset \"ragged_q\" (uid 10): offset 100000 of batch 1 is out of range" \
  "$tool" run "$graphs/sdpa_ragged.json" --engine reference --inputs "$tmp/ragged_bad" --fill-missing
int32s 0 -5 8 | mknpy "$tmp/ragged_bad/ragged_q.npy" '<i4' '(3, 1, 1, 1)'
expect_fail run_ragged_negative "offset -5 of batch 1 is out of range" \
  "$tool" run "$graphs/sdpa_ragged.json" --engine reference --inputs "$tmp/ragged_bad" --fill-missing
int32s 0 9 16 | mknpy "$tmp/cu_bad/cu_kv.npy" '<i4' '(3, 1, 1, 1)'
expect_fail run_cu_seq_len_out_of_range "cumulative sequence lengths \"cu_kv\" (uid 6): offset 9 (x32) of batch 1 is out of range" \
  "$tool" run "$graphs/sdpa_cu_seq_len.json" --engine reference --inputs "$tmp/cu_bad" --fill-missing

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
