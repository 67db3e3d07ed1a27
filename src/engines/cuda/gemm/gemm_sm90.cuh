// SPDX-License-Identifier: Apache-2.0
// The one CUTLASS 3.x sm90 GEMM configuration every gemm_<type>_<layout>.cu instantiates once:
// 128x256x64 tiles for 16-bit types (128x128x128 for fp8), 2x1 clusters, TMA loads, wgmma,
// cooperative warp-specialized persistent kernel, and an epilogue
// D = act(alpha * acc + bias[n] + beta * R) whose activation is picked at run time, so one
// instantiation serves every fused epilogue.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "engines/cuda/gemm/gemm_kernels.h"

namespace opendnn::cuda::gemm {

__device__ __forceinline__ float act_one(float x, const ActArgs& p) {
  switch (p.act) {
    case Act::NONE: return x;
    case Act::RELU: return fmaxf(x, 0.0f);
    case Act::GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case Act::GELU_TANH: {
      float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + tanhf(u));
    }
    case Act::SILU: return x / (1.0f + __expf(-p.swish_beta * x));
  }
  return x;
}

// CUTLASS's Sm90Compute hands a functor with an `Arguments` member its arguments at run time; the
// activation stays a run-time switch (uniform across the grid) instead of one kernel per activation.
template <class T>
struct RuntimeAct {
  using Arguments = ActArgs;
  __device__ float operator()(float x, const ActArgs& p) const { return act_one(x, p); }
};

template <int N>
struct RuntimeAct<cutlass::Array<float, N>> {
  using Arguments = ActArgs;
  __device__ cutlass::Array<float, N> operator()(const cutlass::Array<float, N>& x, const ActArgs& p) const {
    cutlass::Array<float, N> y;
    if (p.act == Act::NONE) return x;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) y[i] = act_one(x[i], p);
    return y;
  }
};

// TAB: the type of A and B; TD: of D, the residual and the bias. An fp8 TAB takes the scaled epilogue
// (alpha times the three device scalars of Args::scale).
template <class TAB, class TD, bool BKMajor>
struct Sm90Gemm {
  static constexpr bool kScaled = sizeof(TAB) == 1;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = std::conditional_t<BKMajor, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignAB = 16 / sizeof(TAB), kAlignD = 16 / sizeof(TD);
  // fp8 keeps a second fp32 accumulator (promotion every few k-blocks): 128x256 would spill, 128x128 fits.
  using Tile = cute::Shape<cute::_128, cute::Int<kScaled ? 128 : 256>, cute::Int<128 / sizeof(TAB)>>;
  using Cluster = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using Fusion = std::conditional_t<
      kScaled, cutlass::epilogue::fusion::ScaledLinCombPerColBiasEltAct<RuntimeAct, TD, float, TD, TD, float>,
      cutlass::epilogue::fusion::LinCombPerColBiasEltAct<RuntimeAct, TD, float, TD, TD, float>>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, TD, LayoutD, kAlignD, TD, LayoutD, kAlignD,
      cutlass::epilogue::TmaWarpSpecializedCooperative, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TAB, LayoutA, kAlignAB, TAB, LayoutB, kAlignAB, float, Tile,
      Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Device::Arguments arguments(const Args& a, int sm_count) {
    typename Kernel::StrideA sa{};
    typename Kernel::StrideB sb{};
    typename Kernel::StrideD sd{};
    typename Kernel::StrideC sc{};
    cute::get<0>(sa) = a.lda;
    cute::get<2>(sa) = a.batch_a;
    if constexpr (BKMajor) cute::get<0>(sb) = a.ldb;  // (N, K, L): n strides ldb, k is contiguous
    else cute::get<1>(sb) = a.ldb;                    // k strides ldb, n is contiguous
    cute::get<2>(sb) = a.batch_b;
    cute::get<0>(sd) = a.ldd;
    cute::get<2>(sd) = a.batch_d;
    // Without a residual the source is never read (beta = 0); D stands in for its address.
    const bool res = a.residual != nullptr;
    cute::get<0>(sc) = res ? a.ldr : a.ldd;
    cute::get<2>(sc) = res ? a.batch_r : a.batch_d;
    cutlass::KernelHardwareInfo hw;
    hw.sm_count = sm_count;
    typename Device::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {int(a.M), int(a.N), int(a.K), int(a.L)},
        {static_cast<const TAB*>(a.a), sa, static_cast<const TAB*>(a.b), sb},
        {{}, static_cast<const TD*>(res ? a.residual : a.d), sc, static_cast<TD*>(a.d), sd},
        hw};
    auto& f = args.epilogue.thread;
    f.alpha = a.alpha;
    f.beta = res ? a.beta : 0.0f;
    f.bias_ptr = static_cast<const TD*>(a.bias);
    f.activation = a.act;
    if constexpr (kScaled) {
      // Z = scale_a * scale_b * alpha * acc + ...: alpha's pointer carries the third scalar.
      f.scale_a_ptr = a.scale[0];
      f.scale_b_ptr = a.scale[1];
      f.alpha_ptr = a.scale[2];
    }
    return args;
  }

  using Params = typename Kernel::Params;
  static_assert(sizeof(Params) <= LaunchCache::kBytes, "LaunchCache too small for this kernel's parameters");
  static_assert(std::is_trivially_copyable_v<Params>, "the kernel parameters are copied into a LaunchCache");

  // The dynamic shared memory opt-in, once per process (it is a per-function attribute).
  static cudaError_t allow_smem() {
    static const cudaError_t e = cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      int(Kernel::SharedStorageSize));
    return e;
  }

  static const char* run(const Args& a, void* workspace, int sm_count, void* stream, LaunchCache* cache,
                         int64_t* ws_query) {
    auto s = static_cast<cudaStream_t>(stream);
    if (ws_query || !cache->matches(a, workspace)) {
      typename Device::Arguments args = arguments(a, sm_count);
      if (ws_query) {
        *ws_query = int64_t(Device::get_workspace_size(args));
        return nullptr;
      }
      if (Device::can_implement(args) != cutlass::Status::kSuccess) return "CUTLASS cannot implement this problem";
      if (Kernel::initialize_workspace(args, workspace, s) != cutlass::Status::kSuccess)
        return "CUTLASS GEMM workspace initialisation failed";
      *reinterpret_cast<Params*>(cache->params) = Kernel::to_underlying_arguments(args, workspace);
      cache->remember(a, workspace);
    }
    if (cudaError_t e = allow_smem(); e != cudaSuccess) return cudaGetErrorString(e);
    if (Device::run(*reinterpret_cast<Params*>(cache->params), s) != cutlass::Status::kSuccess) {
      cudaError_t e = cudaGetLastError();
      return e != cudaSuccess ? cudaGetErrorString(e) : "CUTLASS GEMM launch failed";
    }
    return nullptr;
  }
};

}  // namespace opendnn::cuda::gemm
