"""A tensor-parallel decode worker on the example model: test harness for the TP tests and benchmark.

Every rank holds the same example model (replicated weights); what the ranks must agree on is the
verify result, which :class:`~stepgraph.speculative.tp.TensorParallel` broadcasts from rank 0 once per step.
``perturb`` adds noise to rank 1's verify logits, so without the broadcast the ranks would diverge.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from stepgraph.config import RunnerConfig, Toggles
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from stepgraph.speculative.tp import TensorParallel


class _Perturbed:
    """Adds large fixed noise to the verify forward's logits (``T == K + 1``) of one rank.

    The noise is drawn once, here: a step that drew it from a generator of its own during capture would
    fail (the capture only registers torch's default generator).
    """

    def __init__(self, model, k1: int, seed: int) -> None:
        self.model, self.k1 = model, k1
        gen = torch.Generator(device=model.device).manual_seed(seed)
        shape = (k1, model.cfg.vocab_size)
        self.noise = (torch.randn(shape, generator=gen, device=model.device) * 10).to(model.dtype)
        self.__dict__.update({k: getattr(model, k) for k in ("cfg", "device", "dtype")})

    def __call__(self, tokens, positions, rows):
        logits, hidden = self.model(tokens, positions, rows)
        if tokens.shape[1] == self.k1:
            logits = logits + self.noise
        return logits, hidden


def prompts(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(k),), generator=g).tolist() for k in torch.randint(3, 12, (n,), generator=g)]


def worker(rank: int, world: int, port: int, out_dir: str, opts: dict) -> None:
    """One rank: init the process group, decode, write ``rank{r}.json`` into ``out_dir``."""
    backend = opts.get("backend", "gloo")
    log = Path(out_dir, f"rank{rank}.log")
    progress = log.open("a", buffering=1)  # line-buffered: the last line written survives a hang
    say = lambda msg: progress.write(f"{time.strftime('%H:%M:%S')} {msg}\n")  # noqa: E731
    faulthandler.dump_traceback_later(opts.get("hang_s", 120), exit=True, file=progress)  # a hang leaves stacks
    logging.basicConfig(stream=progress, level=logging.INFO, force=True)  # capture logs land beside progress
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    say("init_process_group")
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=timedelta(seconds=120), device_id=device if device.type == "cuda" else None,
    )  # fmt: skip
    try:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        preset = opts.get("preset", "tiny")
        target, draft = build(preset, device=device, dtype=dtype, **opts.get("overrides", {}))
        K = opts.get("k", 3)
        model = _Perturbed(target, K + 1, seed=rank) if (opts.get("perturb") and rank == 1) else target
        tp = TensorParallel() if opts.get("tp", True) else None
        toggles = Toggles.all(True) if opts.get("graphs", device.type == "cuda") else Toggles.all(False)
        toggles = toggles.with_piece("tp_broadcast", opts.get("packed", True))  # the piece decides packing
        dec = SpecDecoder.for_example(
            target, draft, num_draft_tokens=opts.get("num_draft_tokens", K), max_batch=opts.get("batch", 4),
            config=RunnerConfig(toggles=toggles, progress=False), tp=tp, logprobs=opts.get("logprobs"),
        )  # fmt: skip
        if opts.get("skew_times") and rank == 1:  # this rank's host measures every key far off from rank 0's
            measure = dec.runner.time_key
            dec.runner.time_key = lambda key, repeats=None: measure(key, repeats) * (1 + 7 * key.draft_len)
        dec.step.target = model  # the step's verify sees the (perturbed) logits; prefill does not
        p = prompts(opts.get("requests", 4), target.cfg.vocab_size)
        record = {"rank": rank}
        if device.type == "cuda":
            say("warmup")
            dec.warmup(opts.get("batch", 4))
            torch.cuda.synchronize()
        say("generate")
        t0 = time.perf_counter()
        requests = dec.serve(dec.make_requests(p, opts.get("max_new_tokens", 16)))
        out = [r.output for r in requests]
        record["logprobs"] = [r.logprobs for r in requests]
        record["top1"] = [[list(top[0]) for top in r.top_logprobs if top] for r in requests]
        say("done")
        if device.type == "cuda":
            torch.cuda.synchronize()
        record.update(
            outputs=out,
            steps=dec.stats.steps,
            broadcasts=tp.broadcasts if tp else 0,
            draft_len_steps=dec.stats.as_dict()["draft_len_steps"],
            seconds=time.perf_counter() - t0,
            info=dec.info(),
        )
        if opts.get("time_steps") and device.type == "cuda":
            dist.barrier()
            record["step_ms"] = dec.device_step_ms(opts.get("batch", 4))
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(record, default=str))
        dec.release()  # before destroy_process_group: NCCL teardown blocks while a graph holds its kernels
        say("released")
    finally:
        faulthandler.cancel_dump_traceback_later()
        progress.close()
        dist.destroy_process_group()
