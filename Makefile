# SPDX-License-Identifier: Apache-2.0
# Two entry points for a fresh machine: `make demo` (the main job) and `make test` (the suite).
# Both install what they need (Debian packages and PyPI only).
SHELL := /bin/bash
space := $(subst ,, )
JOBS ?= $(shell nproc)
BUILD ?= build
APT_PACKAGES := cmake ninja-build g++ clang libclang-rt-14-dev nlohmann-json3-dev libgtest-dev \
                libbenchmark-dev libcli11-dev libomp-dev python3-pip python3-venv

.PHONY: deps build build-asan demo test test-cpp test-asan test-integer fuzz test-python pyvenv test-python-asan

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ $$(id -u) -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOPENDNN_SANITIZE=address,undefined >/dev/null
	cmake --build $(BUILD)-asan -j $(JOBS)

demo: build
	@for f in examples/graphs/*.json; do [ -e "$$f" ] || continue; echo "== $$f"; ./$(BUILD)/opendnn validate $$f || exit 1; done
	@if [ -f tools/cmd_demo.cpp ]; then ./$(BUILD)/opendnn demo; fi

test-cpp: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS)

# clang with UBSan plus -fsanitize=integer on the shape arithmetic (src/graph, src/ops; the standard
# library's inlined code is skipped, tests/sanitize/integer_ignorelist.txt): the C++ tests that build and
# validate graphs (the op rules, JSON, the catalogue, hardening), any report fatal. About 5 minutes from
# scratch on 2 cores, 12 s to run.
INTEGER_TESTS := test_hardening test_catalogue test_json test_ops_conv test_ops_layout test_ops_misc test_ops_norm \
                 test_ops_pointwise_matmul test_ops_reduction test_ops_sdpa test_ops_gdn test_ops_causal_conv1d
test-integer: deps
	cmake -S . -B $(BUILD)-integer -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
	  -DOPENDNN_SANITIZE=undefined -DOPENDNN_SANITIZE_INTEGER=ON -DOPENDNN_BUILD_TOOLS=OFF >/dev/null
	cmake --build $(BUILD)-integer -j $(JOBS) --target $(INTEGER_TESTS)
	cd $(BUILD)-integer && UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) -R '^($(subst $(space),|,$(strip $(INTEGER_TESTS))))$$'

test: test-cpp test-asan test-integer fuzz test-python test-python-asan

# The Python package: `pip install .` into a venv that sees this Python's packages (so the build needs
# no network: scikit-build-core, nanobind, numpy, ml_dtypes, pytest), then the pytest suite.
PYVENV ?= $(BUILD)-venv
PIP_CCACHE := $(if $(shell command -v ccache),-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
pyvenv: deps
	[ -x $(PYVENV)/bin/python ] || python3 -m venv --system-site-packages $(PYVENV)
	$(PYVENV)/bin/python -m pip install -q scikit-build-core nanobind numpy ml_dtypes pytest

test-python: pyvenv
	$(PYVENV)/bin/python -m pip install -q --no-build-isolation $(PIP_CCACHE) .
	$(PYVENV)/bin/python -m pytest tests/python -q
	@# opendnn.ops (torch custom ops) and DDP over them, on the CPU: torch from PyPI.
	$(PYVENV)/bin/python -m pip install -q torch
	$(PYVENV)/bin/python -m pytest tests/python/test_torch_ops_cpu.py tests/python/test_bench_common.py tests/distributed -q

# The Python suite on the extension and library built with ASan and UBSan (Debug). The interpreter is
# not instrumented, so the ASan runtime is preloaded (with libstdc++, whose __cxa_throw ASan intercepts);
# PYTHONMALLOC=malloc lets ASan see Python's own buffers too. Leaks are not reported (the interpreter
# keeps much alive at exit); torch (not instrumented) stays out. About 3 min of build and 20 s of tests
# on 2 cores.
test-python-asan: pyvenv
	cmake -S . -B $(BUILD)-pyasan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOPENDNN_SANITIZE=address,undefined \
	  -DOPENDNN_BUILD_PYTHON=ON -DOPENDNN_BUILD_TESTS=OFF -DOPENDNN_BUILD_TOOLS=OFF \
	  -DPython_EXECUTABLE=$(abspath $(PYVENV))/bin/python >/dev/null
	cmake --build $(BUILD)-pyasan -j $(JOBS) --target opendnn_python
	LD_PRELOAD="$$($${CXX:-g++} -print-file-name=libasan.so) $$($${CXX:-g++} -print-file-name=libstdc++.so)" \
	  ASAN_OPTIONS=detect_leaks=0 PYTHONMALLOC=malloc \
	  PYTHONPATH=$(BUILD)-pyasan/python $(PYVENV)/bin/python -m pytest tests/python -q -p no:cacheprovider \
	  --ignore=tests/python/test_torch_ops_cpu.py --ignore=tests/python/test_bench_common.py

# libFuzzer (clang, ASan+UBSan, leak detection), FUZZ_TIME seconds per target; fails on a crash, a
# leak, a UB report or an input slower than 10 s. New inputs go to $(BUILD)-fuzz/corpus*.
# - fuzz_graph_json: Graph JSON v2 documents. Seeds: tests/fuzz/seeds (one graph per op), examples/graphs.
# - fuzz_graph_exec: small random graphs decoded from the bytes, validated, read back from JSON and
#   executed on the reference engine. Seeds: tests/fuzz/seeds_exec.
FUZZ_TIME ?= 60
FUZZ_RUN = ASAN_OPTIONS=detect_leaks=1 ./$(BUILD)-fuzz/$(1) -max_total_time=$(FUZZ_TIME) -timeout=10 -print_final_stats=1 \
  -artifact_prefix=$(BUILD)-fuzz/$(1)- $(2)
fuzz: deps
	cmake -S . -B $(BUILD)-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DOPENDNN_FUZZ=ON -DOPENDNN_SANITIZE=address,undefined -DOPENDNN_BUILD_TESTS=OFF -DOPENDNN_BUILD_TOOLS=OFF >/dev/null
	cmake --build $(BUILD)-fuzz -j $(JOBS) --target fuzz_graph_json fuzz_graph_exec
	mkdir -p $(BUILD)-fuzz/corpus $(BUILD)-fuzz/corpus_exec
	$(call FUZZ_RUN,fuzz_graph_json,-max_len=65536 -dict=tests/fuzz/graph_json.dict $(BUILD)-fuzz/corpus tests/fuzz/seeds examples/graphs)
	$(call FUZZ_RUN,fuzz_graph_exec,-max_len=4096 $(BUILD)-fuzz/corpus_exec tests/fuzz/seeds_exec)
