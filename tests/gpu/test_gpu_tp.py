"""TP=2 on two GPUs (NCCL): the step graph with one broadcast inside captures, replays and matches TP=1."""

import json

import pytest
import torch
import torch.multiprocessing as mp

from stepgraph import RunnerConfig, Toggles
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from tests.e2e.test_tp import _port
from tests.tp_worker import prompts, worker

pytestmark = [pytest.mark.gpu, pytest.mark.multi_gpu]


def _run(tmp_path, **opts):
    mp.spawn(worker, args=(2, _port(), str(tmp_path), {"backend": "nccl", **opts}), nprocs=2, join=True)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("packed", [True, False])
def test_tp2_step_graph_matches_tp1(tmp_path, packed):
    r0, r1 = _run(tmp_path, perturb=True, packed=packed)
    assert r0["outputs"] == r1["outputs"]
    assert r0["info"]["captured_keys"] and r0["info"]["replays"] > 0
    assert r0["info"]["fused_copy_keys"] == r1["info"]["fused_copy_keys"] != []  # NCCL inside a fused launch
    target, draft = build("tiny", device="cuda:0", dtype=torch.bfloat16)
    dec = SpecDecoder.for_example(
        target, draft, max_batch=4, config=RunnerConfig(toggles=Toggles.all(True), progress=False)
    )
    tp1 = dec.generate(prompts(4, target.cfg.vocab_size), max_new_tokens=16)
    assert r0["outputs"] == tp1
