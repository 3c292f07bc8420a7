"""Kernel benchmarks on the GPU: each kernel against its torch composite, eager and inside a graph.

Method: per-instance time with 20 instances captured in one graph and replayed back to
back, so the graph launch itself is amortised as it is inside a step graph. Also eager (one launch per
call, host overhead included) and the memory floor (bytes moved / 4.3 TB/s).

    python benchmarks/bench_kernels.py --out benchmarks/results/<date>-h200 [--only greedy_verify,tail,...]
        [--logit-scale 4]

The sampling kernels' logits are ``S * randn`` (``--logit-scale S``, default 1): at 1 nearly flat, so
top-p 0.9 keeps most of the vocabulary (the worst case for the cut-off search); larger S gives the peaked
rows a language model makes. Each sampling row reports how many tokens the first verify row keeps.
"""

from __future__ import annotations

import argparse
import itertools

import torch
from _timing import DEVICE, add_smoke_flag, eager_us, env_record, per_instance_us, save, smoke, sync

from stepgraph.copy_in import InputCopyPlan
from stepgraph.kernels import StaticCopy, input_copy_ref
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref
from stepgraph.kernels.draft_extend_tail import argmax_rows, draft_extend_tail, draft_extend_tail_ref
from stepgraph.kernels.greedy_verify import greedy_chain_verify, greedy_chain_verify_ref
from stepgraph.kernels.logprobs import token_logprobs, token_logprobs_ref
from stepgraph.kernels.relay import RelayGather, RelayStore, relay_gather_ref, relay_store_ref
from stepgraph.kernels.skinny_matmul import plan, skinny_matmul
from stepgraph.sampling import SamplingParams, sampling_class
from stepgraph.speculative.penalties import PenaltyState

BW = 4.3e12  # bytes/s, measured device-to-device copy on the H200
K, V, D = 3, 151936, 1024
BATCHES = (1, 8, 64)
SWEEP = True  # the configuration sweeps (greedy verify, skinny matmul)
LOGIT_SCALE = 1.0  # the sampling kernels' logits: LOGIT_SCALE * randn
dev = DEVICE


def floor_us(nbytes: int) -> float:
    return nbytes / BW * 1e6


def bench_greedy(rows: list, record: dict) -> None:
    sweep = {}
    for B in BATCHES:
        x = torch.randn(B, K + 1, V, device=dev).bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        res = {
            "composite": per_instance_us(lambda: greedy_chain_verify_ref(x, d)),
            "argmax_alone": per_instance_us(lambda: torch.argmax(x, -1)),
            "fused_default": per_instance_us(lambda: greedy_chain_verify(x, d)),
            "fused_eager": eager_us(lambda: greedy_chain_verify(x, d)),
            "composite_eager": eager_us(lambda: greedy_chain_verify_ref(x, d)),
            "floor": floor_us(x.numel() * 2),
        }
        ws = torch.zeros(B, dtype=torch.int32, device=dev)
        res["fused_one_launch"] = per_instance_us(lambda: greedy_chain_verify(x, d, workspace=ws))
        best = (res["fused_one_launch"], {"block": 0, "num_warps": 0, "target_programs": 0, "one_launch": True})
        configs = itertools.product((1024, 2048), (4, 8), (132, 264, 528, 1056), (False, True)) if SWEEP else ()
        for block, warps, progs, one in configs:
            cfg = {"block": block, "num_warps": warps, "target_programs": progs}
            w = ws if one else None
            t = per_instance_us(lambda cfg=cfg, w=w: greedy_chain_verify(x, d, config=cfg, workspace=w), rep=100)
            sweep[f"B={B} {block}/{warps}/{progs}/{'one' if one else 'two'}"] = t
            if t < best[0]:
                best = (t, {**cfg, "one_launch": one})
        res["fused_best"], res["best_config"] = best
        record[f"greedy_verify B={B}"] = res
        rows.append(
            f"| greedy verify B={B} | {res['composite']:.2f} | {res['argmax_alone']:.2f} | {res['fused_default']:.2f} | "
            f"{res['fused_best']:.2f} ({best[1]['block']}/{best[1]['num_warps']}/{best[1]['target_programs']}"
            f"/{'1 launch' if best[1]['one_launch'] else '2 launches'}; default 1 launch {res['fused_one_launch']:.2f}) | "
            f"{res['floor']:.2f} | {res['fused_best'] / res['composite']:.3f} | {res['fused_best'] / res['floor']:.2f} |"
        )
    record["greedy_verify_sweep"] = sweep


def bench_tail(rows: list, record: dict) -> None:
    for B in BATCHES:
        N = B * (K + 1)
        x = torch.randn(N, V, device=dev).bfloat16()
        h = torch.randn(N, D, device=dev).bfloat16()
        sel = (torch.arange(B, device=dev) * (K + 1) + torch.randint(0, K + 1, (B,), device=dev)).contiguous()
        ws = torch.zeros(N, dtype=torch.int32, device=dev)
        res = {
            "torch": per_instance_us(lambda: draft_extend_tail_ref(x, h, sel)),
            "fused_two_launches": per_instance_us(lambda: draft_extend_tail(x, h, sel)),
            "fused": per_instance_us(lambda: draft_extend_tail(x, h, sel, workspace=ws)),
            "floor": floor_us(B * V * 2 + 2 * B * D * 2),
            "argmax_rows_fused": per_instance_us(lambda: argmax_rows(x[:B], workspace=ws)),
            "argmax_rows_torch": per_instance_us(lambda: torch.argmax(x[:B], -1)),
        }
        record[f"tail B={B}"] = res
        rows.append(
            f"| draft-extend tail B={B} | {res['torch']:.2f} | - | {res['fused']:.2f} (2 launches {res['fused_two_launches']:.2f}) | - | {res['floor']:.2f} | "
            f"{res['fused'] / res['torch']:.3f} | {res['fused'] / res['floor']:.2f} |"
        )
        rows.append(
            f"| draft-step argmax N={B} | {res['argmax_rows_torch']:.2f} | - | {res['argmax_rows_fused']:.2f} | - | "
            f"{floor_us(B * V * 2):.2f} | {res['argmax_rows_fused'] / res['argmax_rows_torch']:.3f} | - |"
        )


#: sampled-verify settings: (name, temperature, top_k, top_p, min_p, class keywords) and the targets they are held to.
#: A request with 1 <= top_k <= 1024 is in the small top-k class; the top_k_top_p class's kernels (every cut searched)
#: are timed too. A tuple of top-k values is taken in turns by the requests (a batch of chat traffic: its class is
#: the most general one). Top-p 0.5 and top-k 2000 alone (the ``top_p`` class) can reject draw after draw.
TEMPERATURE, SMALL_TOP_K, FILTERED = {"filtered": False}, {"small_top_k": True}, {"filtered": True}
PIVOT = sampling_class("top_p").kernel  # no late request (top-k above 1024 with top-p): five launches of rounds
GENERAL = sampling_class("general").kernel
SAMPLING_CASES = (
    ("temperature", 0.8, 0, 1.0, 0.0, TEMPERATURE),
    ("top-k 50 + top-p 0.9", 0.8, 50, 0.9, 0.0, SMALL_TOP_K),
    ("top-k 50 + top-p 0.9, top_k_top_p class", 0.8, 50, 0.9, 0.0, FILTERED),
    ("top-k 20 + min-p 0.1", 0.8, 20, 1.0, 0.1, SMALL_TOP_K),
    ("top-k 1000", 0.8, 1000, 1.0, 0.0, SMALL_TOP_K),
    ("top-k 1000 + top-p 0.9", 0.8, 1000, 0.9, 0.0, SMALL_TOP_K),
    ("top-p 0.9", 0.8, 0, 0.9, 0.0, PIVOT),
    ("top-p 0.9, top_k_top_p class", 0.8, 0, 0.9, 0.0, FILTERED),
    ("top-k 50 + top-p 0.9 / top-p 0.9 in turns", 0.8, (50, 0), 0.9, 0.0, PIVOT),
    ("top-k 2000 + top-p 0.9", 0.8, 2000, 0.9, 0.0, GENERAL),
    ("top-p 0.5", 0.8, 0, 0.5, 0.0, PIVOT),
    ("top-k 2000", 0.8, 2000, 1.0, 0.0, PIVOT),
    ("min-p 0.1", 0.8, 0, 1.0, 0.1, FILTERED),
)
SAMPLING_TARGETS_US = {("temperature", 1): 15.0, ("top-k 50 + top-p 0.9", 1): 40.0,
                       ("top-k 50 + top-p 0.9", 8): 60.0, ("top-k 50 + top-p 0.9", 64): 400.0,
                       ("top-p 0.9", 1): 40.0, ("top-p 0.9", 8): 60.0, ("top-p 0.9", 64): 400.0,
                       ("top-k 1000", 1): 40.0, ("top-k 1000", 8): 60.0, ("top-k 1000", 64): 400.0,
                       ("top-k 2000 + top-p 0.9", 1): 40.0, ("top-k 2000 + top-p 0.9", 8): 60.0,
                       ("top-k 2000 + top-p 0.9", 64): 400.0,
                       **{("top-k 50 + top-p 0.9 / top-p 0.9 in turns", B): t for B, t in ((1, 40.0), (8, 60.0),
                                                                                          (64, 400.0))}}  # fmt: skip


def kept(x: torch.Tensor, temp: float, top_k: int, top_p: float, min_p: float) -> int:
    """About how many tokens the filters keep of one row of logits ``x [V]`` (top-k, then top-p of what is
    left, then min-p), for the table: how much of the vocabulary a case's cut-off search is over."""
    probs = torch.softmax(x.float() / temp, -1).sort(descending=True).values
    n = probs.numel() if top_k == 0 else min(top_k, probs.numel())
    probs = probs[:n] / probs[:n].sum()
    if top_p < 1.0:
        n = min(n, int((probs.cumsum(0) - probs < top_p).sum()))
    if min_p > 0.0:
        n = min(n, int((probs >= min_p * probs[0]).sum()))
    return n


def bench_sampling(rows: list, record: dict) -> None:
    for B, (name, temp, k, p, min_p, mode) in itertools.product(BATCHES, SAMPLING_CASES):
        x = (torch.randn(B, K + 1, V, device=dev) * LOGIT_SCALE).bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        T = torch.full((B,), temp, device=dev)
        turns = k if isinstance(k, tuple) else (k,)
        tk = torch.tensor([turns[b % len(turns)] for b in range(B)], device=dev, dtype=torch.int64)
        tp = torch.full((B,), p, device=dev)
        mp = torch.full((B,), min_p, device=dev)
        seed = torch.arange(B, device=dev, dtype=torch.int64)
        off = torch.zeros(B, device=dev, dtype=torch.int64)
        kw = {**mode, "min_p": mp}
        res = {
            "torch": per_instance_us(lambda: chain_verify_sampling_ref(x, d, T, tk, tp, seed, off, **kw), copies=5),
            "kernel": per_instance_us(lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, **kw), copies=5),
            "floor": floor_us(x.numel() * 2),
            "target": SAMPLING_TARGETS_US.get((name, B)),
            "kept": kept(x[0, 0], temp, turns[0], p, min_p),
            "logit_scale": LOGIT_SCALE,
        }
        record[f"sampling {name} B={B}"] = res
        target = f" (target <= {res['target']:.0f}: {res['kernel'] / res['target']:.2f}x)" if res["target"] else ""
        rows.append(
            f"| sampled verify ({name}, keeps {res['kept']}) B={B} | {res['torch']:.2f} | - | {res['kernel']:.2f}{target} | - | "
            f"{res['floor']:.2f} | {res['kernel'] / res['torch']:.3f} | {res['kernel'] / res['floor']:.2f} |"
        )


def bench_logprobs(rows: list, record: dict) -> None:
    """Each verify row's token log-probability and its top-n alternatives (n = 0 and 20), kernel against the
    torch reference (a float32 copy, log-sum-exp and topk)."""
    for B, n in itertools.product(BATCHES, (0, 20)):
        x = torch.randn(B, K + 1, V, device=dev).bfloat16()
        tokens = torch.argmax(x, -1)
        res = {
            "torch": per_instance_us(lambda: token_logprobs_ref(x, tokens, n), copies=5),
            "kernel": per_instance_us(lambda: token_logprobs(x, tokens, n), copies=5),
            "floor": floor_us(x.numel() * 2),
        }
        record[f"logprobs top-{n} B={B}"] = res
        rows.append(
            f"| log-probabilities, top {n} B={B} | {res['torch']:.2f} | - | {res['kernel']:.2f} | - | "
            f"{res['floor']:.2f} | {res['kernel'] / res['torch']:.3f} | {res['kernel'] / res['floor']:.2f} |"
        )


HISTORY = 512  # tokens each request has seen


def penalty_cases(vocab_size: int) -> dict[str, SamplingParams]:
    """name -> every request's settings."""
    return {
        "none set": SamplingParams(),
        "repetition 1.05": SamplingParams(repetition_penalty=1.05),
        "allowed 2000 tokens": SamplingParams(allowed_token_ids=range(0, vocab_size, max(1, vocab_size // 2000))),
    }


def bench_penalties(rows: list, record: dict) -> None:
    """A verify's penalised rows (``PenaltyState.apply``: the float32 copy, with allowed tokens' dense bias
    rows, then the penalty kernel over each request's tokens) against the float32 copy alone; and a
    draft-extend's rows with only the accepted row of each request penalised (``select``, what the tail
    reads) against all of them."""
    for B, (name, params) in itertools.product(BATCHES, penalty_cases(V).items()):
        state = PenaltyState(B + 1, V, HISTORY + K + 1, dev)
        for slot in range(B):
            state.admit(slot, params)
        state.history[:B, :HISTORY] = torch.randint(0, V, (B, HISTORY), device=dev, dtype=torch.int32)
        x = torch.randn(B, K + 1, V, device=dev).bfloat16()
        drafts = torch.argmax(x, -1)[:, :K].contiguous()
        slots = torch.arange(B, device=dev)
        seq_len = torch.full((B,), HISTORY - 1, device=dev, dtype=torch.int64)
        res = {
            "copy": per_instance_us(lambda: x.float(), copies=5),
            "kernel": per_instance_us(lambda: state.apply(x, drafts, slots, seq_len), copies=5),
            "floor": floor_us(x.numel() * (2 + 4)),
        }
        record[f"penalties {name} B={B}"] = res
        rows.append(
            f"| penalised rows ({name}, {HISTORY} tokens seen) B={B} | {res['copy']:.2f} (float32 copy) | - | "
            f"{res['kernel']:.2f} | - | {res['floor']:.2f} | {res['kernel'] / res['copy']:.3f} | "
            f"{res['kernel'] / res['floor']:.2f} |"
        )
        extend = torch.argmax(x, -1)
        select = slots * (K + 1) + torch.randint(0, K + 1, (B,), device=dev)  # each request's accepted row
        res = {
            "all": per_instance_us(lambda: state.apply(x, extend, slots, seq_len, 1), copies=5),
            "kernel": per_instance_us(lambda: state.apply(x, extend, slots, seq_len, 1, select), copies=5),
            "floor": floor_us(B * V * (2 + 4)),
        }
        record[f"penalties {name} extend B={B}"] = res
        rows.append(
            f"| penalised extend rows, the accepted one a request ({name}) B={B} | {res['all']:.2f} (every row) | "
            f"- | {res['kernel']:.2f} | - | {res['floor']:.2f} | {res['kernel'] / res['all']:.3f} | "
            f"{res['kernel'] / res['floor']:.2f} |"
        )


def bench_copies(rows: list, record: dict) -> None:
    for B in BATCHES:
        # the anchor's set: 8 small int64 copies
        srcs = [torch.randint(0, 100, (B,), device=dev) for _ in range(8)]
        dsts = [torch.empty(64, device=dev, dtype=torch.int64) for _ in range(8)]
        one = StaticCopy(srcs, dsts)
        res = {
            "per_tensor": per_instance_us(lambda: [d[:B].copy_(s) for s, d in zip(srcs, dsts)]),
            "foreach": per_instance_us(lambda: torch._foreach_copy_([d[:B] for d in dsts], srcs)),
            "one_launch": per_instance_us(lambda: one(B)),
        }
        # a step's mixed set: 10 tensors, 5 dtypes, hidden rows included
        mixed_src = [
            torch.randint(0, 9, (B,), device=dev),
            torch.randint(0, 9, (B,), device=dev, dtype=torch.int32),
            torch.randn(B, D, device=dev).bfloat16(),
            torch.rand(B, device=dev),
            torch.randint(0, 9, (B, 4), device=dev),
            torch.rand(B, device=dev) > 0.5,
            torch.randint(0, 9, (B,), device=dev),
            torch.randn(B, 8, device=dev).half(),
            torch.randint(0, 9, (B,), device=dev, dtype=torch.int32),
            torch.randint(0, 9, (B,), device=dev),
        ]
        mixed_dst = [torch.empty(64, *s.shape[1:], device=dev, dtype=s.dtype) for s in mixed_src]
        mixed = StaticCopy(mixed_src, mixed_dst)
        res["mixed_per_tensor"] = per_instance_us(lambda: [d[:B].copy_(s) for s, d in zip(mixed_src, mixed_dst)])
        res["mixed_one_launch"] = per_instance_us(lambda: mixed(B))
        # the runner's copy-in from host tensors (eager wall time: staging + one H2D + one launch)
        host = [s.cpu() for s in mixed_src]
        plan = InputCopyPlan(mixed_dst, [0] * len(mixed_dst))
        idx = list(range(len(mixed_dst)))
        res["host_copy_in_one_launch_eager"] = eager_us(lambda: plan(idx, host, B, B))
        res["host_copy_in_per_tensor_eager"] = eager_us(
            lambda: input_copy_ref(host, mixed_dst, B, B, [None] * len(host))
        )
        record[f"copies B={B}"] = res
        rows.append(
            f"| 8 int64 copies B={B} | {res['per_tensor']:.2f} | foreach {res['foreach']:.2f} | {res['one_launch']:.2f} | - | - | "
            f"{res['one_launch'] / res['per_tensor']:.3f} | - |"
        )
        rows.append(
            f"| 10 mixed copies B={B} | {res['mixed_per_tensor']:.2f} | - | {res['mixed_one_launch']:.2f} | - | - | "
            f"{res['mixed_one_launch'] / res['mixed_per_tensor']:.3f} | - |"
        )


def bench_relay(rows: list, record: dict) -> None:
    S = 65
    for B in BATCHES:
        fields = [torch.zeros(S, dtype=torch.int64, device=dev) for _ in range(4)] + [
            torch.zeros(S, D, device=dev).bfloat16()
        ]
        srcs = [torch.randint(0, 9, (64,), device=dev) for _ in range(4)] + [torch.randn(64, D, device=dev).bfloat16()]
        slots = torch.randperm(S - 1, device=dev)[:B]
        store = RelayStore(fields, srcs)
        outs = [torch.empty_like(s) for s in srcs]
        gather = RelayGather(fields, outs, [0] * 5)
        res = {
            "store_per_field": per_instance_us(lambda: relay_store_ref(fields, srcs, slots, scratch_row=S - 1)),
            "store_fused": per_instance_us(lambda: store(slots)),
            "gather_per_field": per_instance_us(lambda: relay_gather_ref(fields, outs, slots, [0] * 5)),
            "gather_fused": per_instance_us(lambda: gather(slots)),
        }
        record[f"relay B={B}"] = res
        rows.append(
            f"| relay store (5 fields) B={B} | {res['store_per_field']:.2f} | - | {res['store_fused']:.2f} | - | - | "
            f"{res['store_fused'] / res['store_per_field']:.3f} | - |"
        )
        rows.append(
            f"| relay gather (5 fields) B={B} | {res['gather_per_field']:.2f} | - | {res['gather_fused']:.2f} | - | - | "
            f"{res['gather_fused'] / res['gather_per_field']:.3f} | - |"
        )


#: the example model's projections at the Qwen3-0.6B shape: (name, K, N)
PROJECTIONS = (("qkv", 1024, 4096), ("o", 2048, 1024), ("gate_up", 1024, 6144), ("down", 3072, 1024))


def bench_matmul(rows: list, record: dict) -> None:
    """Skinny products against cuBLAS (both weight layouts); every instance reads its own weights, so the
    twenty in one graph do not hit the L2 cache. Config sweep at 4 rows (B = 1, K = 3)."""
    copies = 20
    for name, k, n in PROJECTIONS:
        ws = [torch.randn(k, n, device=dev).bfloat16() / k**0.5 for _ in range(copies)]
        wts = [w.t().contiguous() for w in ws]
        floor = floor_us(k * n * 2)

        def per(fn, rep=200):
            it = itertools.cycle(range(copies))
            return per_instance_us(lambda: fn(next(it)), copies=copies, rep=rep)

        for m in (1, 4, 8, 16, 32, 64) if SWEEP else (4,):
            x = torch.randn(m, k, device=dev).bfloat16()
            res = {
                "torch_mm": per(lambda i: x @ ws[i]),
                "torch_linear": per(lambda i: torch.nn.functional.linear(x, wts[i])),
                "skinny": per(lambda i: skinny_matmul(x, ws[i])),
                "plan": plan(n, k),
                "floor": floor,
            }
            record[f"matmul {name} M={m}"] = res
            best_torch = min(res["torch_mm"], res["torch_linear"])
            rows.append(
                f"| matmul {name} [{m}, {k}] @ [{k}, {n}] | {res['torch_mm']:.2f} | linear {res['torch_linear']:.2f} | "
                f"{res['skinny']:.2f} | - | {floor:.2f} | {res['skinny'] / best_torch:.3f} | {res['skinny'] / floor:.2f} |"
            )
        x = torch.randn(4, k, device=dev).bfloat16()
        sweep = {}
        configs = itertools.product((16, 32, 64, 128), (64, 128, 256), (1, 2, 4, 8), (3, 4)) if SWEEP else ()
        for bn, bk, splits, stages in configs:
            if k // splits < bk:
                continue
            cfg = {"block_n": bn, "block_k": bk, "splits": splits, "num_stages": stages, "num_warps": 4}
            sweep[f"{bn}/{bk}/{splits}/{stages}"] = per(lambda i, cfg=cfg: skinny_matmul(x, ws[i], config=cfg), rep=50)
        if not sweep:
            continue
        best = min(sweep, key=sweep.get)
        record[f"matmul_sweep {name}"] = sweep
        rows.append(f"| matmul {name} M=4 best of sweep (block_n/block_k/splits/stages) | - | - | - | "
                    f"{sweep[best]:.2f} ({best}) | {floor:.2f} | - | {sweep[best] / floor:.2f} |")  # fmt: skip


BENCHES = {
    "greedy_verify": bench_greedy,
    "tail": bench_tail,
    "sampling": bench_sampling,
    "logprobs": bench_logprobs,
    "penalties": bench_penalties,
    "copy": bench_copies,
    "relay": bench_relay,
    "matmul": bench_matmul,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--only", default=",".join(BENCHES))
    ap.add_argument("--logit-scale", type=float, default=1.0, help="the sampling kernels' logits: S * randn")
    add_smoke_flag(ap)
    args = ap.parse_args()
    global LOGIT_SCALE
    LOGIT_SCALE = args.logit_scale
    if smoke(args):
        global K, V, D, BATCHES, PROJECTIONS, SWEEP, SAMPLING_CASES
        K, V, D, BATCHES, SWEEP = 2, 300, 32, (2,), False
        PROJECTIONS = (("down", 96, 64),)
        SAMPLING_CASES = tuple(c for c in SAMPLING_CASES if c[0] in ("temperature", "top-k 50 + top-p 0.9"))
    torch.manual_seed(0)
    record = {"env": env_record(), "method": "per instance: 20 instances in one graph, do_bench median / 20 (us)"}
    rows = [
        "| kernel | torch composite (us) | torch.argmax / other (us) | stepgraph (us) | best config (us) | memory floor (us) | "
        "ratio to composite | ratio to floor |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in args.only.split(","):
        BENCHES[name](rows, record)
        sync()
    env = record["env"]
    header = f"# Kernel benchmarks, {env['date']}, {env['gpu']}, torch {env['torch']}, triton {env['triton']}\n\n"
    save(args.out, "kernels", record, header + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
