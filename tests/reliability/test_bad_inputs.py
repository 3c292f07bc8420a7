"""Bad input to public functions and the runner: a clear error or a documented, defined result."""

import pytest
import torch

from stepgraph import Buffer, RunnerConfig, SamplingParams, StepGraphRunner, Toggles
from stepgraph.examples.model import build
from stepgraph.kernels.chain_sampling import chain_verify_sampling
from stepgraph.kernels.greedy_verify import greedy_chain_verify, greedy_chain_verify_ref
from stepgraph.spec.generate import SpecDecoder


def runner():
    return StepGraphRunner(
        lambda buf, bs, s: {"y": buf["x"].sum(-1)},
        {"x": Buffer((4, 3), torch.float32)},
        device="cpu",
        config=RunnerConfig(toggles=Toggles(), buckets=(1, 2), progress=False),
    )


@pytest.mark.parametrize(
    "inputs,match",
    [
        ({"x": torch.zeros(2, 3, dtype=torch.float64)}, "dtype"),
        ({"x": torch.zeros(2, 4)}, "shape"),
        ({"x": torch.zeros(0, 3)}, "empty batch"),
        ({"x": torch.zeros(5, 3)}, "exceeds"),
        ({"y": torch.zeros(2, 3)}, "not a declared buffer"),
    ],
)
def test_runner_rejects_bad_inputs(inputs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        runner().run(inputs)


def test_batch_above_largest_bucket_runs_eagerly_and_is_counted():
    r = runner()
    out = r.run({"x": torch.ones(3, 3)})  # buckets (1, 2); the buffers hold 4
    assert out["y"].tolist() == [3.0, 3.0, 3.0] and r.info()["oversize_runs"] == 1


def test_non_contiguous_input_is_copied_correctly():
    r = runner()
    x = torch.arange(12.0).view(3, 4)[:2, :3]  # strided rows
    assert r.run({"x": x})["y"].tolist() == x.sum(-1).tolist()


def test_nan_and_inf_logits_have_defined_results():
    x = torch.randn(2, 4, 50)
    x[0, 0, 7] = float("nan")
    x[0, 0, 9] = float("nan")
    x[1, 0] = float("inf")
    d = torch.argmax(x, -1)[:, :3]
    r = greedy_chain_verify(x, d)
    assert torch.equal(r.predict, torch.argmax(x, -1))  # torch.argmax semantics: first NaN, first +inf
    assert r.predict[0, 0].item() == 7 and r.predict[1, 0].item() == 0
    T = torch.ones(2)
    s = chain_verify_sampling(
        x, d, T, torch.zeros(2, dtype=torch.long), torch.ones(2), torch.arange(2), torch.zeros(2, dtype=torch.long)
    )
    g = greedy_chain_verify_ref(x, d)
    # a row with NaN or +inf follows the greedy rule: the draft equal to its argmax is accepted
    assert s.tokens[:, 0].tolist() == g.predict[:, 0].tolist() == [7, 0]


def test_draft_ids_beyond_the_vocabulary_are_never_accepted():
    x = torch.randn(1, 3, 20)
    d = torch.tensor([[99, 5]])
    assert greedy_chain_verify(x, d).num_accepted.item() == 0
    T = torch.ones(1)
    s = chain_verify_sampling(
        x,
        d,
        T,
        torch.zeros(1, dtype=torch.long),
        torch.ones(1),
        torch.zeros(1, dtype=torch.long),
        torch.zeros(1, dtype=torch.long),
    )
    assert s.num_accepted.item() == 0


def test_negative_lengths_are_plain_arithmetic():
    x = torch.randn(1, 2, 10)
    r = greedy_chain_verify(x, torch.argmax(x, -1)[:, :1], torch.tensor([-5]))
    assert r.new_seq_lens.item() == -5 + r.num_accepted.item() + 1


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda d: d.generate([[1, 2, 600]], max_new_tokens=4), r"token ids must be in \[0, 512\)"),
        (lambda d: d.generate([[1, -1]], max_new_tokens=4), "token ids"),
        (lambda d: d.generate([[]], max_new_tokens=4), "empty prompt"),
        (lambda d: d.generate([[1, 2]], max_new_tokens=0), "max_new_tokens"),
        (lambda d: d.generate([[1, 2]], max_new_tokens=10_000), "max_seq_len"),
        (lambda d: d.generate([[1], [2]], max_new_tokens=[4]), "one max_new_tokens"),
    ],
)
def test_decoder_rejects_bad_requests(call, match):
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, config=RunnerConfig(toggles=Toggles.all(False)))
    with pytest.raises(ValueError, match=match):
        call(dec)


def test_sampling_params_validation():
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(temperature=1.0, top_p=0.0)
