"""A draft length that follows the batch: tokens/s of fixed K against ``num_draft_tokens="auto"``.

The example model at the Qwen3-0.6B shape (28 layers, bf16) with a twin draft whose proposals agree with
the target at a chosen rate (``draft="twin:A"``), for acceptance A in {0.3, 0.6, 0.9}, batch sizes
B in {1, 4, 8, 16, 32, 64}, and K in {0, 1, 2, 3, 5} fixed or chosen each step by ``auto`` (which
measures every key's step time at warm-up and tracks each request's acceptance). One decoder per
acceptance holds every K's keys; each point decodes at least ``--requests`` requests (distinct prompts),
batches of B one after another, greedy, and the decode time counts (prefill apart): the median of
``--rounds`` runs of every policy in rotating order, after one untimed run at the batch size. With one
request a point, a batch of one would measure the luck of one prompt's draws: the best fixed K in hindsight
for that prompt, which no policy learning online can match (``--simulate`` shows the spread). Also: the
warm-up of batch sizes 1..8 x three K x two sampling classes (time, of it the keys' warm-up runs and
captures, and graph memory), against the largest key's pool alone; ``--warmup-only`` measures that alone.

    python benchmarks/bench_adaptive.py --out benchmarks/results/<dir> [--layers 28] [--tokens 64] [--rounds 3]
        [--acceptance 0.3,0.6,0.9] [--requests 8] [--warmup-only | --no-warmup-set] [--compile] [--attention triton]
    python benchmarks/bench_adaptive.py --simulate benchmarks/results/<dir>/adaptive.json [--host-ms 0.3]   # no GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path

import torch
from _timing import add_smoke_flag, env_record, example_models, save, smoke, sync

from stepgraph import RunnerConfig, SpecDecoder, Toggles
from stepgraph.examples.model import TwinDraft
from stepgraph.speculative.draft_policy import AutoDraftLength, FixedDraftLength, simulate

ACCEPTANCE = (0.3, 0.6, 0.9)
BATCHES = (1, 4, 8, 16, 32, 64)
LENS = (0, 1, 2, 3, 5)


def point_batches(prompts: list[list[int]], batch: int, requests: int) -> list[list[list[int]]]:
    """The batches one point decodes in turn: ``ceil(requests / batch)`` batches of ``batch`` distinct prompts
    (at least one batch)."""
    n = max(1, -(-requests // batch))
    if n * batch > len(prompts):
        raise ValueError(f"{n} batches of {batch} need {n * batch} prompts, got {len(prompts)}")
    return [prompts[i * batch : (i + 1) * batch] for i in range(n)]


def decode_tps(dec: SpecDecoder, batches: list[list[list[int]]], tokens: int) -> tuple[float, dict]:
    """Tokens per second of decoding ``batches`` one after another (prefill apart), and the K chosen per step."""
    dec.stats = type(dec.stats)()
    made = 0
    for prompts in batches:
        sync()
        made += sum(len(o) for o in dec.generate(prompts, max_new_tokens=tokens))
        sync()
    st = dec.stats
    return made / st.decode_seconds, dict(st.draft_len_steps)


def warmup_of_a_realistic_set(target, draft, compile: bool = False) -> dict:
    """Batch sizes 1..8 x K in (1, 3, 5) x greedy and top-k: warm-up seconds, pool, the largest key alone
    (``compile``: the decoder's forwards through ``torch.compile``, compiled in the warm-up)."""
    cfg = RunnerConfig(toggles=Toggles.all(True), progress=False, buckets=tuple(range(1, 9)))
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=(3, 1, 5), max_batch=8, config=cfg, compile=compile)
    t0 = time.perf_counter()
    report = dec.warmup(8, ("greedy", "top_k"))
    seconds = time.perf_counter() - t0
    info = dec.info()
    shared = info["graph_pool_bytes"]
    dec.release()
    alone = SpecDecoder.for_example(target, draft, num_draft_tokens=5, max_batch=8, config=cfg)
    with alone.step.relay.parked():
        alone.runner.capture([(8, "top_k", 5)])
    largest = alone.info()["graph_pool_bytes"]
    alone.release()
    keys = info["keys"].values()
    return {
        "seconds": seconds,
        "keys": len(report.captured_keys),
        "capture_ms_max": max(k["capture_ms"] for k in keys),
        "capture_s_sum": sum(k["capture_ms"] for k in keys) / 1e3,
        "warmup_runs_s_sum": sum(k["warmup_ms"] for k in keys) / 1e3,
        "warmup_ms_by_key": {name: k["warmup_ms"] for name, k in info["keys"].items()},
        "shared_pool_bytes": shared,
        "largest_key_alone_bytes": largest,
        "ratio": shared / largest if largest else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--warmup-only", action="store_true", help="only the warm-up of the realistic set")
    ap.add_argument("--no-warmup-set", action="store_true", help="leave out the warm-up of the realistic set")
    ap.add_argument("--compile", action="store_true", help="the realistic set's warm-ups with compile=True")
    ap.add_argument("--attention", choices=("sdpa", "triton"), default="sdpa", help="the example model's attention")
    ap.add_argument("--acceptance", help="comma-separated acceptance rates (default: 0.3,0.6,0.9)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of every policy per point, in rotating order (median)")
    ap.add_argument("--requests", type=int, default=8, help="requests a point decodes at least: batches of B in turn")
    ap.add_argument("--simulate", metavar="JSON", help="no GPU: the policies on a saved run's step times (simulate())")
    ap.add_argument("--host-ms", type=float, default=0.0, help="with --simulate: the loop's host time per step")
    add_smoke_flag(ap)
    args = ap.parse_args()
    if args.simulate:
        print(simulated(args.simulate, args.tokens, args.host_ms, args.requests))
        return
    batches = BATCHES
    acceptance = tuple(float(a) for a in args.acceptance.split(",")) if args.acceptance else ACCEPTANCE
    if smoke(args):
        batches, acceptance, args.tokens, args.rounds, args.requests = (1, 2), (0.6,), 6, 1, 2
    target, draft = example_models(
        num_layers=args.layers, max_requests=max(*batches, 8) + 1, draft="same", attention=args.attention
    )
    vocab = target.cfg.vocab_size
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (32,), generator=g).tolist() for _ in range(max(batches) + args.requests)]
    record = {"env": env_record(), "layers": args.layers, "attention": args.attention, "tokens": args.tokens,
              "rounds": args.rounds, "requests": args.requests, "results": {}}  # fmt: skip
    buckets = tuple(sorted(set(batches)))
    for a in () if args.warmup_only else acceptance:
        twin = TwinDraft(draft.model, a)  # one copy of the target's weights and cache for every acceptance
        cfg = RunnerConfig(toggles=Toggles.all(True), progress=False, buckets=buckets)
        auto = AutoDraftLength(draft_lens=LENS)
        dec = SpecDecoder.for_example(target, twin, num_draft_tokens=auto, max_batch=max(batches), config=cfg)
        t0 = time.perf_counter()
        dec.warmup(max(batches))  # every bucket and K captured, then every key's step time measured
        warm_s = time.perf_counter() - t0
        rows = record["results"][f"acceptance {a}"] = {"warmup_s": warm_s, "step_ms": dec.step_times(), "by_batch": {}}
        for B in batches:
            point = point_batches(prompts, B, args.requests)
            dec.policy = FixedDraftLength(1)
            decode_tps(dec, point[:1], args.tokens)  # untimed: the first run at a batch size is slower
            policies = [(f"K={k}", FixedDraftLength(k)) for k in LENS] + [("auto", auto)]
            runs = {name: [] for name, _ in policies}
            chosen = Counter()
            for rnd in range(args.rounds):  # rotating order; auto keeps what it learnt, as a server's would
                for name, policy in policies[rnd % len(policies) :] + policies[: rnd % len(policies)]:
                    dec.policy = policy
                    tps, lens = decode_tps(dec, point, args.tokens)
                    runs[name].append(tps)
                    if policy is auto:
                        chosen.update(lens)
            res = {name: statistics.median(v) for name, v in runs.items()}
            res["auto_draft_lens"] = dict(chosen)
            fixed = {k: v for k, v in res.items() if k.startswith("K=")}
            best = max(fixed, key=fixed.get)
            res["best_fixed"] = best
            res["auto_vs_best"] = res["auto"] / fixed[best]
            res["auto_vs_k3"] = res["auto"] / fixed["K=3"]
            res["auto_vs_k0"] = res["auto"] / fixed["K=0"]
            rows["by_batch"][B] = res
            print(f"A={a} B={B}: " + ", ".join(f"{n} {v:.0f}" for n, v in fixed.items())
                  + f", auto {res['auto']:.0f} tok/s ({res['auto_vs_best']:.3f}x best {best})", flush=True)  # fmt: skip
        dec.release()
    record["compile"] = args.compile
    if not args.no_warmup_set:
        record["warmup_realistic"] = warmup_of_a_realistic_set(target, draft, args.compile)
        del target, draft
        record["warmup_realistic_eagle"] = warmup_of_a_realistic_set(
            *example_models(num_layers=args.layers, max_requests=9), args.compile
        )
    save(args.out, "adaptive", record, table(record, batches))
    if record["results"]:
        _plot(record, args.out)


def simulated(path: str, tokens: int, host_ms: float = 0.0, requests: int = 8, seeds: int = 16) -> str:
    """Auto against the best fixed K on the step times of a saved run, by :func:`simulate`, as the benchmark
    measures a point: ``ceil(requests / B)`` batches of B in turn, one policy carried through them from a cold
    start, against the best fixed K on the same draws. Per cell, the median over ``seeds`` draws and the
    lowest. ``host_ms`` is added to every step: the time the loop spends on the host between steps, which the
    measured step times (device time) leave out; the policy keeps choosing from the measured ones."""
    record = json.loads(Path(path).read_text())
    lines = [
        f"Simulated on the step times of {path}, {tokens} tokens, at least {requests} requests a point, {seeds} "
        f"seeds, {host_ms} ms of host time per step: auto / best fixed K, median (lowest)",
        "",
    ]
    lines += ["| A | " + " | ".join(f"B = {b}" for b in BATCHES) + " |", "| --- " * (len(BATCHES) + 1) + "|"]
    for name, rows in record["results"].items():
        ms = {}
        for key, v in rows["step_ms"].items():
            b, k = key.split("/")
            ms[int(b[3:]), int(k[2:])] = v
        a, cells = float(name.split()[-1]), []
        took = lambda b, k: ms[b, k] + host_ms  # noqa: E731
        for B in BATCHES:
            n = max(1, -(-requests // B))

            def tps(policy, seed: int, B=B, n=n) -> float:  # the point's batches in turn, one policy through them
                return B * tokens * n / sum(B * tokens / simulate(policy, a, B, tokens, took, seed=seed * n + i)[0]
                                            for i in range(n))  # fmt: skip

            ratios = sorted(
                tps(AutoDraftLength(draft_lens=LENS, step_ms=lambda b, k: ms[b, k]), s)
                / max(tps(FixedDraftLength(k), s) for k in LENS)
                for s in range(seeds)
            )
            cells.append(f"{statistics.median(ratios):.3f} ({ratios[0]:.3f})")
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(record: dict, batches) -> str:
    env = record["env"]
    lines = [
        f"# Draft length that follows the batch ({env['gpu']}, torch {env['torch']}, triton {env['triton']}, "
        f"{env['date']})",
        "",
        f"Example model, Qwen3-0.6B shape, {record['layers']} layers, bf16; twin draft at acceptance A; greedy; "
        f"{record['tokens']} new tokens per request; decode tokens/s (prefill apart), the median of "
        f"{record.get('rounds', 1)} rounds in rotating order (auto keeps what it learnt from round to round; its "
        "K counted over all rounds).",
        "",
    ]
    for name, rows in record["results"].items():
        lines += [f"## {name} (warm-up {rows['warmup_s']:.1f} s)", ""]
        lines += [
            "| B | "
            + " | ".join(f"K={k}" for k in LENS)
            + " | auto | auto / best fixed | auto / K=3 | auto / K=0 | auto's K (steps) |"
        ]
        lines += ["| --- " * (len(LENS) + 6) + "|"]
        for B in batches:
            r = rows["by_batch"][B]
            cells = [f"{r[f'K={k}']:.0f}" + (" **best**" if r["best_fixed"] == f"K={k}" else "") for k in LENS]
            chosen = ", ".join(f"{k}: {n}" for k, n in sorted(r["auto_draft_lens"].items()))
            lines.append(f"| {B} | " + " | ".join(cells) + f" | {r['auto']:.0f} | {r['auto_vs_best']:.3f} | "
                         f"{r['auto_vs_k3']:.3f} | {r['auto_vs_k0']:.3f} | {chosen} |")  # fmt: skip
        lines.append("")
    for name, draft in (("warmup_realistic", "the twin draft"), ("warmup_realistic_eagle", "the EAGLE head")):
        if name in record:
            lines += [_warmup_line(record[name], draft, record.get("compile", False)), ""]
    return "\n".join(lines)


def _warmup_line(w: dict, draft: str, compiled: bool) -> str:
    how, target = (" with compile=True", 120) if compiled else ("", 10)
    runs = w["warmup_ms_by_key"]
    slowest = max(runs, key=runs.get, default=None)  # a first use (imports, compiles) shows here
    longest = f" (the longest, {slowest}: {runs[slowest] / 1e3:.1f} s)" if slowest else ""
    return (
        f"Warm-up of batch sizes 1..8 x K in (1, 3, 5) x greedy and top_k with {draft}{how} ({w['keys']} keys): "
        f"{w['seconds']:.1f} s (target <= {target} s): the keys' eager warm-up runs {w['warmup_runs_s_sum']:.1f} s"
        f"{longest}, "
        f"their captures {w['capture_s_sum']:.1f} s, at most {w['capture_ms_max']:.1f} ms per key; graph pool "
        f"{w['shared_pool_bytes'] / 2**20:.1f} MiB against {w['largest_key_alone_bytes'] / 2**20:.1f} MiB for "
        f"the largest key alone ({w['ratio']:.2f}x, target <= 1.5x)."
    )


def _plot(record: dict, out: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    from pathlib import Path

    results = record["results"]
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, (name, rows) in zip(axes[0], results.items()):
        bs = sorted(rows["by_batch"])
        for k in LENS:
            ax.plot(bs, [rows["by_batch"][b][f"K={k}"] for b in bs], marker=".", label=f"K={k}", alpha=0.7)
        ax.plot(bs, [rows["by_batch"][b]["auto"] for b in bs], marker="o", color="black", label="auto")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel("tokens / s")
        ax.set_title(name)
        ax.legend(fontsize=7)
    Path(out).mkdir(parents=True, exist_ok=True)
    fig.savefig(Path(out) / "adaptive.png", dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    main()
