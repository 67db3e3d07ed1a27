# SPDX-License-Identifier: Apache-2.0
"""A small language model built on opendnn's torch ops, trained for a few steps under
DistributedDataParallel, checked against one process training on the concatenated batch.

    torchrun --nproc-per-node=2 tests/distributed/ddp_train.py            # NCCL, one GPU per process
    torchrun --nproc-per-node=2 tests/distributed/ddp_train.py --cpu      # gloo on the CPU (reference engine)

Every rank builds the same model (same seed) and draws the same global batch; rank r trains on its
shard under DDP. Rank 0 also trains an undistributed copy on the whole batch. At the end rank 0 checks
that the per-step global losses, the first step's gradients and the parameter updates agree within
bf16 tolerance, and (on CUDA) that warmed-up steps neither synchronise the host nor call cudaMalloc.
Prints one line `DDP-OK world=<n> ...` on success; exits non-zero with the reason otherwise.
"""

import argparse
import copy
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast on shared hosts

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import opendnn.ops as odo


class Block(nn.Module):
    """Pre-norm block: RMSNorm -> causal attention (opendnn.ops.sdpa), RMSNorm -> gated delta net
    (opendnn.ops.gated_delta_net), RMSNorm -> SiLU MLP; each with a residual."""

    def __init__(self, d, heads, head_dim):
        super().__init__()
        self.h, self.hd = heads, head_dim
        self.n1, self.n2, self.n3 = nn.RMSNorm(d), nn.RMSNorm(d), nn.RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * heads * head_dim, bias=False)
        self.attn_out = nn.Linear(heads * head_dim, d, bias=False)
        self.gdn_in = nn.Linear(d, 3 * heads * head_dim + 2 * heads, bias=False)
        self.gdn_out = nn.Linear(heads * head_dim, d, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, _ = x.shape
        h, hd = self.h, self.hd
        q, k, v = self.qkv(self.n1(x)).to(torch.bfloat16).view(b, t, 3, h, hd).permute(2, 0, 3, 1, 4)
        a = odo.sdpa(q, k, v, is_causal=True)  # [B, H, T, D] in bf16
        x = x + self.attn_out(a.transpose(1, 2).reshape(b, t, h * hd).to(x.dtype))
        p = self.gdn_in(self.n2(x))
        q, k, v = (p[..., i * h * hd:(i + 1) * h * hd].reshape(b, t, h, hd) for i in range(3))
        g = F.logsigmoid(p[..., 3 * h * hd:3 * h * hd + h])  # log-space decay < 0
        beta = torch.sigmoid(p[..., 3 * h * hd + h:])
        bf = torch.bfloat16
        o, _ = odo.gated_delta_net(q.to(bf), k.to(bf), v.to(bf), g.float().contiguous(), beta.to(bf).contiguous(),
                                   use_qk_l2norm=True)
        x = x + self.gdn_out(o.reshape(b, t, h * hd).to(x.dtype))
        return x + self.mlp(self.n3(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=97, d=128, heads=2, head_dim=64, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, head_dim) for _ in range(layers))
        self.norm = nn.RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.emb(tokens)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def lm_loss(model, tokens):
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU (opendnn's reference engine)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch-per-rank", type=int, default=2)
    ap.add_argument("--seq", type=int, default=65)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()

    cuda = not args.cpu
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dev = torch.device("cpu")

    torch.manual_seed(1234)
    model = TinyLM().to(dev)
    ref = copy.deepcopy(model) if rank == 0 else None
    init = [p.detach().clone() for p in model.parameters()]
    gen = torch.Generator().manual_seed(99)
    # One global batch, seen at every step: the loss must fall as the model memorises it.
    batch = torch.randint(0, 97, (world * args.batch_per_rank, args.seq), generator=gen).to(dev)
    batches = [batch] * args.steps
    b0 = rank * args.batch_per_rank

    ddp = DDP(model, device_ids=[dev.index] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    losses, first_grads = [], None
    mallocs_after_warmup = None
    for step, batch in enumerate(batches):
        if cuda and step == 2:  # the first two steps build graphs and fill torch's caching allocator
            torch.cuda.synchronize()
            mallocs_after_warmup = torch.cuda.memory_stats().get("segment.all.allocated", 0)
            torch.cuda.set_sync_debug_mode("error")
        opt.zero_grad(set_to_none=False)
        loss = lm_loss(ddp, batch[b0:b0 + args.batch_per_rank])
        loss.backward()
        if step == 0:
            first_grads = [p.grad.detach().clone() for p in ddp.parameters()]
        opt.step()
        global_loss = loss.detach() / world
        dist.all_reduce(global_loss)
        losses.append(global_loss)
    if cuda:
        torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
        mallocs = torch.cuda.memory_stats().get("segment.all.allocated", 0) - (mallocs_after_warmup or 0)
    else:
        mallocs = 0
    losses = torch.stack(losses).cpu()

    failures = []
    if rank == 0:
        ropt = torch.optim.SGD(ref.parameters(), lr=args.lr)
        ref_losses, ref_grads = [], None
        for step, batch in enumerate(batches):
            ropt.zero_grad(set_to_none=False)
            loss = lm_loss(ref, batch)
            loss.backward()
            if step == 0:
                ref_grads = [p.grad.detach().clone() for p in ref.parameters()]
            ropt.step()
            ref_losses.append(loss.detach())
        ref_losses = torch.stack(ref_losses).cpu()
        if not torch.allclose(losses, ref_losses, rtol=2e-2, atol=2e-2):
            failures.append(f"losses differ: ddp {losses.tolist()} vs one process {ref_losses.tolist()}")
        names = [n for n, _ in ref.named_parameters()]
        worst_grad = max(zip((rel(a, b) for a, b in zip(first_grads, ref_grads)), names))
        worst_upd = max(zip((rel(p.detach() - p0, r.detach() - p0)
                             for p, r, p0 in zip(model.parameters(), ref.parameters(), init)), names))
        if worst_grad[0] > 5e-2:
            failures.append(f"step-0 gradient of {worst_grad[1]} differs by {worst_grad[0]:.3g} (relative)")
        if worst_upd[0] > 5e-2:
            failures.append(f"update of {worst_upd[1]} after {args.steps} steps differs by {worst_upd[0]:.3g}")
        if losses[-1] >= losses[0]:
            failures.append(f"the loss did not go down: {losses.tolist()}")
    if mallocs:
        failures.append(f"rank {rank}: {mallocs} cudaMalloc calls after warm-up")
    dist.barrier()
    if rank == 0 and not failures:
        print(f"DDP-OK world={world} device={dev.type} steps={args.steps} losses={[round(x, 4) for x in losses.tolist()]} "
              f"max_rel_grad={worst_grad[0]:.2e} ({worst_grad[1]}) max_rel_update={worst_upd[0]:.2e} "
              f"mallocs_after_warmup={mallocs}", flush=True)
    for f in failures:
        print(f"DDP-FAIL rank {rank}: {f}", file=sys.stderr, flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
