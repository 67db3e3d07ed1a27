#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call for the cuda engine and the Python package on the GPU: builds the library with
# the cuda engine (all cores), runs the C++ GPU tests, builds the Python extension, runs the Python
# GPU tests and the norm benchmark. Needs .carry/cudnn (nlohmann-json, GoogleTest and cuDNN headers:
# the device image has none). Results go to $OUT (or ./gpu-out).
set -o pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export OPENDNN_PIP_CUDNN_DIR=$(python3 -c 'import os,nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0],"lib"))' 2>/dev/null)
CARRY="-DCMAKE_PREFIX_PATH=$PWD/.carry/cudnn"
log() { echo "== $*" | tee -a "$OUT/log.txt"; }

log "C++ build with the cuda engine"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPENDNN_BUILD_TOOLS=OFF -DOPENDNN_WITH_CUDA=ON $CARRY \
  >>"$OUT/log.txt" 2>&1 || { tail -30 "$OUT/log.txt"; exit 1; }
ninja -C build-gpu -j"$(nproc)" opendnn test_cuda_norm >>"$OUT/log.txt" 2>&1 || { tail -40 "$OUT/log.txt"; exit 1; }
log "test_cuda_norm"
./build-gpu/test_cuda_norm 2>&1 | tee "$OUT/test_cuda_norm.txt" | grep -E "^\[|Failure|error|Expected|Which|rel_err" | head -60

log "Python extension with the cuda engine"
cmake -S . -B build-py-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPENDNN_BUILD_PYTHON=ON -DOPENDNN_BUILD_TESTS=OFF \
  -DOPENDNN_BUILD_TOOLS=OFF -DOPENDNN_WITH_CUDA=ON $CARRY -Dnanobind_DIR="$(python3 -m nanobind --cmake_dir)" \
  >>"$OUT/log.txt" 2>&1 || { tail -30 "$OUT/log.txt"; exit 1; }
ninja -C build-py-gpu -j"$(nproc)" >>"$OUT/log.txt" 2>&1 || { tail -40 "$OUT/log.txt"; exit 1; }
export PYTHONPATH=$PWD/build-py-gpu/python:$PWD/bench
python3 -c "import opendnn; print('default target:', opendnn.default_target())" 2>&1 | tee -a "$OUT/log.txt"

log "norm benchmark: cuda engine, torch eager and cuDNN (cudnn engine) in one process"
timeout 240 python3 bench/norm.py "$@" 2>&1 | tee "$OUT/bench_norm.txt" | tail -60

log "Python GPU tests"
timeout 120 python3 -m pytest tests/gpu -q 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -15
