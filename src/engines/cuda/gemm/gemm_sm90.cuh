// SPDX-License-Identifier: Apache-2.0
// The CUTLASS 3.x sm90 GEMM kernels; each gemm_*.cu instantiates one of them (OPENDNN_GEMM_KERNEL):
//   COOP       128x256x64 tiles for 16-bit types (128x128x128 for fp8, fp32 promotion), cooperative
//   PINGPONG   128x128x64, two consumer warpgroups on their own tiles (one's epilogue under the other's MMA)
//   FAST_ACCUM fp8 only: 128x256x128, cooperative, no fp32 promotion of the wgmma accumulator
//   COOP_M256  bf16 256x128x64, cooperative; PINGPONG_64X256: bf16 pingpong 64x256x64
// all with 2x1 clusters, TMA loads, wgmma, a persistent tile scheduler whose swizzle and
// raster order are run-time arguments, and an epilogue D = act(alpha * acc + bias[n] + beta * R). The activation is
// a template parameter: a run-time switch inside CUTLASS's unrolled per-element epilogue kept every
// case's code for each accumulator element (128 BRX jumps and ~186 KB of SASS a tile loop) and made
// fused bias+GELU 2.5x slower than the plain GEMM. Act::RUNTIME keeps the switch, hoisted out of the
// per-fragment loop, for the types that do not get one kernel per activation (fp16).
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

template <Act A>
__device__ __forceinline__ float act_fixed(float x, float swish_beta) {
  if constexpr (A == Act::RELU) return fmaxf(x, 0.0f);
  if constexpr (A == Act::GELU_ERF) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  if constexpr (A == Act::GELU_TANH) {
    float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
  }
  if constexpr (A == Act::SILU) return x / (1.0f + __expf(-swish_beta * x));
  return x;
}

template <Act A, int N>
__device__ __forceinline__ void act_array(cutlass::Array<float, N>& y, const cutlass::Array<float, N>& x, float beta) {
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < N; ++i) y[i] = act_fixed<A>(x[i], beta);
}

// CUTLASS's Sm90Compute hands a functor with an `Arguments` member its arguments at run time (the
// swish beta, and for Act::RUNTIME the activation itself).
template <Act A>
struct Activation {
  template <class T>
  struct Fn {
    using Arguments = ActArgs;
    __device__ float operator()(float x, const ActArgs& p) const {
      cutlass::Array<float, 1> v;
      v[0] = x;
      return Fn<cutlass::Array<float, 1>>{}(v, p)[0];
    }
  };
  template <int N>
  struct Fn<cutlass::Array<float, N>> {
    using Arguments = ActArgs;
    __device__ cutlass::Array<float, N> operator()(const cutlass::Array<float, N>& x, const ActArgs& p) const {
      if constexpr (A == Act::NONE) return x;
      cutlass::Array<float, N> y;
      if constexpr (A != Act::RUNTIME) {
        act_array<A>(y, x, p.swish_beta);
      } else {
        if (p.act == Act::NONE) return x;  // a uniform branch: the plain GEMM skips the jump table
        switch (p.act) {  // once a fragment, outside the element loop
          case Act::RELU: act_array<Act::RELU>(y, x, p.swish_beta); break;
          case Act::GELU_ERF: act_array<Act::GELU_ERF>(y, x, p.swish_beta); break;
          case Act::GELU_TANH: act_array<Act::GELU_TANH>(y, x, p.swish_beta); break;
          case Act::SILU: act_array<Act::SILU>(y, x, p.swish_beta); break;
          default: y = x;
        }
      }
      return y;
    }
  };
};

template <Elem E, Out O = Out::NATIVE>
struct Types {  // A and B; D and the residual; the bias (A's 16-bit type, bf16 for fp8)
  using AB = std::conditional_t<E == Elem::FP16, cutlass::half_t,
                                std::conditional_t<E == Elem::BF16, cutlass::bfloat16_t, cutlass::float_e4m3_t>>;
  using Bias = std::conditional_t<E == Elem::FP16, cutlass::half_t, cutlass::bfloat16_t>;
  using D = std::conditional_t<O == Out::FP32, float, Bias>;
};

// max |x| over the tile into one fp32 in global memory. CUTLASS's scalar reduction issues one
// atomic per thread and tile (256 to one address per tile); this one reduces the warp's values on
// their bits first (x >= 0 or NaN, whose bits order like unsigned integers, NaN above +inf, so a NaN
// sticks) and issues one atomic per warp. The caller zeroes the scalar before the launch.
using AmaxBase = cutlass::epilogue::fusion::Sm90ScalarReduction<cutlass::maximum_absolute_value_reduction,
                                                                cutlass::atomic_maximum, float, float,
                                                                cutlass::FloatRoundStyle::round_to_nearest>;
struct AmaxReduction : AmaxBase {
  using AmaxBase::AmaxBase;
  // No fill here: launch() zeroes the scalar on every launch (this runs only when the parameters are
  // encoded), and CUTLASS's fill calls the driver API (cuMemsetD32Async), which libopendnn does not link.
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class CTensor, class ThrResidue>
  struct Callbacks : AmaxBase::ConsumerStoreCallbacks<CTensor, ThrResidue> {
    using Base = AmaxBase::ConsumerStoreCallbacks<CTensor, ThrResidue>;
    using Base::Base;
    __device__ void end() {
      const unsigned bits = __reduce_max_sync(0xffffffffu, __float_as_uint(this->scalar));
      if (this->params.ptr_scalar != nullptr && (threadIdx.x & 31) == 0)
        atomicMax(reinterpret_cast<unsigned*>(this->params.ptr_scalar), bits);
    }
  };
  template <bool ReferenceSrc, class... Args>
  __device__ auto get_consumer_store_callbacks(cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    return Callbacks<decltype(args.tCcD), decltype(args.residue_tCcD)>(cute::get<3>(args.tile_coord_mnkl), args.tCcD,
                                                                       args.residue_tCcD, this->params);
  }
};

// The epilogue trees of the variants (gemm_kernels.h), built from CUTLASS's sm90 visitor nodes; fp32 inside.
template <template <class> class Fn, class TOut>
using Compute = cutlass::epilogue::fusion::Sm90Compute<Fn, TOut, float, cutlass::FloatRoundStyle::round_to_nearest>;
using ScalarArg = cutlass::epilogue::fusion::Sm90ScalarBroadcast<float, cute::Stride<cute::_0, cute::_0, int64_t>>;

// D = act(alpha * acc + bias[n]) * C, C (the source) being the up projection.
template <template <class> class ActFn, class TD, class TBias, class Tile>
struct GatedFusion {
  using Linear = cutlass::epilogue::fusion::Sm90EVT<
      Compute<cutlass::homogeneous_multiply_add, float>, ScalarArg, cutlass::epilogue::fusion::Sm90AccFetch,
      cutlass::epilogue::fusion::Sm90RowBroadcast<0, Tile, TBias, float, cute::Stride<cute::_0, cute::_1, int64_t>>>;
  using Activated = cutlass::epilogue::fusion::Sm90EVT<Compute<ActFn, float>, Linear>;
  using Tree = cutlass::epilogue::fusion::Sm90EVT<Compute<cutlass::multiplies, TD>, Activated,
                                                 cutlass::epilogue::fusion::Sm90SrcFetch<TD>>;
  static typename Tree::Arguments arguments(const Args& a) {
    typename Tree::Arguments t{};
    auto& lin = t.op_0.op_0;
    lin.op_0.scalars[0] = a.alpha;
    lin.op_2.ptr_row = static_cast<const TBias*>(a.bias);
    t.op_0.op_1 = a.act;
    return t;
  }
};

// fp8: D = scale_C * Z with Z = descale_A * descale_B * acc, and amax = max |Z|.
template <class TD>
struct AmaxFusion {
  using Descaled = cutlass::epilogue::fusion::Sm90EVT<
      Compute<cutlass::multiplies, float>,
      cutlass::epilogue::fusion::Sm90ScalarBroadcast<float, cute::Stride<cute::_0, cute::_0, int64_t>, 2>,
      cutlass::epilogue::fusion::Sm90AccFetch>;
  using Tree = cutlass::epilogue::fusion::Sm90EVT<Compute<cutlass::multiplies, TD>, ScalarArg,
                                                 cutlass::epilogue::fusion::Sm90EVT<AmaxReduction, Descaled>>;
  static typename Tree::Arguments arguments(const Args& a) {
    typename Tree::Arguments t{};
    t.op_0.scalars[0] = 1.0f;
    t.op_0.scalar_ptrs[0] = a.scale[2];
    auto& z = t.op_1.op_0;
    z.op_0.scalars[0] = z.op_0.scalars[1] = 1.0f;
    z.op_0.scalar_ptrs[0] = a.scale[0];
    z.op_0.scalar_ptrs[1] = a.scale[1];
    t.op_1.op_1.ptr_scalar = a.amax;
    return t;
  }
};

// The builder's fusion: CUTLASS's fusion operation for PLAIN, a variant's tree otherwise (named only
// where it exists, so the plain kernels never instantiate a tree).
template <bool kPlain, class Plain, class Variant>
struct PickFusion {
  using type = Plain;
};
template <class Plain, class Variant>
struct PickFusion<false, Plain, Variant> {
  using type = typename Variant::Tree;
};

// Tile, cluster and schedules of a Config. fp8 COOP keeps a second fp32 accumulator (promotion every few
// k-blocks): 128x256 would spill there, 128x128 fits; FAST_ACCUM drops the promotion to afford 128x256.
// fp8 PINGPONG is 64x128x128, each consumer warpgroup on its own tile with COOP's 64x128 accumulator pair
// (64 + 64 registers a thread); at 128x128 the pair takes 256 registers a thread and ptxas spilled ~1 KB a
// thread inside the mainloop. One warpgroup's epilogue hides under the other's MMA.
// PINGPONG_64X256 gives each warpgroup a 64x256 tile: the same 128 accumulator registers and, with B
// multicast in the 2x1 cluster, the same L2 bytes a stage as 128x128 (8 + 32/2 KB against 16 + 16/2), but
// one m64n256k16 wgmma reads 10 KB of shared memory where two m64n128k16 read 12 KB for the same work.
// COOP_M256 is 256x128: cuBLAS's usual Hopper tile for large bf16 problems. The 2x1 cluster shares
// (multicasts) the larger B tile of COOP between two M neighbours. (Stream-K and 1x2 / 2x2 clusters ran
// slower than this everywhere on the H200, session 5, and are gone.)
template <Config C, bool kFp8>
struct Schedule {
  static constexpr int kM = C == Config::COOP_M256                                           ? 256
                            : (C == Config::PINGPONG && kFp8) || C == Config::PINGPONG_64X256 ? 64
                                                                                              : 128;
  static constexpr int kN = C == Config::PINGPONG || C == Config::COOP_M256 || (C == Config::COOP && kFp8) ? 128 : 256;
  using Tile = cute::Shape<cute::Int<kM>, cute::Int<kN>, cute::Int<kFp8 ? 128 : 64>>;
  using Cluster = cute::Shape<cute::_2, cute::_1, cute::_1>;
  static constexpr bool kPingpong = C == Config::PINGPONG || C == Config::PINGPONG_64X256;
  using Mainloop = std::conditional_t<
      kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
      std::conditional_t<C == Config::FAST_ACCUM, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum,
                         cutlass::gemm::KernelTmaWarpSpecializedCooperative>>;
  using Epilogue = std::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                      cutlass::epilogue::TmaWarpSpecializedCooperative>;
  // void: CUTLASS's persistent scheduler with the swizzle and raster of Args.
  using TileScheduler = void;
  static_assert(C != Config::FAST_ACCUM || kFp8, "FAST_ACCUM is an fp8 mainloop");
  static_assert(kFp8 ? C == Config::COOP || C == Config::PINGPONG || C == Config::FAST_ACCUM : C != Config::FAST_ACCUM,
                "fp8 has COOP, PINGPONG and FAST_ACCUM; the others are 16-bit tiles");
};

// An fp8 A/B takes the scaled epilogue (alpha times the three device scalars of Args::scale).
template <Elem E, bool BKMajor, Act A, Config C, Epi X = Epi::PLAIN, Out O = Out::NATIVE>
struct Sm90Gemm {
  static constexpr bool kScaled = E == Elem::FP8_E4M3;
  static_assert(X != Epi::AMAX || (kScaled && A == Act::NONE), "AMAX is the fp8 epilogue without activation");
  using TAB = typename Types<E, O>::AB;
  using TD = typename Types<E, O>::D;
  using TBias = typename Types<E, O>::Bias;
  using Sched = Schedule<C, kScaled>;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = std::conditional_t<BKMajor, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignAB = 16 / sizeof(TAB), kAlignD = 16 / sizeof(TD);
  using Tile = typename Sched::Tile;
  using Cluster = typename Sched::Cluster;
  template <class T>
  using ActFn = typename Activation<A>::template Fn<T>;
  using Plain = std::conditional_t<
      kScaled, cutlass::epilogue::fusion::ScaledLinCombPerColBiasEltAct<ActFn, TD, float, TBias, TD, float>,
      cutlass::epilogue::fusion::LinCombPerColBiasEltAct<ActFn, TD, float, TBias, TD, float>>;
  // The variants hand the builder an epilogue tree instead of a fusion operation.
  using Variant = std::conditional_t<X == Epi::GATED, GatedFusion<ActFn, TD, TBias, Tile>, AmaxFusion<TD>>;
  using Fusion = typename PickFusion<X == Epi::PLAIN, Plain, Variant>::type;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, TD, LayoutD, kAlignD, TD, LayoutD, kAlignD,
      typename Sched::Epilogue, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TAB, LayoutA, kAlignAB, TAB, LayoutB, kAlignAB, float, Tile,
      Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      typename Sched::Mainloop>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      typename Sched::TileScheduler>;
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
    if constexpr (kScaled && C != Config::FAST_ACCUM) args.mainloop.mma_promotion_interval = uint32_t(a.fp8_promotion);
    using Order = cutlass::gemm::kernel::detail::RasterOrderOptions;
    args.scheduler.max_swizzle_size = a.swizzle;
    args.scheduler.raster_order = a.raster == Raster::ALONG_M   ? Order::AlongM
                                  : a.raster == Raster::ALONG_N ? Order::AlongN
                                                                : Order::Heuristic;
    if constexpr (X != Epi::PLAIN) {
      args.epilogue.thread = Variant::arguments(a);
    } else {
      auto& f = args.epilogue.thread;
      f.alpha = a.alpha;
      f.beta = res ? a.beta : 0.0f;
      f.bias_ptr = static_cast<const TBias*>(a.bias);
      f.activation = a.act;
      if constexpr (kScaled) {
        // Z = scale_a * scale_b * alpha * acc + ...: alpha's pointer carries the third scalar.
        f.scale_a_ptr = a.scale[0];
        f.scale_b_ptr = a.scale[1];
        f.alpha_ptr = a.scale[2];
      }
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

template <Elem E, bool BKMajor, Act A, Config C>
const char* run(const Args& a, void* workspace, int sm_count, void* stream, LaunchCache* cache, int64_t* ws_query) {
  return Sm90Gemm<E, BKMajor, A, C>::run(a, workspace, sm_count, stream, cache, ws_query);
}

template <Elem E, bool BKMajor, Act A, Config C, Epi X, Out O>
const char* run(const Args& a, void* workspace, int sm_count, void* stream, LaunchCache* cache, int64_t* ws_query) {
  return Sm90Gemm<E, BKMajor, A, C, X, O>::run(a, workspace, sm_count, stream, cache, ws_query);
}

}  // namespace opendnn::cuda::gemm

// The body of a gemm_*.cu: the explicit instantiation of one kernel that gemm_kernels.cpp dispatches to.
#define OPENDNN_GEMM_KERNEL(E, BK, A, C)                                                                         \
  template const char* opendnn::cuda::gemm::run<opendnn::cuda::gemm::Elem::E, BK, opendnn::cuda::gemm::Act::A, \
                                                opendnn::cuda::gemm::Config::C>(                                \
      const opendnn::cuda::gemm::Args&, void*, int, void*, opendnn::cuda::gemm::LaunchCache*, int64_t*);
// A variant (gemm_kernels.h): epilogue X, output type O.
#define OPENDNN_GEMM_KERNEL_VARIANT(E, BK, A, C, X, O)                                                     \
  template const char* opendnn::cuda::gemm::run<                                                           \
      opendnn::cuda::gemm::Elem::E, BK, opendnn::cuda::gemm::Act::A, opendnn::cuda::gemm::Config::C,       \
      opendnn::cuda::gemm::Epi::X, opendnn::cuda::gemm::Out::O>(                                           \
      const opendnn::cuda::gemm::Args&, void*, int, void*, opendnn::cuda::gemm::LaunchCache*, int64_t*);
