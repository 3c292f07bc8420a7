"""Tensor parallelism on CPU: two gloo processes; rank 1's verify logits are perturbed."""

import json
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.tp_worker import worker


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, **opts):
    mp.spawn(worker, args=(2, _port(), str(tmp_path), opts), nprocs=2, join=True)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def test_one_packed_broadcast_per_step_makes_ranks_agree(tmp_path):
    r0, r1 = _run(tmp_path, perturb=True, packed=True)
    assert r0["outputs"] == r1["outputs"]  # rank 1 holds rank 0's result bit for bit
    assert r0["broadcasts"] == r0["steps"] == r1["broadcasts"] == r1["steps"]  # exactly one per step


def test_per_field_broadcasts_agree_too(tmp_path):
    r0, r1 = _run(tmp_path, perturb=True, packed=False)
    assert r0["outputs"] == r1["outputs"]
    assert r0["broadcasts"] == 6 * r0["steps"]


def test_auto_draft_length_is_the_same_on_every_rank_whatever_each_host_measures(tmp_path):
    """Rank 1's host measures every key's step time far off from rank 0's; the ranks still pick the same K
    every step (rank 0's times are shared), so their collectives and outputs agree."""
    r0, r1 = _run(tmp_path, perturb=True, num_draft_tokens="auto", skew_times=True)
    assert r0["outputs"] == r1["outputs"]
    assert r0["draft_len_steps"] == r1["draft_len_steps"] and sum(r0["draft_len_steps"].values()) == r0["steps"]
    assert r0["info"]["step_ms"] == r1["info"]["step_ms"]


def test_log_probabilities_score_the_shared_tokens_on_every_rank(tmp_path):
    """Rank 1's verify logits are perturbed, so its own argmax often differs from rank 0's token. Each rank
    scores the tokens both emit (rank 0's) under its own logits: where a token is not the rank's own most
    probable, its log-probability is below that one's; where it is, the two are equal."""
    r0, r1 = _run(tmp_path, perturb=True, logprobs=1)
    assert r0["outputs"] == r1["outputs"]
    differ = 0
    for rank in (r0, r1):
        for out, lps, tops in zip(rank["outputs"], rank["logprobs"], rank["top1"]):
            assert len(lps) == len(tops) == len(out)
            for token, lp, (best, best_lp) in zip(out, lps, tops):
                assert lp == pytest.approx(best_lp, abs=1e-5) if token == best else lp < best_lp - 1e-6
                differ += token != best
    assert differ > 0  # rank 1 scored tokens it would not have emitted


def test_a_paged_cache_hands_out_the_same_pages_on_every_rank(tmp_path):
    """A pool that makes requests wait and sit steps out: both ranks take the same decisions from the
    shared tokens, so their pages, stalls and outputs agree."""
    r0, r1 = _run(tmp_path, perturb=True, overrides={"kv": "paged", "page_size": 4, "num_pages": 16})
    assert r0["outputs"] == r1["outputs"]
    assert r0["info"]["kv"] == r1["info"]["kv"] and r0["info"]["kv"]["pages_held"] == 0
    g0, g1 = r0["info"]["generation"], r1["info"]["generation"]
    assert g0["stalled"] == g1["stalled"] and g0["steps"] == g1["steps"] == r0["broadcasts"]


def test_without_broadcast_the_perturbed_rank_diverges(tmp_path):
    r0, r1 = _run(tmp_path, perturb=True, tp=False)
    assert r0["outputs"] != r1["outputs"]  # the test above can fail


def agree_worker(rank: int, world: int, port: int, out_dir: str, fault: str) -> None:
    """Capture decisions must agree: rank 1's scripted memory refuses (``fault="memory"``) or its capture
    fails (``fault="capture"``), and both ranks take that outcome."""
    from stepgraph import Buffer, RunnerConfig, StepGraphRunner, Toggles
    from stepgraph.keys import GraphKey
    from stepgraph.memory import MemoryGuard, MemoryReading, ReleaseBudget
    from stepgraph.sampling import Sampling
    from stepgraph.speculative.tp import TensorParallel
    from tests.helpers import ScriptedReader, SimulatedBackend

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        free = 0 if (rank == 1 and fault == "memory") else (1 << 40)
        fail = RuntimeError("capture failed on this rank") if (rank == 1 and fault == "capture") else None
        reader = ScriptedReader(MemoryReading(free=free, total=1 << 41, reserved=0, allocated=0))
        tp = TensorParallel()
        runner = StepGraphRunner(
            lambda buf, bs, s: {"y": buf["x"] * 2},
            {"x": Buffer((4,), torch.float32)},
            device="cpu",
            config=RunnerConfig(toggles=Toggles(), buckets=(1, 2, 4), progress=False),
            backend=SimulatedBackend(reader, fail=fail),
            guard=MemoryGuard(reader, 0, budget=ReleaseBudget()),
            agree=tp.agree,
        )
        runner.run({"x": torch.ones(2)})
        s = runner.stats(GraphKey(2, Sampling.GREEDY))
        with open(f"{out_dir}/agree{rank}.json", "w") as f:
            json.dump({"status": s.status, "cause": s.cause, "refusals": runner.info()["memory_refusals"]}, f)
    finally:
        dist.destroy_process_group()


def _agree(tmp_path, fault):
    mp.spawn(agree_worker, args=(2, _port(), str(tmp_path), fault), nprocs=2, join=True)
    return [json.loads((tmp_path / f"agree{i}.json").read_text()) for i in range(2)]


def test_memory_refusal_on_one_rank_is_a_refusal_on_all(tmp_path):
    r = _agree(tmp_path, "memory")
    assert r[0]["status"] == r[1]["status"] == "refused"
    assert r[0]["refusals"] == 0 and r[1]["refusals"] == 1  # rank 0 allowed locally, outvoted by rank 1


def test_capture_failure_on_one_rank_discards_the_key_on_all(tmp_path):
    r = _agree(tmp_path, "capture")
    assert r[0]["status"] == r[1]["status"] == "failed"
    assert (r[0]["cause"], r[1]["cause"]) == ("peer_failed", "step_error")


def test_tensor_parallel_needs_an_initialised_group():
    from stepgraph.speculative.tp import TensorParallel

    with pytest.raises(RuntimeError, match="init_process_group"):
        TensorParallel()
