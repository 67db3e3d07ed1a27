#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call: build (all cores), run the cudnn engine's GPU tests, then the benchmark (through the
# opendnn Python package, built here in build-py-cudnn).
# Needs .carry/cudnn (nlohmann-json, GoogleTest and cuDNN headers: the device image has none); carry it.
# Results and logs go to $OUT (or ./gpu-out). Usage: bash bench/run_gpu_cudnn.sh [--quick]
set -o pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# libcudnn: torch's pip wheel folder, found through the interpreter (the loader also honours this).
export OPENDNN_PIP_CUDNN_DIR=$(python3 -c 'import os,nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0],"lib"))' 2>/dev/null)
echo "OPENDNN_PIP_CUDNN_DIR=$OPENDNN_PIP_CUDNN_DIR" | tee "$OUT/log.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPENDNN_BUILD_TOOLS=OFF -DCMAKE_PREFIX_PATH=$PWD/.carry/cudnn >>"$OUT/log.txt" 2>&1 || { tail -30 "$OUT/log.txt"; exit 1; }
ninja -C build-gpu -j"$(nproc)" opendnn test_cudnn_engine 2>&1 | tail -20 | tee -a "$OUT/log.txt"
# --gtest_filter etc. pass through CUDNN_TEST_ARGS.
# cuDNN's own log for the tests (level 2: errors and warnings, i.e. why a config or pattern is rejected);
# only its tail is kept. CUDNN_TEST_LOGLEVEL=0 turns it off.
CUDNN_LOGLEVEL_DBG=${CUDNN_TEST_LOGLEVEL:-2} CUDNN_LOGDEST_DBG="$OUT/cudnn_full.log" timeout 240 ./build-gpu/test_cudnn_engine $CUDNN_TEST_ARGS 2>&1 |
  tee "$OUT/test_cudnn_engine.txt" | grep -E "^\[|note|plan|decline|Failure|mismatch|error|cuDNN" | head -150
if [ -f "$OUT/cudnn_full.log" ]; then
  tail -c 300000 "$OUT/cudnn_full.log" >"$OUT/cudnn.log"; rm -f "$OUT/cudnn_full.log"
fi
# The benchmark reaches the engine through the Python package (no cuda engine needed: a build without it is faster).
cmake -S . -B build-py-cudnn -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPENDNN_BUILD_PYTHON=ON -DOPENDNN_BUILD_TESTS=OFF \
  -DOPENDNN_BUILD_TOOLS=OFF -DCMAKE_PREFIX_PATH=$PWD/.carry/cudnn -Dnanobind_DIR="$(python3 -m nanobind --cmake_dir)" \
  >>"$OUT/log.txt" 2>&1 || { tail -30 "$OUT/log.txt"; exit 1; }
ninja -C build-py-cudnn -j"$(nproc)" >>"$OUT/log.txt" 2>&1 || { tail -40 "$OUT/log.txt"; exit 1; }
PYTHONPATH=$PWD/build-py-cudnn/python:$PWD/bench timeout 300 python3 bench/cudnn_engine.py "$@" 2>&1 |
  tee "$OUT/bench.txt" | tail -40
