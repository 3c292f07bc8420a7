"""The generate loop on the example model (CPU): correctness of speculation, joins/leaves, overlap."""

import time

import pytest
import torch

from stepgraph import RunnerConfig, SamplingParams, Toggles
from stepgraph.examples.model import build, greedy_reference
from stepgraph.speculative.decoder import SpecDecoder


def prompts(n=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 512, (int(k),), generator=g).tolist() for k in torch.randint(2, 16, (n,), generator=g)]


def decoder(toggles=None, draft="eagle", **kw):
    target, dr = build("tiny", draft=draft)
    return SpecDecoder.for_example(target, dr, config=RunnerConfig(toggles=toggles or Toggles.all(True)), **kw), target


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_speculation_equals_plain_greedy(k):
    dec, target = decoder(num_draft_tokens=k, max_batch=3)  # 7 requests through a batch of 3: joins and leaves
    lengths = [5, 17, 9, 30, 1, 12, 20]
    out = dec.generate(prompts(), max_new_tokens=lengths)
    assert out == [greedy_reference(target, p, m) for p, m in zip(prompts(), lengths)]
    assert [len(o) for o in out] == lengths
    hist = dec.runner.info()["batch_size_histogram"]
    assert len(hist) > 1  # the batch shrank as requests finished: keys changed


def test_greedy_speculation_with_the_skinny_matmul_equals_plain_greedy():
    """The example model's projections through the Triton skinny matmul (interpreter here)."""
    target, dr = build("tiny", num_layers=1, matmul="triton")
    dec = SpecDecoder.for_example(target, dr, max_batch=3, config=RunnerConfig(toggles=Toggles.all(True)))
    lengths = [5, 9, 3]
    out = dec.generate(prompts(3), max_new_tokens=lengths)
    assert out == [greedy_reference(target, p, m) for p, m in zip(prompts(3), lengths)]


def test_eos_stops_a_request_and_is_kept():
    dec, target = decoder(max_batch=4)
    ref = greedy_reference(target, prompts()[0], 20)
    eos = ref[5]
    dec.eos_token_id = eos
    out = dec.generate(prompts()[:1], max_new_tokens=20)[0]
    assert out == ref[: ref.index(eos) + 1]


def test_identical_draft_accepts_all_k():
    dec, _ = decoder(draft="same", num_draft_tokens=3)
    dec.generate(prompts(3), max_new_tokens=25)
    assert dec.stats.mean_accept_len == pytest.approx(4.0)


def test_sampled_reproduces_under_seed_and_differs_across_seeds():
    sp = [SamplingParams(temperature=0.9), SamplingParams(temperature=1.0, top_k=30, top_p=0.9), SamplingParams()]
    runs = [decoder(seed=s, max_batch=3)[0].generate(prompts(3), max_new_tokens=6, sampling=sp) for s in (1, 1, 2)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert runs[0][2] == runs[2][2]  # the greedy request in a mixed batch is seed-independent


@pytest.mark.parametrize("toggles", [Toggles.all(True), Toggles.all(False)], ids=["pieces-on", "plain"])
def test_min_p_one_keeps_only_the_most_probable_token(toggles):
    """min_p = 1 keeps only the argmax, so sampling must reproduce greedy decoding exactly: the filter
    reaches the prefill's first token and every verify, through the kernels and through torch."""
    greedy = decoder(toggles, max_batch=3)[0].generate(prompts(3), max_new_tokens=10)
    sp = SamplingParams(temperature=1.3, top_k=7, min_p=1.0)
    assert decoder(toggles, max_batch=3)[0].generate(prompts(3), max_new_tokens=10, sampling=sp) == greedy


@pytest.mark.parametrize("toggles", [Toggles.all(True), Toggles.all(False)], ids=["pieces-on", "plain"])
def test_overlapped_loop_equals_synchronous_loop(toggles):
    lengths = [3, 25, 8, 14, 1, 19, 6]
    sync, _ = decoder(toggles, max_batch=3)
    over, _ = decoder(toggles, max_batch=3)
    a = sync.generate(prompts(), max_new_tokens=lengths, overlap=False)
    b = over.generate(prompts(), max_new_tokens=lengths, overlap=True)
    assert a == b
    assert over.stats.discarded_steps >= 1 and sync.stats.discarded_steps == 0  # finish seen one step late


def test_overlapped_single_request_moves_to_the_view_slot():
    dec, target = decoder(max_batch=4)
    out = dec.generate(prompts(2), max_new_tokens=[4, 30], overlap=True)
    assert out == [greedy_reference(target, p, m) for p, m in zip(prompts(2), [4, 30])]
    assert "bs=1/greedy/k=3" in dec.runner.info()["keys"]  # ran alone at the end, through slot 0


def test_generate_leaves_the_callers_random_stream_alone():
    dec, _ = decoder(Toggles.all(False), max_batch=3)  # torch sampling paths: they draw from torch's generator
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    dec.generate(prompts(3), max_new_tokens=6, sampling=SamplingParams(temperature=1.0, top_k=20))
    assert torch.equal(torch.rand(3), expected)


def test_sampling_kernels_off_means_off_in_prefill_too(monkeypatch):
    import stepgraph.speculative.chunk_forward as prefill_sampling  # the first token's sampling
    import stepgraph.speculative.pieces as pieces

    def kernel_called(*args, **kwargs):
        raise AssertionError("a sampling kernel ran with STEPGRAPH_TWO_LAUNCH_SAMPLING=0")

    monkeypatch.setattr(pieces, "chain_verify_sampling", kernel_called)
    monkeypatch.setattr(prefill_sampling, "chain_verify_sampling", kernel_called)
    dec, _ = decoder(Toggles.all(True).with_piece("two_launch_sampling", False), max_batch=3)
    out = dec.generate(prompts(3), max_new_tokens=6, sampling=SamplingParams(temperature=0.9, top_p=0.8))
    assert [len(o) for o in out] == [6, 6, 6]


def test_each_piece_governs_only_its_own_code():
    relay_off = decoder(Toggles.all(True).with_piece("fused_relay", False))[0].step.relay
    copy_off = decoder(Toggles.all(True).with_piece("one_launch_copy", False))[0]
    assert not relay_off._gather.fused and not relay_off.single_views  # the relay's gather follows fused_relay
    assert copy_off.step.relay._gather.fused  # ... not the runner's copy-in toggle
    assert not copy_off.runner.buffers.copy_plan.uses_kernel


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlap"])
def test_requests_join_as_they_arrive(overlap):
    """A serving trace: requests arrive over time (some while the batch is idle), join and leave; every
    output equals plain greedy decoding, and the batch changed along the way."""
    dec, target = decoder(max_batch=3)
    lengths = [9, 4, 12, 6, 3, 8, 5]
    arrivals = [0.0, 0.0, 0.02, 0.05, 0.05, 0.3, 0.31]  # the last two come after everything else finished
    out = dec.generate(prompts(), max_new_tokens=lengths, arrivals=arrivals, overlap=overlap)
    assert out == [greedy_reference(target, p, m) for p, m in zip(prompts(), lengths)]
    assert dec.stats.batch_changes >= 4 and dec.in_use == (0, 0)


def test_arrivals_are_checked():
    dec, _ = decoder()
    with pytest.raises(ValueError, match="arrivals"):
        dec.generate(prompts(2), max_new_tokens=4, arrivals=[0.0])
    with pytest.raises(ValueError, match="arrivals"):
        dec.generate(prompts(2), max_new_tokens=4, arrivals=[0.0, -1.0])


def test_a_request_taking_over_a_slot_runs_under_its_own_sampling_class():
    """One request at a time: the second takes over the first one's slot (the view slot), so the slot list
    does not change between them, yet its steps run under its own class, and its tokens are those it
    draws alone."""
    sampled = SamplingParams(temperature=1.0, top_k=20, seed=7)
    dec, _ = decoder(max_batch=1)
    out = dec.generate(prompts(2), max_new_tokens=[3, 5], sampling=[SamplingParams(), sampled])
    assert dec.stats.batch_changes == 1  # the same slot list throughout
    keys = dec.runner.info()["keys"]
    assert keys["bs=1/greedy/k=3"]["eager_runs"] >= 1 and keys["bs=1/top_k/k=3"]["eager_runs"] >= 1
    assert keys["bs=1/greedy/k=3"]["eager_runs"] + keys["bs=1/top_k/k=3"]["eager_runs"] == dec.stats.steps
    alone, _ = decoder(max_batch=1)
    assert out[1] == alone.generate(prompts(2)[1:], max_new_tokens=5, sampling=sampled)[0]


def test_waiting_for_arrivals_is_idle_time_not_decode_time():
    dec, _ = decoder(max_batch=2)
    t0 = time.perf_counter()
    out = dec.generate(prompts(2), max_new_tokens=3, arrivals=[0.3, 0.3])
    elapsed = time.perf_counter() - t0
    assert [len(o) for o in out] == [3, 3]
    stats = dec.stats.as_dict()
    assert stats["idle_seconds"] >= 0.25  # the loop slept until the first arrival
    assert 0 < stats["decode_seconds"] <= elapsed - stats["idle_seconds"] - stats["prefill_seconds"]


def test_launch_sees_a_batch_list_changed_in_place():
    """A custom loop may keep one list and append to it: the next launch runs under the new class."""
    dec, _ = decoder(max_batch=2)
    sampled = SamplingParams(temperature=1.0, top_k=20)
    first, second = dec.make_requests(prompts(2), max_new_tokens=8, sampling=[SamplingParams(), sampled])
    dec.scheduler.admit(first)
    batch = [first]
    dec.scheduler.launch(batch)
    dec.scheduler.admit(second)
    batch.append(second)
    dec.scheduler.launch(batch)
    runs = {k: v["eager_runs"] for k, v in dec.runner.info()["keys"].items()}
    assert runs == {"bs=1/greedy/k=3": 1, "bs=2/top_k/k=3": 1}
    dec.finish(batch)
    assert dec.in_use == (0, 0)


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_on_tokens_streams_every_requests_tokens_as_they_come(overlap):
    """Per request, the callbacks' tokens in order are its output (prefill's first token, then each step's,
    EOS and length cuts applied); a callback that raises reaches the caller with every slot given back."""
    dec, target = decoder(max_batch=3)
    seen, steps = {}, []
    lengths = [5, 11, 7, 9]

    def on_tokens(i, tokens):
        seen.setdefault(i, []).append(list(tokens))
        steps.append(dec.stats.steps)

    out = dec.generate(prompts(4), max_new_tokens=lengths, overlap=overlap, on_tokens=on_tokens)
    assert out == [greedy_reference(target, p, m) for p, m in zip(prompts(4), lengths)]
    assert [sum(seen[i], []) for i in range(4)] == out
    assert all(len(chunk) >= 1 for chunks in seen.values() for chunk in chunks)
    assert len(set(steps)) > 3  # fed as the steps went, not at the end

    def fails(i, tokens):
        if len(tokens) > 1:
            raise RuntimeError("client went away")

    with pytest.raises(RuntimeError, match="client went away"):
        dec.generate(prompts(4), max_new_tokens=lengths, overlap=overlap, on_tokens=fails)
    assert dec.slots.free() == dec.max_requests
    assert dec.generate(prompts(2), max_new_tokens=4) == [greedy_reference(target, p, 4) for p in prompts(2)]
