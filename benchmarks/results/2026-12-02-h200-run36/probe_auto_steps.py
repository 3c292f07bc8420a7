"""Probe (issue 32, run 36): why does `auto` run 4-7% below the mix of fixed-K steps it takes? The
bench_adaptive setup (example model, 28 layers, twin draft, 48 tokens, sync loop) at acceptance 0.9,
B = 16 and 32, and 0.6 at B = 4: fixed K = 1, 2, 3; auto; and `replay`, a policy that returns the K
sequence auto took (no host work). Per step: wall time launch to launch (on_step), device time (step
events), K taken; per policy the host time in choose()/observe()."""
import statistics
import sys
import time
from collections import defaultdict

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402
from _timing import example_models, sync  # noqa: E402

from stepgraph import RunnerConfig, SpecDecoder, Toggles  # noqa: E402
from stepgraph.examples.model import TwinDraft  # noqa: E402
from stepgraph.speculative.draft_policy import AutoDraftLength, FixedDraftLength  # noqa: E402


class Timed:
    """Wraps a policy: the K of every step and the host time of its choose/observe."""

    def __init__(self, inner):
        self.inner, self.ks, self.host = inner, [], 0.0

    def choose(self, batch, bucket):
        t = time.perf_counter()
        k = self.inner.choose(batch, bucket)
        self.host += time.perf_counter() - t
        self.ks.append(k)
        return k

    def observe(self, batch, accepted, draft_len):
        t = time.perf_counter()
        self.inner.observe(batch, accepted, draft_len)
        self.host += time.perf_counter() - t

    def forget(self, r):
        getattr(self.inner, "forget", lambda r: None)(r)


class Replay(FixedDraftLength):
    def __init__(self, ks):
        super().__init__(ks[0])
        self.ks, self.i = list(ks), 0

    def choose(self, batch, bucket):
        k = self.ks[min(self.i, len(self.ks) - 1)]
        self.i += 1
        return k


target, draft = example_models(num_layers=28, max_requests=65, draft="same")
g = torch.Generator().manual_seed(0)
prompts = [torch.randint(0, target.cfg.vocab_size, (32,), generator=g).tolist() for _ in range(64)]
for a, batches in ((0.9, (16, 32)), (0.6, (4,))):
    cfg = RunnerConfig(toggles=Toggles.all(True), progress=False, buckets=(1, 4, 8, 16, 32, 64))
    auto = AutoDraftLength(draft_lens=(0, 1, 2, 3, 5))
    dec = SpecDecoder.for_example(target, TwinDraft(draft.model, a), num_draft_tokens=auto, max_batch=64, config=cfg)
    dec.warmup(64)
    dec.scheduler.record_step_events = True
    for B in batches:
        print(f"# A={a} B={B} step_ms " + " ".join(f"K={k}:{dec.step_ms(B, k):.2f}" for k in (0, 1, 2, 3)), flush=True)
        dec.policy = FixedDraftLength(1)
        dec.generate(prompts[:B], max_new_tokens=48)
        last_auto = None
        for rnd in range(3):
            pols = [("K=1", FixedDraftLength(1)), ("K=2", FixedDraftLength(2)), ("K=3", FixedDraftLength(3)),
                    ("auto", auto)] + ([("replay", Replay(last_auto))] if last_auto else [])
            for name, pol in pols:
                timed = Timed(pol)
                dec.policy = timed
                dec.stats = type(dec.stats)()
                dec.scheduler.step_events.clear()
                stamps = []
                sync()
                out = dec.generate(prompts[:B], max_new_tokens=48, on_step=lambda n: stamps.append(time.perf_counter()))
                sync()
                end = time.perf_counter()
                st = dec.stats
                dev = [s.elapsed_time(e) for s, e in dec.scheduler.step_events]
                wall = [(b - a_) * 1e3 for a_, b in zip(stamps, stamps[1:] + [end])]
                byk_w, byk_d = defaultdict(list), defaultdict(list)
                for k, w, d in zip(timed.ks, wall, dev):
                    byk_w[k].append(w)
                    byk_d[k].append(d)
                if name == "auto":
                    last_auto = list(timed.ks)
                per_k = " ".join(f"K={k}: n={len(byk_w[k])} wall {statistics.mean(byk_w[k]):.2f} dev "
                                 f"{statistics.mean(byk_d[k]):.2f}" for k in sorted(byk_w))
                print(f"A={a} B={B} r{rnd} {name}: {sum(map(len, out)) / st.decode_seconds:.0f} tok/s, "
                      f"{st.steps} steps, wall sum {sum(wall):.1f} dev sum {sum(dev):.1f} decode "
                      f"{st.decode_seconds * 1e3:.1f} ms, policy host {timed.host * 1e3 / max(st.steps, 1):.3f} "
                      f"ms/step | {per_k}", flush=True)
    dec.release()
