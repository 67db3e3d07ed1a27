#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Assembles the git-ignored folders that a device call carries (`carry: [".carry", ".whl"]`): the device
# image lacks nlohmann-json, CLI11, GoogleTest, cuDNN headers and the CuTe/CUTLASS headers, and has no internet
# for flash-linear-attention (the GDN peer). Run once per fresh checkout, from the repository root.
set -euo pipefail
make deps >/dev/null
rm -rf .carry && mkdir -p .carry/cudnn/include .carry/cudnn/share/cmake .carry/cudnn/lib/x86_64-linux-gnu/cmake .carry/cutlass .whl
# Same layout as /usr, so the packages' CMake configs (which locate files relative to themselves) resolve.
cp -r /usr/include/nlohmann /usr/include/gtest /usr/include/gmock /usr/include/CLI .carry/cudnn/include/
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 .carry/cudnn/share/cmake/  # CLI11: the opendnn tool
cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a .carry/cudnn/lib/x86_64-linux-gnu/
cp -r /usr/lib/x86_64-linux-gnu/cmake/GTest .carry/cudnn/lib/x86_64-linux-gnu/cmake/
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
cp "$cuda_inc"/cudnn*.h .carry/cudnn/include/
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps -d "$tmp" nvidia-cutlass==4.2.0.0
python3 -m zipfile -e "$tmp"/nvidia_cutlass-*.whl "$tmp/x"
cp -r "$tmp"/x/cutlass_library/source/include .carry/cutlass/
python3 -m pip download -q --no-deps -d .whl flash-linear-attention==0.6.0 fla-core==0.6.0
rm -rf "$tmp"
du -sh .carry .whl
