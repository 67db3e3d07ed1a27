#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call for everything GPU: builds the library with the cuda engine, the GPU tests and the
# Python extension in one build dir (all cores), runs the C++ GPU tests, the Python GPU tests, the DDP
# test and the benchmarks named on the command line, and leaves at most 8 files in $OUT (log.txt,
# tests.txt, results.tgz with bench/results, ...). Needs .carry/cudnn (nlohmann-json, GoogleTest, cuDNN
# headers) and .carry/cutlass (CuTe headers); flash-linear-attention wheels in .whl if present.
# FE_SUITE=all|"test_x.py ..." also runs cuDNN Frontend's own test files (see below).
#   bash bench/run_gpu_all.sh [--no-tests] [--only-tests REGEX] [--quick] [--demo] [bench[:arg,arg] ...]  (gemm sdpa:--v2 gdn norm ...)
# GTEST_FILTER applies to every test binary; GF_<binary>=PATTERN (e.g. GF_test_cudnn_engine='*Dropout*')
# overrides it for one. --demo also builds the opendnn tool and runs `opendnn demo` (the README's main job).
# Each benchmark runs as `python3 bench/<name>.py $BENCH_FLAGS`; --quick adds --quick to BENCH_FLAGS (a few shapes,
# each benchmark well under a minute) and lowers the per-benchmark timeout to 120 s.
set -o pipefail
T0=$(date +%s); BUDGET_S=${BUDGET_S:-540}  # stop starting new steps after this many seconds
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OPENDNN_PIP_CUDNN_DIR=$(python3 -c 'import os,nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0],"lib"))' 2>/dev/null)
LOG=$OUT/log.txt; TESTS=$OUT/tests.txt
log() { echo "== $(date +%T) $*" | tee -a "$LOG" "$TESTS"; }
run_tests=1; test_filter=.; demo=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-tests) run_tests=0; shift ;;
    --only-tests) test_filter=$2; shift 2 ;;
    --demo) demo=1; shift ;;
    --quick) BENCH_FLAGS="--quick${BENCH_FLAGS:+ $BENCH_FLAGS}"; BENCH_TIMEOUT=${BENCH_TIMEOUT:-120}; shift ;;
    *) break ;;
  esac
done

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$LOG" 2>&1 && export PYTHONPATH=/tmp/site
fi

# The cuda engine's kernel families to build (CMake's OPENDNN_CUDA_FAMILIES), e.g. "gdn" or "norm;gdn".
CUDA_FAMILIES=${CUDA_FAMILIES:-gemm;norm;sdpa;gdn;pointwise}

# Triton autotune results (fla tunes every kernel per shape, minutes a shape): restored from the
# .carry/triton_autotune.tgz an earlier call left in $OUT, saved again at the end (the json files only).
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache}; mkdir -p "$TRITON_CACHE_DIR"
[[ -f .carry/triton_autotune.tgz ]] && tar xzf .carry/triton_autotune.tgz -C "$TRITON_CACHE_DIR"
save_autotune() { (cd "$TRITON_CACHE_DIR" && find . -name '*.autotune.json' | tar czf "$OUT/triton_autotune.tgz" -T -) 2>/dev/null; }

# BUILD_DIR outside the carried tree (e.g. /tmp/bg) outlives the call while the machine stays warm;
# REUSE_BUILD=1 then skips cmake and ninja when it already holds the Python extension (a carried tree's
# fresh timestamps would make ninja rebuild everything).
B=${BUILD_DIR:-build-gpu}
if [[ ${REUSE_BUILD:-0} == 1 ]] && ls "$B"/python/opendnn/_C*.so >/dev/null 2>&1; then
  log "reusing the build in $B"
else
  log "build (cuda engine, GPU tests, Python extension)"
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPENDNN_BUILD_TOOLS=$([[ $demo == 1 ]] && echo ON || echo OFF) -DOPENDNN_WITH_CUDA=ON \
    -DOPENDNN_BUILD_PYTHON=ON -DCMAKE_PREFIX_PATH="$PWD/.carry/cudnn" -DOPENDNN_CUDA_FAMILIES="$CUDA_FAMILIES" \
    -DOPENDNN_CUTLASS_INCLUDE_DIR="$PWD/.carry/cutlass/include" -Dnanobind_DIR="$(python3 -m nanobind --cmake_dir)" \
    >>"$LOG" 2>&1 || { tail -40 "$LOG"; exit 1; }
  SECONDS=0
  # keep going past a broken target: the rest still runs
  # TARGETS (space-separated ninja targets) narrows the build, e.g. to the tests a call runs; by default every
  # test binary of the families in CUDA_FAMILIES
  targets=${TARGETS:-"opendnn_python test_cudnn_engine $(for f in tests/gpu/test_cuda_*.cpp; do n=$(basename "$f" .cpp); f2=${n#test_cuda_}; [[ ";$CUDA_FAMILIES;" == *";${f2%%_*};"* ]] && echo "$n"; done)"}
  [[ $demo == 1 ]] && targets="$targets opendnn_cli"
  ninja -C "$B" -k 0 -j"$(nproc)" $targets >>"$LOG" 2>&1 || { log "BUILD ERRORS:"; grep -E "error|FAILED" "$LOG" | head -40 | tee -a "$TESTS"; }
  log "build took ${SECONDS}s"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee -a "$LOG"
export PYTHONPATH=$(cd "$B" && pwd)/python:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}
if [[ $demo == 1 ]]; then
  log "opendnn demo"
  (cd "$B" && timeout 120 ./opendnn demo) 2>&1 | tee -a "$LOG" | tail -40 >>"$TESTS"
fi

if [[ $run_tests == 1 ]]; then
  for t in "$B"/test_cuda_* "$B"/test_cudnn_engine; do
    [[ -x $t && $t =~ $test_filter ]] || continue
    (( $(left) > 30 )) || { log "SKIPPED $t (time budget)"; continue; }
    log "$t"
    gf=GF_$(basename "$t"); gf=${!gf:-${GTEST_FILTER:-*}}
    # cuDNN's own log (level 2: errors and warnings, i.e. why a config or pattern is rejected); its tail
    # is kept as cudnn.log. CUDNN_TEST_LOGLEVEL=0 turns it off.
    GTEST_FILTER=$gf CUDNN_LOGLEVEL_DBG=${CUDNN_TEST_LOGLEVEL:-2} CUDNN_LOGDEST_DBG="$OUT/.cudnn_full.log" \
      timeout $(( $(left) < 240 ? $(left) : 240 )) "$t" >"$OUT/.t.txt" 2>&1; rc=$?
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|Failure|Expected|Which is|actual|error|rel_err|decline" "$OUT/.t.txt" | head -80 >>"$TESTS"
    cat "$OUT/.t.txt" >>"$LOG"; log "$t rc=$rc"
  done
  rm -f "$OUT/.t.txt"
  if [[ -f $OUT/.cudnn_full.log ]]; then tail -c 300000 "$OUT/.cudnn_full.log" >"$OUT/cudnn.log"; rm -f "$OUT/.cudnn_full.log"; fi
  if [[ "pytest" =~ $test_filter || $test_filter == . ]]; then
    log "pytest tests/gpu tests/distributed"
    timeout $(( $(left) < 420 ? $(left) : 420 )) python3 -m pytest tests/gpu tests/distributed -q -rfE --timeout=200 -p no:cacheprovider 2>&1 | tee -a "$LOG" | tail -30 >>"$TESTS"
    ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
    log "DDP over NCCL, $ngpu process(es)"
    timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node="$ngpu" tests/distributed/ddp_train.py 2>&1 |
      tee -a "$LOG" | grep -E "DDP-(OK|FAIL)" >>"$TESTS"
  fi
fi

# cuDNN Frontend's own pytest files (staged in .carry/peer by ../shared/peer/stage.sh), unchanged, against this
# build: FE_SUITE=all (every file) or FE_SUITE="test_a.py test_b.py". The per-file table lands in
# bench/results/fe_conformance.txt (and results.tgz); the whole log in $OUT/fe_suite.log.
if [[ -n ${FE_SUITE:-} && -x .carry/peer/run_fe_suite.sh ]]; then
  log "cuDNN Frontend test files: $FE_SUITE"
  files=$([[ $FE_SUITE == all ]] || echo "$FE_SUITE")
  FE_FILE_S=${FE_FILE_S:-$(( $(left) < 300 ? $(left) : 300 ))} OUT=$OUT bash .carry/peer/run_fe_suite.sh $files >>"$LOG" 2>&1
  { echo "# cuDNN Frontend v1.23 test files against opendnn $(git rev-parse --short HEAD 2>/dev/null) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)"
    echo "# file: pytest summary; waived = 'TEST WAIVED: unsupported graph' (counted as failures)"
    cat "$OUT/fe_suite.txt"; } > bench/results/fe_conformance.txt
  cat bench/results/fe_conformance.txt >>"$TESTS"
  tar czf "$OUT/results.tgz" bench/results 2>/dev/null
fi

for spec in "$@"; do
  # NAME or NAME:ARG,ARG (extra arguments for that benchmark only, e.g. sdpa:--v2)
  b=${spec%%:*}; extra=""; [[ $spec == *:* ]] && extra=${spec#*:} && extra=${extra//,/ }
  (( $(left) > 40 )) || { log "SKIPPED bench/$b.py (time budget)"; continue; }
  log "bench/$b.py $BENCH_FLAGS $extra"
  lim=${BENCH_TIMEOUT:-300}; (( $(left) < lim )) && lim=$(left)
  # faulthandler: a crash inside the process still prints the Python stack
  # results travel in results.tgz: a copy per benchmark in $OUT would pass the 8-file limit
  env -u OUT timeout $lim python3 -X faulthandler "bench/$b.py" $BENCH_FLAGS $extra 2>&1 | tee -a "$LOG" | tail -25 >>"$TESTS"
  tar czf "$OUT/results.tgz" bench/results 2>/dev/null  # after each: a call cut off at its limit keeps them
  save_autotune
done
tar czf "$OUT/results.tgz" bench/results 2>/dev/null
log "done"
tail -c 11000 "$TESTS"
