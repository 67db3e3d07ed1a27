// SPDX-License-Identifier: Apache-2.0
// GDN and GDN_BWD: gated delta net linear attention (see shared/reference/gated_delta_net.md).
// THD token-packed: q [T, H, K], k [T, HK, K], v [T, HV, V], g and beta [T, HO] with HO = max(H, HV),
// cu_seqlens [N+1]; state [N, HO, V, K] (V-major, as cuDNN Frontend stores it), fp32 or bf16.
#include "ops/infer_util.h"
#include "ops/op_defs.h"

namespace opendnn {
namespace {

const PortSpec kFwdIn[] = {{"q"}, {"k"}, {"v"}, {"g"}, {"beta"}, {"cu_seqlens"},
                           {"initial_state", false}, {"state_indices", false}, {"a_log", false}, {"dt_bias", false}};
const PortSpec kFwdOut[] = {{"O"}, {"final_state", false}, {"state_checkpoints", false}};
const AttrSpec kAttrs[] = {
    {"scale", AttrType::FLOAT, {}},  // default 1/sqrt(K)
    {"output_final_state", AttrType::BOOL, false},
    {"use_qk_l2norm", AttrType::BOOL, false},
    {"use_beta_sigmoid", AttrType::BOOL, false},
    {"allow_neg_eigval", AttrType::BOOL, false},
    {"safe_gate", AttrType::BOOL, false},
    {"gate_domain", AttrType::ENUM, "log", "log|linear"},
    {"batch_invariant", AttrType::BOOL, false},
    {"overwrite_initial_state", AttrType::BOOL, false},
    {"checkpoint_every_n_tokens", AttrType::INT, 0},
};
const PortSpec kBwdIn[] = {{"q"}, {"k"}, {"v"}, {"g"}, {"beta"}, {"cu_seqlens"}, {"dO"},
                           {"state_checkpoints", false}, {"initial_state", false}, {"d_final_state", false},
                           {"a_log", false}, {"dt_bias", false}};
const PortSpec kBwdOut[] = {{"dQ"}, {"dK"}, {"dV"}, {"dG"}, {"dBeta"},
                            {"d_initial_state", false}, {"d_a_log", false}, {"d_dt_bias", false}};

}  // namespace

const OpDef def_GDN = {kFwdIn, kFwdOut, kAttrs, nullptr};
const OpDef def_GDN_BACKWARD = {kBwdIn, kBwdOut, kAttrs, nullptr};

}  // namespace opendnn
