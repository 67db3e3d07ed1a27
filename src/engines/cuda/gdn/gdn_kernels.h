// SPDX-License-Identifier: Apache-2.0
// Gated delta net forward on Hopper (chunked WY/UT formulation, chunk size 64), behind a small C++
// launch API so the adapter never sees CUDA templates. Semantics: src/engines/reference/gdn.cpp.
// THD: q, k [T, H, D], v [T, HV, V], g and beta [T, HO], O [T, HO, V], all packed; states
// [N, HO, V, K] with arbitrary element strides (torch passes transposed [N, HO, K, V] views).
#pragma once

#include <cstdint>

#include "opendnn/types.h"

namespace opendnn::cuda::gdn {

inline constexpr int kChunk = 64;

struct FwdArgs {
  DataType io = DataType::BFLOAT16;  // q, k, v, O: HALF or BFLOAT16
  DataType g_type = DataType::FLOAT, beta_type = DataType::FLOAT;
  bool cu_int64 = false;
  DataType init_type = DataType::FLOAT, final_type = DataType::FLOAT;  // FLOAT or BFLOAT16
  int64_t t = 0, n = 0, h = 0, hv = 0, ho = 0, k = 0, v = 0;
  float scale = 1.f;
  bool l2norm = false;
  int bv = 64;  // V columns of the state per CTA of the sequential pass (chosen by choose_bv)
  // The sequential pass with the state in mma.sync registers (choose_bv_mma picks bv); the default,
  // OPENDNN_GDN_FWD_V2=0 withholds it (set by the adapter).
  bool mma_pass = false;
  // chunk_prep_mma instead of chunk_prep (tensor-core products, K K^T / Q K^T shared by the output
  // heads of a q/k head); the default, OPENDNN_GDN_PREP_V2=0 withholds it.
  bool mma_prep = false;
  // The split register-state pass (choose_split sets bv and seg_chunks), taken where the unsplit grid
  // leaves half the SMs idle; OPENDNN_GDN_SPLIT=1/0 forces it. Sequences are cut into segments of seg_chunks
  // chunks that run in parallel: see state_pass_mma and split_combine in gdn_kernels.cu.
  bool split = false;
  int seg_chunks = 0;
  // v3's chunk_prep (the default; OPENDNN_GDN_PREP_V3=0 withholds it; needs mma_prep and the register-state
  // pass, split or not):
  // chunk_prep_mma writes Tu = T diag(beta) instead of W and U (the pass forms v' from v and Tu) and the
  // pass's per-row fp32 scales (gates, scale, inverse l2 norms: no exp left in the pass's loop but one),
  // normalises q and k itself (no l2_rows pass, no normalised copies: the pass reads the raw rows) and
  // loads the next output head's gates while the current head computes. Ignored with keep (the backward
  // reads W, U and the normalised copies).
  bool prep_v3 = false;
  // The register-state pass keeps this many chunks in flight (cp.async stages): 3 where shared memory
  // allows (the default; OPENDNN_GDN_PASS_V3=0 keeps 2), else 2.
  int stages = 2;
  // v4 (the default; OPENDNN_GDN_FWD_V4=0 withholds it; with prep_v3 and bv a multiple of 64, else ignored): the v3
  // register-state pass with its chunk products as wgmma (one warpgroup per 64 state columns, the B
  // tiles read from 128-byte-swizzled shared memory) instead of ldmatrix + mma.sync. See state_pass_mma.
  bool wg = false;
  // The chunked backward's recompute: no output; chunk_prep_mma also keeps the inverse T and the
  // register-state pass (kStates) the state entering every chunk and v' (see FwdSaved). Needs
  // mma_prep and mma_pass, not split. stages >= 3 with keep (the backward's v3): the kStates pass with three
  // chunk stages where they fit shared memory, else two.
  bool keep = false;
  const void *q = nullptr, *kk = nullptr, *vv = nullptr, *g = nullptr, *beta = nullptr, *cu = nullptr;
  const void* init = nullptr;  // may be null (zero initial state)
  void* o = nullptr;
  void* fin = nullptr;  // may be null
  int64_t init_stride[4] = {0, 0, 0, 0}, fin_stride[4] = {0, 0, 0, 0};  // n, head, v, k (elements)
};

// Head dims the kernels take: multiples of 16 up to 256.
bool supported_dims(int64_t k, int64_t v);
// Picks the state slice width so that N*HO*(V/bv) CTAs fill the GPU where they can.
int choose_bv(const FwdArgs& a, int sm_count);
// The register-state pass: K in {64, 128}, V a multiple of 16 up to 256.
bool mma_pass_supported(int64_t k, int64_t v);
// The state slice width (16/32/64 of V's columns) of the sequential passes, forward and backward.
int widest_state_slice(int64_t v, int64_t sequences_x_heads, int sm_count);
int choose_bv_mma(const FwdArgs& a, int sm_count);
// The split pass takes what the register-state pass takes; sets a.bv and a.seg_chunks. False (the
// split does not apply) when its per-segment summaries would take more than 1 GiB of workspace.
bool choose_split(FwdArgs& a, int sm_count);
// chunk_prep_mma: K and V in {64, 128}.
bool mma_prep_supported(int64_t k, int64_t v);
int64_t forward_workspace_bytes(const FwdArgs& a);
// Where the forward left its per-chunk quantities in `workspace` (io-type tensors unless noted).
struct FwdSaved {
  const int* table;   // [bound][2] (sequence, first token) of each chunk; sequence -1 past the end
  const float* gam;   // [T, HO] within-chunk cumulative log gate (fp32)
  const void *w, *u;  // [T, HO, K], [T, HO, V]
  const void* aqk;    // [T, HO, 64] scale * (Q K^T masked and decayed), row r holds columns c <= r
  const void *q, *k;  // q and k as the kernels read them (the l2-normalised copies with l2norm)
  const void* tmat;   // keep: [T, HO, 64] the inverse T = (I + A)^-1, lower triangular, unit diagonal
  const void* states; // keep: [T/64 + N, HO, V, K] the state entering chunk c of sequence s at row cu[s]/64 + s + c
  const void* vn;     // keep: [T, HO, V] v' = U - W S
  int64_t bound;      // chunk table rows
  // split (the recompute as segments): the segment table [seg_bound] (sequence, first token), the segments'
  // [V + K, K] fp32 slots per head (free once the recompute is done: the backward's own summaries reuse them),
  // chunks a segment, and the split's state-slice width.
  bool split;
  const int* segtab;  // [seg_bound][2], as table
  float* seg;
  int64_t seg_bound;
  int seg_chunks, seg_bv;
};
FwdSaved forward_saved(const FwdArgs& a, void* workspace);
// The split's combine walked from each sequence's last segment back to its second: slot g's state rows become
// D_g = D_{g+1} M_g + R_g, with R_g in rows 0..V-1 and M_g's rows in rows V.. (the backward's reverse
// recurrence, see state_bwd in gdn_bwd_chunked.cu). a as passed to launch_forward, with split set.
const char* launch_split_combine_reverse(const FwdArgs& a, void* workspace, void* stream);
// Launch on `stream` (a cudaStream_t); workspace holds forward_workspace_bytes. Returns a CUDA
// error string or nullptr.
const char* launch_forward(const FwdArgs& a, void* workspace, void* stream);

// Backward: a token-exact reverse sweep (the reference recurrence differentiated step by step) per
// (sequence, output head) on a persistent grid, with fp32 states checkpointed every 64 tokens and
// the states inside a chunk recomputed into a per-CTA scratch. Correct first; not yet chunked.
struct BwdArgs {
  DataType io = DataType::BFLOAT16;
  DataType g_type = DataType::FLOAT, beta_type = DataType::FLOAT;
  bool cu_int64 = false;
  DataType init_type = DataType::FLOAT, dfin_type = DataType::FLOAT, dinit_type = DataType::FLOAT;
  int64_t t = 0, n = 0, h = 0, hv = 0, ho = 0, k = 0, v = 0;
  float scale = 1.f;
  bool l2norm = false;
  int grid = 132;  // persistent CTAs of the sweep (one per SM)
  // The chunked backward (gdn_bwd_chunked.cu) instead of the token-exact sweep; offered by default
  // (OPENDNN_GDN_BWD_CHUNKED=0 withholds it). bv: V columns of the reverse pass's CTAs.
  bool chunked = false;
  int bv = 64;
  // The backward's v3 (set by the adapter; on unless OPENDNN_GDN_BWD_V3=0): three chunk stages in the two
  // sequential passes, the recompute's register-state pass (kStates) and state_bwd, where shared memory allows
  // and the deeper ring does not cost an SM a co-resident CTA (see deep_ring in gdn_bwd_chunked.cu); and the
  // lean post (no dv rows when chunk_bwd_v2 wrote dv, 8-byte q/k/dq/dk accesses; see post in gdn_bwd_kernels.cu).
  bool v3 = false;
  // The token-exact sweep with M's rows (S's value columns) split into slices that run as separate work items,
  // for K * V > 16384 where the whole fp32 state and its gradient do not fit shared memory; set by the adapter
  // there unless OPENDNN_GDN_BWD_SLICED=0. See gdn_bwd_kernels.cu.
  bool sliced = false;
  // The chunked backward's two sequential passes split into segments that run in parallel, where the unsplit
  // ones leave half the SMs idle (few heads): the recompute as the forward's sequence split (kApplyStates
  // re-running each segment), and state_bwd's reverse walk the same way mirrored (kBwdSummary, the reverse
  // combine, kBwdApply; see gdn_bwd_chunked.cu). OPENDNN_GDN_BWD_SPLIT=0 withholds it.
  bool split = false;
  const void *q = nullptr, *kk = nullptr, *vv = nullptr, *g = nullptr, *beta = nullptr, *cu = nullptr;
  const void* d_o = nullptr;
  const void* init = nullptr;  // may be null
  const void* dfin = nullptr;  // may be null
  void *dq = nullptr, *dk = nullptr, *dv = nullptr, *dg = nullptr, *dbeta = nullptr;  // packed like their inputs
  void* dinit = nullptr;  // may be null
  int64_t init_stride[4] = {0, 0, 0, 0}, dfin_stride[4] = {0, 0, 0, 0}, dinit_stride[4] = {0, 0, 0, 0};
};

// The sweep keeps the V x K state and its gradient in fp32 shared memory: K * V <= 16384.
bool backward_supported_dims(int64_t k, int64_t v);
// The sliced sweep (BwdArgs::sliced) keeps a slice of the state's rows instead: K and V up to 256.
bool sliced_backward_supported_dims(int64_t k, int64_t v);
// Work items of the sweep per (sequence, output head): its V-slices, 1 unless sliced.
int backward_sweep_slices(const BwdArgs& a);
int64_t backward_workspace_bytes(const BwdArgs& a);
const char* launch_backward(const BwdArgs& a, void* workspace, void* stream);
// The per-output-head gradients of q~, k~ (after normalisation) and v, [T, HO, K|V] (dq/dk fp32, or the
// io type when qk_io; dv fp32), summed over the heads that read each q/k/v head, through the l2norm
// backward, into a.dq, a.dk, a.dv; zero dg and dbeta outside every sequence. des == nullptr: dv of the
// tokens inside the sequences is already in a.dv. Both backwards end with it.
const char* launch_backward_post(const BwdArgs& a, const void* dqs, const void* dks, const float* des, bool qk_io,
                                 void* stream);

// The chunked backward: K and V in {64, 128}.
bool chunked_backward_supported(int64_t k, int64_t v);
int choose_bv_backward(const BwdArgs& a, int sm_count);
int64_t chunked_backward_workspace_bytes(const BwdArgs& a);
const char* launch_backward_chunked(const BwdArgs& a, void* workspace, void* stream);

}  // namespace opendnn::cuda::gdn
