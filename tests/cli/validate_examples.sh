#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `opendnn validate` accepts every valid example graph and, for every invalid one, exits non-zero and
# names the error category its file name promises (invalid/NAME.CODE.json).
# Usage: validate_examples.sh PATH_TO_OPENDNN_TOOL EXAMPLES_DIR
set -u
tool=$1; dir=$2; fails=0; passes=0
for f in "$dir"/*.json; do
  if out=$("$tool" validate "$f" 2>&1); then passes=$((passes + 1)); else echo "FAIL (rejected a valid graph): $f"; echo "$out" | tail -3; fails=$((fails + 1)); fi
done
for f in "$dir"/invalid/*.json; do
  code=$(basename "$f" .json); code=${code##*.}
  if out=$("$tool" validate "$f" 2>&1); then
    echo "FAIL (accepted an invalid graph): $f"; fails=$((fails + 1))
  elif ! grep -q "$code" <<<"$out"; then
    echo "FAIL (expected $code): $f"; echo "$out" | tail -3; fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
done
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
