# SPDX-License-Identifier: Apache-2.0
"""cuDNN Frontend's ``cudnn.experimental.ops`` over opendnn graphs (imports torch).

``scaled_dot_product_attention`` follows ``torch.nn.functional.scaled_dot_product_attention`` and is a
thin layer over ``opendnn.ops.sdpa`` (autograd and torch.compile included); ``moe_grouped_matmul`` runs
the moe_grouped_matmul graph op (forward only).
"""

from typing import Optional

import torch
from torch import Tensor

from .. import ops as _ops
from ..enums import diagonal_alignment as _alignment

__all__ = ["scaled_dot_product_attention", "moe_grouped_matmul"]

# The built graphs (shared with opendnn.ops; clear with opendnn.ops.clear_cache()).
_fprop_cache = _ops._CACHE
_bprop_cache = _ops._CACHE


def _unsupported(what, why):
    raise _ops.NotSupportedError(f"opendnn.experimental.ops.{what}: not supported: {why}")


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, diagonal_alignment=0, left_bound=-1, right_bound=-1,
                                 seq_len_q=None, seq_len_kv=None, cumulative_seq_len_q=None,
                                 cumulative_seq_len_kv=None):
    """Attention of query [B, Hq, Sq, D], key [B, Hk, Skv, D], value [B, Hv, Skv, Dv] (fp16/bf16).
    diagonal_alignment 0 (top left) or 1 (bottom right); left_bound/right_bound -1 mean no bound;
    is_causal sets right_bound 0. Heads of key/value fewer than query's need enable_gqa=True."""
    what = "scaled_dot_product_attention"
    if attn_mask is not None:
        _unsupported(what, "attn_mask (use is_causal or left_bound/right_bound)")
    if dropout_p:
        _unsupported(what, f"dropout_p={dropout_p} (only 0.0)")
    for name, v in (("seq_len_q", seq_len_q), ("seq_len_kv", seq_len_kv), ("cumulative_seq_len_q", cumulative_seq_len_q),
                    ("cumulative_seq_len_kv", cumulative_seq_len_kv)):
        if v is not None:
            _unsupported(what, f"{name} (padded and packed sequences)")
    if not enable_gqa and isinstance(query, Tensor) and isinstance(key, Tensor) and isinstance(value, Tensor):
        if query.dim() == 4 and (key.shape[1] != query.shape[1] or value.shape[1] != query.shape[1]):
            raise ValueError(f"{what}: query has {query.shape[1]} heads but key/value have {key.shape[1]}/"
                             f"{value.shape[1]}; pass enable_gqa=True for grouped-query attention")
    align = _alignment(int(diagonal_alignment)).name
    left = None if left_bound is None or left_bound < 0 else int(left_bound)
    right = None if right_bound is None or right_bound < 0 else int(right_bound)
    return _ops.sdpa(query, key, value, attn_scale=scale, is_causal=bool(is_causal), diagonal_alignment=align,
                     left_bound=left, right_bound=right)


_MOE_MODES = ("none", "gather", "scatter")


def _moe_shape(token, weight, mode, top_k):
    rows = token.shape[-2] * (top_k if mode == "gather" else 1)
    return tuple(token.shape[:-2]) + (rows, weight.shape[-1])


@torch.library.custom_op("opendnn::moe_grouped_matmul", mutates_args=())
def _moe(token: Tensor, weight: Tensor, first_token_offset: Tensor, token_index: Optional[Tensor],
         token_ks: Optional[Tensor], mode: str, top_k: int) -> Tensor:
    out = torch.empty(_moe_shape(token, weight, mode, top_k), dtype=token.dtype, device=token.device)
    opt = [t for t in (token_index, token_ks) if t is not None]
    key = ("moe_grouped_matmul", _ops._device_key(token.device), _ops._sig(token), _ops._sig(weight),
           _ops._sig(first_token_offset), _ops._sig(token_index), _ops._sig(token_ks), mode, top_k)

    def make(g):
        T, W, F = (_ops._tensor(g, x, n) for x, n in ((token, "token"), (weight, "weight"),
                                                    (first_token_offset, "first_token_offset")))
        I = _ops._tensor(g, token_index, "token_index") if token_index is not None else None
        K = _ops._tensor(g, token_ks, "token_ks") if token_ks is not None else None
        O = g.moe_grouped_matmul(T, W, F, I, K, mode=mode.upper(), top_k=top_k, name="moe_grouped_matmul")
        return [T, W, F] + [t for t in (I, K) if t is not None] + [_ops._bind(O, out)]

    entry = _ops._entry("moe_grouped_matmul", key, token.device, make, token.dtype)
    _ops._run(entry, [token, weight, first_token_offset] + opt + [out], token.device)
    return out


@_moe.register_fake
def _moe_fake(token, weight, first_token_offset, token_index, token_ks, mode, top_k):
    return torch.empty(_moe_shape(token, weight, mode, top_k), dtype=token.dtype, device=token.device)


def moe_grouped_matmul(token, weight, first_token_offset, token_index=None, token_ks=None, mode="none", top_k=1):
    """Grouped matmul of routed rows of token [T, K] (or [1, T, K]) with per-expert weight [E, K, N];
    first_token_offset [E] gives each expert's first routed row. mode "none", "gather" (token_index
    picks the token row of each of T*top_k routed rows) or "scatter" (token_index, token_ks place each
    routed row). Returns [R, N] in token's dtype."""
    m = str(getattr(mode, "name", mode)).lower()
    if m not in _MOE_MODES:
        raise ValueError(f"moe_grouped_matmul: mode must be one of {_MOE_MODES}, got {mode!r}")
    if int(top_k) < 1:
        raise ValueError(f"moe_grouped_matmul: top_k must be >= 1, got {top_k}")
    return torch.ops.opendnn.moe_grouped_matmul(token, weight, first_token_offset, token_index, token_ks, m, int(top_k))
