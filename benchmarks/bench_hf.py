"""The Hugging Face adapter against what a Hugging Face user would pick instead, in one run.

Target: a Qwen2.5-0.5B-shaped Llama (24 layers, hidden 896, 14 heads, 2 KV heads, MLP 4864, vocabulary
151,936, tied embeddings, bf16, random weights). Greedy, 128 new tokens, B = 1 and 8:

* ``generate()`` with the default cache;
* assisted generation (``assistant_model=``, B = 1 only: transformers supports no batch there);
* ``generate(cache_implementation="static")``, whose forward transformers compiles (the first call's
  extra time is reported as its compile time);
* stepgraph's ``hf_spec_decoder`` with two drafts: the target itself (every draft accepted: the same
  target forwards per token as plain decoding) and a cheap draft (the target's first two layers, sharing
  its embeddings, norm and head).

With random weights the 2-layer draft agrees with the target on almost nothing. ``--upper-scale S``
scales the output projections (attention and MLP) of the target's layers above the draft's two by ``S``:
the upper layers then move the residual stream less, and the draft agrees more often, the smaller ``S``
(the table's mean accepted length shows how often). Every path runs that same target, at the same
compute per token.

Reported: tokens/s, stepgraph's mean accepted length, agreement of every greedy output with the static
``generate()`` output (share of tokens before the first difference), and ratios.

    python benchmarks/bench_hf.py --out benchmarks/results/<dir> [--batches 1,8] [--tokens 128]
        [--attention gather,rows] [--drafts self,cheap] [--baselines static,default,assisted] [--upper-scale 0.05]
        [--prefill-chunk 0]

The static compiled path recompiles for a new batch size; after another size in the same process it
hit dynamo's recompile limit and ran 5-7x slower, so torch's compile caches are reset before each batch
size's static run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _timing import CUDA, DEVICE, add_smoke_flag, env_record, save, smoke, sync

from stepgraph import RunnerConfig
from stepgraph.adapters.hf import hf_spec_decoder

SHAPE = {
    "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
    "num_attention_heads": 14, "num_key_value_heads": 2,
}  # fmt: skip
SMOKE_SHAPE = {
    "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2,
}  # fmt: skip


def target_model():
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**SHAPE, max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=1e6)
    cfg._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(cfg).to(DEVICE, torch.bfloat16 if CUDA else torch.float32).eval()
    model.generation_config.eos_token_id = None  # random weights: every run makes all its tokens
    model.generation_config.pad_token_id = 0
    return model


def scale_upper_layers(target, scale: float, keep: int = 2) -> None:
    """Multiply the attention and MLP output projections of the target's layers past the first ``keep``
    by ``scale`` (in place): their share of the residual stream shrinks, so a draft made of the first
    ``keep`` layers agrees with the target more often (see the module's docstring)."""
    with torch.no_grad():
        for layer in target.model.layers[keep:]:
            layer.self_attn.o_proj.weight.mul_(scale)
            layer.mlp.down_proj.weight.mul_(scale)


def cheap_draft(target):
    """The target's first two layers, sharing its embeddings, final norm, rotary tables and head."""
    import copy

    import transformers

    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = 2
    with torch.device("meta"):
        draft = transformers.LlamaForCausalLM(cfg)
    draft.model.embed_tokens = target.model.embed_tokens
    draft.model.layers = torch.nn.ModuleList(target.model.layers[:2])
    draft.model.norm, draft.model.rotary_emb = target.model.norm, target.model.rotary_emb
    draft.lm_head = target.lm_head
    draft.generation_config.eos_token_id = None
    draft.generation_config.pad_token_id = 0
    return draft.eval()


def timed(fn) -> tuple[object, float]:
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t0


def agreement(got: list[list[int]], ref: list[list[int]]) -> float:
    """Mean share of each output's tokens before its first difference from the reference."""
    shares = []
    for g, r in zip(got, ref):
        n = next((i for i, (a, b) in enumerate(zip(g, r)) if a != b), min(len(g), len(r)))
        shares.append(n / max(1, len(r)))
    return sum(shares) / len(shares)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--attention", default="gather", help="adapter attentions to run, comma-separated: gather,rows")
    ap.add_argument("--drafts", default="self,cheap", help="stepgraph drafts: self (the target), cheap (2 layers)")
    ap.add_argument("--baselines", default="static,default,assisted", help="HF paths to run (static is the base)")
    ap.add_argument("--compile", default="off", help="stepgraph runs without and/or with compile=True: off,on")
    ap.add_argument(
        "--prefill-chunk",
        type=int,
        help="stepgraph's prefill_chunk (default: the adapter's 'auto', 256 on a GPU; 0: each prompt whole, eagerly)",
    )
    ap.add_argument("--upper-scale", type=float, default=1.0, help="scale of the target's layers above the draft's two")
    ap.add_argument("--plot", nargs="+", metavar="JSON", help="only draw the plot of saved hf*.json files")
    add_smoke_flag(ap)
    args = ap.parse_args()
    if smoke(args):  # HF's compiled static path takes minutes to compile on a CPU: the default cache instead
        SHAPE.update(SMOKE_SHAPE)
        args.batches, args.tokens, args.prompt, args.baselines = "1,2", 4, 6, "default,assisted"
    if args.plot:
        plot([Path(p) for p in args.plot], Path(args.plot[-1]).with_suffix(".png"))
        return
    baselines = set(filter(None, args.baselines.split(",")))
    target = target_model()
    scale_upper_layers(target, args.upper_scale)
    draft = cheap_draft(target)
    record = {**env_record(), "tokens": args.tokens, "upper_scale": args.upper_scale, "results": {}}
    args.prefill_chunk = "auto" if args.prefill_chunk is None else (args.prefill_chunk or None)
    record["prefill_chunk"] = args.prefill_chunk
    g = torch.Generator().manual_seed(0)
    for B in [int(b) for b in args.batches.split(",")]:
        prompts = [torch.randint(0, SHAPE["vocab_size"], (args.prompt,), generator=g).tolist() for _ in range(B)]
        ids = torch.tensor(prompts, device=DEVICE)
        mask = torch.ones_like(ids)
        gen = dict(attention_mask=mask, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)
        res = {}

        def hf(tag, **kw):
            _, first = timed(lambda: target.generate(ids, **gen, **kw))  # compiles (static cache), allocates
            target.generate(ids, **gen, **kw)
            out, t = timed(lambda: target.generate(ids, **gen, **kw))
            res[tag] = {"tokens_per_s": B * args.tokens / t, "seconds": t, "first_call_extra_s": first - t}
            return [row[args.prompt :].tolist() for row in out]

        torch._dynamo.reset()  # a fresh start for HF's compiled forward at this batch size
        ref = (
            hf("HF generate(static cache, compiled)", cache_implementation="static") if "static" in baselines else None
        )
        if "default" in baselines:
            out = hf("HF generate(default cache)")
            ref = out if ref is None else ref
        if B == 1 and "assisted" in baselines:
            hf("HF assisted generation (2-layer draft)", assistant_model=draft)
        drafts = {"self": ("target as its own draft", target), "cheap": ("2-layer draft", draft)}
        runs = [
            (a, c == "on", *drafts[d])
            for d in args.drafts.split(",")
            for a in args.attention.split(",")
            for c in args.compile.split(",")
        ]
        for attention, compile, name, d in runs:
            tag = f"stepgraph, {name}" + (f", attention={attention}" if attention != "gather" else "")
            tag += ", compile=True" if compile else ""
            tag += f", prefill_chunk={args.prefill_chunk}" if args.prefill_chunk != "auto" else ""
            cfg = RunnerConfig(progress=False)
            size = {"max_requests": B, "max_seq_len": args.prompt + args.tokens + 16}
            compile = ("eager" if smoke(args) else True) if compile else False  # eager backend: no compile on a CPU
            dec = hf_spec_decoder(
                target,
                d,
                **size,
                config=cfg,
                attention=attention,
                compile=compile,
                prefill_chunk=args.prefill_chunk,
            )
            _, warm_s = timed(lambda: dec.warmup(B))
            dec.generate(prompts, max_new_tokens=args.tokens)  # untimed: first-use costs
            dec.stats = type(dec.stats)()
            out, t = timed(lambda: dec.generate(prompts, max_new_tokens=args.tokens))
            res[tag] = {
                "tokens_per_s": B * args.tokens / t,
                "seconds": t,
                "warmup_s": warm_s,
                "mean_accept_len": dec.stats.mean_accept_len,
                "agreement_with_static_generate": agreement(out, ref) if ref is not None else float("nan"),
                "captured_keys": dec.info()["captured_keys"],
                "compile": dec.info().get("compile"),
            }
            dec.release()
            publish(record, B, res, args, echo=False)  # after each path: a run cut by a time limit keeps its rows
        publish(record, B, res, args)
        print(f"B={B}: " + ", ".join(f"{k}: {v['tokens_per_s']:.0f} tok/s" for k, v in res.items()), flush=True)
    try:
        plot([Path(args.out) / "hf.json"], Path(args.out) / "hf.png")
    except ImportError:
        print("matplotlib is not installed here: draw the plot with --plot elsewhere")


def publish(record: dict, B: int, res: dict, args, echo: bool = True) -> None:
    """Each path's ratio to the batch's base (HF's static compiled path, else the first path), saved."""
    base = res.get("HF generate(static cache, compiled)", next(iter(res.values())))["tokens_per_s"]
    for r in res.values():
        r["vs_static_compiled"] = r["tokens_per_s"] / base
    record["results"][f"B={B}"] = res
    save(args.out, "hf", record, table(record, args), echo)


def plot(paths: list[Path], out: Path) -> None:
    """Tokens/s of every path per batch size, from one or more saved ``hf*.json`` (later files win)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results: dict[str, dict] = {}
    for path in paths:
        for b, res in json.loads(path.read_text())["results"].items():
            results.setdefault(b, {}).update(res)
    fig, axes = plt.subplots(1, len(results), figsize=(8.5 * len(results), 4.5), squeeze=False)
    for ax, (b, res) in zip(axes[0], results.items()):
        names = list(res)
        colors = ["tab:green" if n.startswith("stepgraph") else "tab:gray" for n in names]
        ax.barh(names, [res[n]["tokens_per_s"] for n in names], color=colors)
        ax.set_xlabel("tokens / s")
        ax.set_title(f"B = {b[2:]}")
        ax.tick_params(axis="y", labelsize=7)
    runs = ", ".join(sorted({p.parent.name for p in paths}))
    fig.suptitle(f"Qwen2.5-0.5B-shaped target, bf16, greedy, 128 new tokens ({runs})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"saved {out}")


def table(record: dict, args) -> str:
    lines = [
        f"# Hugging Face adapter against HF's own paths ({record['gpu']}, torch {record['torch']}, "
        f"triton {record['triton']}, {record['date']})",
        "",
        "Qwen2.5-0.5B-shaped Llama target (24 layers, bf16, random weights"
        + (
            f", the output projections of layers past the second scaled by {args.upper_scale}"
            if args.upper_scale != 1
            else ""
        )
        + f"), greedy, {args.tokens} new tokens, prompts of {args.prompt} tokens.",
        "",
        "| B | path | tokens/s | vs static compiled | mean accepted | agreement with static generate() | notes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for b, res in record["results"].items():
        for tag, r in res.items():
            acc = f"{r['mean_accept_len']:.2f}" if "mean_accept_len" in r else "-"
            agree = (
                f"{r['agreement_with_static_generate'] * 100:.1f}%" if "agreement_with_static_generate" in r else "-"
            )
            if "warmup_s" in r:
                note = f"warm-up and capture {r['warmup_s']:.1f} s"
            else:
                note = f"first call +{r['first_call_extra_s']:.1f} s (compile)" if "static" in tag else ""
            lines.append(
                f"| {b[2:]} | {tag} | {r['tokens_per_s']:.0f} | {r['vs_static_compiled']:.2f}x | {acc} | {agree} | {note} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
