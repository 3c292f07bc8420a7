"""Bad input to public functions and the runner: a clear error or a documented, defined result."""

import pytest
import torch

from stepgraph import Buffer, RunnerConfig, SamplingParams, StepGraphRunner, Toggles
from stepgraph.examples.model import build
from stepgraph.kernels.chain_sampling import chain_verify_sampling
from stepgraph.kernels.greedy_verify import greedy_chain_verify, greedy_chain_verify_ref
from stepgraph.speculative.decoder import SpecDecoder


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


def test_a_run_refused_for_its_second_input_leaves_the_first_uncopied():
    r = StepGraphRunner(
        lambda buf, bs, s: {"y": buf["x"].sum(-1) + buf["n"]},
        {"x": Buffer((4, 3), torch.float32), "n": Buffer((4,), torch.int64)},
        device="cpu",
        config=RunnerConfig(toggles=Toggles(), buckets=(2,), progress=False),
    )
    assert r.run({"x": torch.ones(2, 3), "n": torch.zeros(2, dtype=torch.int64)})["y"].tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match="'n'"):
        r.run({"x": torch.full((2, 3), 5.0), "n": torch.zeros(2, dtype=torch.int32)})
    assert r.run(batch_size=2)["y"].tolist() == [3.0, 3.0]  # x kept its rows: nothing half-copied
    assert r.run({"n": torch.arange(2)})["y"].tolist() == [3.0, 4.0]


def test_inputs_of_a_run_that_raised_in_its_capture_never_land_later():
    from stepgraph.errors import CaptureError
    from tests.helpers import SimulatedBackend

    r = StepGraphRunner(
        lambda buf, bs, s: {"y": buf["x"].sum(-1)},
        {"x": Buffer((4, 3), torch.float32)},
        device="cpu",
        backend=SimulatedBackend(fail=RuntimeError("boom")),
        config=RunnerConfig(buckets=(2,), progress=False, on_capture_error="raise"),
    )
    with pytest.raises(CaptureError):
        r.run({"x": torch.full((2, 3), 7.0)})
    out = r.run(batch_size=2)  # the key now runs eagerly, over the buffers as they were
    assert out["y"].tolist() == [0.0, 0.0] and r.buffers["x"].abs().sum() == 0  # never the 7s


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


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"seed": 2**64}, ValueError, "does not fit int64"),
        ({"seed": -(2**63) - 1}, ValueError, "does not fit int64"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
        ({"temperature": "0.7"}, TypeError, "temperature must be a number"),
        ({"temperature": 1.0, "top_k": 2.5}, TypeError, "top_k must be an int"),
    ],
)
def test_sampling_params_refuse_what_would_fail_later(kwargs, error, match):
    with pytest.raises(error, match=match):
        SamplingParams(**kwargs)


def test_largest_int64_seed_generates():
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, config=RunnerConfig(toggles=Toggles.all(False)), seed=2**63 - 1)
    out = dec.generate([[1, 2]], max_new_tokens=3, sampling=[SamplingParams(temperature=1.0, seed=2**63 - 1)])
    assert len(out[0]) == 3
    assert len(dec.generate([[1, 2]], max_new_tokens=3, sampling=SamplingParams(temperature=1.0))[0]) == 3


@pytest.mark.parametrize(
    "prompt,error,match",
    [
        ([1.7, 2.2], TypeError, "must be integers"),
        ([True, 2], TypeError, "must be integers"),
        ("hello", TypeError, "sequence of token ids"),
        (torch.tensor([1.0, 2.0]), ValueError, "integer dtype"),
    ],
)
def test_prompts_that_would_be_truncated_are_refused(prompt, error, match):
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, config=RunnerConfig(toggles=Toggles.all(False)))
    with pytest.raises(error, match=match):
        dec.generate([prompt], max_new_tokens=2)
    assert dec.generate([torch.tensor([1, 2])], max_new_tokens=2) == dec.generate([[1, 2]], max_new_tokens=2)


@pytest.mark.parametrize(
    "eos,error,match",
    [
        ("2", TypeError, "eos_token_id must be an int"),
        (-1, ValueError, "outside the vocabulary"),
        (512, ValueError, "outside the vocabulary"),
        ([3, 999], ValueError, "outside the vocabulary"),
    ],
)
def test_eos_ids_that_never_match_are_refused(eos, error, match):
    target, draft = build("tiny")
    with pytest.raises(error, match=match):
        SpecDecoder.for_example(target, draft, eos_token_id=eos)


def test_a_list_of_eos_ids_stops_at_the_first_one_emitted():
    from stepgraph.examples.model import greedy_reference

    target, draft = build("tiny")
    ref = greedy_reference(target, [5, 6, 7], 20)
    dec = SpecDecoder.for_example(target, draft, eos_token_id=[ref[9], ref[4]])
    assert dec.eos_token_id == (ref[9], ref[4])
    out = dec.generate([[5, 6, 7]], max_new_tokens=20)[0]
    stop = min(ref.index(ref[9]), ref.index(ref[4]))
    assert out == ref[: stop + 1]


@pytest.mark.parametrize("max_batch", [0, -1, 9])
def test_max_batch_outside_the_requests_is_refused(max_batch):
    target, draft = build("tiny")  # 8 requests
    with pytest.raises(ValueError, match="max_batch must be in 1..max_requests"):
        SpecDecoder.for_example(target, draft, max_batch=max_batch)


@pytest.mark.parametrize("shape", [4, "4", (4.0, 2), None])
def test_buffer_shape_that_is_not_a_tuple_of_ints(shape):
    with pytest.raises(TypeError, match=r"Buffer shape must be a tuple of ints .* e.g. Buffer\(\(8,\)"):
        Buffer(shape, torch.float32)


@pytest.mark.parametrize("sampling", [None, 7, 1.5, True])
def test_run_with_a_sampling_that_is_not_a_class(sampling):
    with pytest.raises(ValueError, match="greedy, temperature, top_k, top_k_top_p"):
        runner().run({"x": torch.zeros(1, 3)}, sampling)


def test_run_takes_sampling_by_name():
    r = runner()
    assert r.run({"x": torch.ones(1, 3)}, "greedy")["y"].tolist() == [3.0]


@pytest.mark.parametrize(
    "config,match",
    [
        ({"block": 1000}, "power of two"),
        ({"block": 0}, "power of two"),
        ({"num_warps": 3}, "num_warps"),
        ({"target_programs": 0}, "target_programs"),
        ({"blocks": 1024}, "unknown kernel config"),
    ],
)
def test_kernel_configs_are_checked(config, match):
    from stepgraph.kernels.draft_extend_tail import argmax_rows, draft_extend_tail

    x = torch.randn(2, 3, 40)
    with pytest.raises(ValueError, match=match):
        greedy_chain_verify(x, torch.zeros(2, 2, dtype=torch.long), config=config)
    with pytest.raises(ValueError, match=match):
        draft_extend_tail(x[0], None, torch.tensor([0, 1]), config=config)
    with pytest.raises(ValueError, match=match):
        argmax_rows(x[0], config=config)


def test_sampling_seq_lens_on_another_device():
    x = torch.randn(1, 2, 10)
    z = torch.zeros(1, dtype=torch.long)
    other = torch.zeros(1, dtype=torch.long, device="meta")  # any device but the logits'
    with pytest.raises(ValueError, match="seq_lens is on meta, logits on cpu"):
        chain_verify_sampling(x, z[:, None], torch.ones(1), z, torch.ones(1), z, z, seq_lens=other)
