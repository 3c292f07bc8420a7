"""The chain step graph on the GPU: greedy == eager, every toggle combination, recapture, overlap."""

import itertools

import pytest
import torch

from stepgraph import RecaptureRefused, RunnerConfig, SamplingParams, Toggles
from stepgraph.examples.model import build, greedy_reference
from stepgraph.speculative.decoder import SpecDecoder

pytestmark = pytest.mark.gpu


def prompts(n=6, vocab=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(k),), generator=g).tolist() for k in torch.randint(3, 15, (n,), generator=g)]


def decode(
    toggles,
    *,
    dtype=torch.bfloat16,
    overlap=False,
    sampling=SamplingParams(),
    seed=0,
    draft="eagle",
    max_batch=4,
    n=6,
    attention="sdpa",
    **kw,
):
    target, dr = build("tiny", device="cuda", dtype=dtype, draft=draft, attention=attention)
    dec = SpecDecoder.for_example(
        target, dr, max_batch=max_batch, config=RunnerConfig(toggles=toggles, progress=False), seed=seed
    )
    out = dec.generate(prompts(n), max_new_tokens=24, sampling=sampling, overlap=overlap, **kw)
    return dec, out, target


def test_step_graph_greedy_equals_eager_and_plain_greedy_fp32():
    dec, out, target = decode(Toggles.all(True), dtype=torch.float32)
    _, eager, _ = decode(Toggles.all(False), dtype=torch.float32)
    assert out == eager
    info = dec.info()
    assert info["replays"] > 0 and info["captured_keys"]
    assert out == [greedy_reference(target, p, 24) for p in prompts()]


@pytest.mark.parametrize("attention", ["sdpa", "triton"])
def test_step_graph_greedy_equals_eager_bf16(attention):
    dec, out, _ = decode(Toggles.all(True), attention=attention)
    _, eager, _ = decode(Toggles.all(False), attention=attention)
    assert out == eager and dec.info()["replays"] > 0


def test_decode_attention_compiled_matches_sdpa_on_the_gpu():
    from stepgraph.kernels.decode_attention import decode_attention, reference_attention

    g = torch.Generator(device="cuda").manual_seed(0)
    for dtype, tol in ((torch.bfloat16, 2e-2), (torch.float32, 1e-5)):
        kv = torch.randn(9, 2, 8, 1000, 128, device="cuda", generator=g).to(dtype)
        q = torch.randn(5, 4, 16, 128, device="cuda", generator=g).to(dtype)
        rows = torch.tensor([3, 0, 8, 5, 1], device="cuda")
        positions = torch.tensor([996, 3, 517, 128, 64], device="cuda")[:, None] + torch.arange(4, device="cuda")
        got = decode_attention(q, kv, rows, positions, 128**-0.5)
        torch.testing.assert_close(
            got.float(), reference_attention(q, kv, rows, positions, 128**-0.5), atol=tol, rtol=tol
        )


def test_every_piece_combination_is_bitwise_identical():
    names = Toggles.piece_names()
    base = None
    for bits in itertools.product([False, True], repeat=len(names)):
        if sum(bits) not in (0, 1, len(names) - 1, len(names)):
            continue  # all on/off, each alone, each off: 18 combinations of 256
        tog = Toggles(step_graph=True, **dict(zip(names, bits)))
        _, out, _ = decode(tog)
        base = base or out
        assert out == base, bits


def test_identical_draft_accepts_all_k():
    dec, _, _ = decode(Toggles.all(True), dtype=torch.float32, draft="same")
    assert dec.stats.mean_accept_len == pytest.approx(4.0)


def test_sampled_reproduces_under_seed_and_differs_across_seeds():
    sp = SamplingParams(temperature=0.9, top_k=40, top_p=0.9)
    a = decode(Toggles.all(True), sampling=sp, seed=1)[1]
    b = decode(Toggles.all(True), sampling=sp, seed=1)[1]
    c = decode(Toggles.all(True), sampling=sp, seed=2)[1]
    assert a == b and a != c


def test_overlapped_equals_synchronous():
    dec, over, _ = decode(Toggles.all(True), overlap=True, n=9)
    _, sync, _ = decode(Toggles.all(True), overlap=False, n=9)
    assert over == sync
    assert dec.stats.discarded_steps >= 1


def test_overlapped_loop_never_syncs_the_host_once_requests_are_admitted():
    """Requests finish at different steps (slots released, the batch shrinks to one and moves to slot 0):
    none of it may wait on the device, or the overlap is lost at every batch change."""
    target, dr = build("tiny", device="cuda", dtype=torch.bfloat16)
    dec = SpecDecoder.for_example(
        target, dr, max_batch=4, config=RunnerConfig(toggles=Toggles.all(True), progress=False)
    )
    dec.warmup(4)
    ref = dec.generate(prompts(4), max_new_tokens=24)

    def strict(_batch):  # from the first launch on (every prefill is done by then)
        torch.cuda.set_sync_debug_mode("error")

    try:
        out = dec.generate(prompts(4), max_new_tokens=24, overlap=True, on_step=strict)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert out == ref


def test_weight_update_refused_then_recaptured_with_new_weights():
    target, dr = build("tiny", device="cuda", dtype=torch.float32)
    dec = SpecDecoder.for_example(
        target, dr, max_batch=4, config=RunnerConfig(toggles=Toggles.all(True), progress=False)
    )
    p = prompts(2)
    before = dec.generate(p, max_new_tokens=12)
    new_head = torch.randn_like(target.lm_head)

    def swap():
        target.lm_head = new_head  # a new tensor: graphs hold the old address

    with pytest.raises(RecaptureRefused, match="release"):
        dec.step.update_weights(swap)
    dec.step.release()
    dec.step.update_weights(swap)
    after = dec.generate(p, max_new_tokens=12)
    assert after != before and dec.info()["captured_keys"]
    assert after == [greedy_reference(target, q, 12) for q in p]


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_online_serving_on_the_gpu_equals_a_list_and_aborts_free_their_slots(overlap):
    """serve(RequestQueue) from a serving thread with captured graphs: requests put by another thread, one
    aborted mid-stream, decode as the same list does, and every slot comes back."""
    import threading

    from stepgraph import RequestQueue

    target, draft = build("tiny", device="cuda")
    dec = SpecDecoder.for_example(target, draft, max_batch=4, config=RunnerConfig(progress=False))
    dec.warmup(4)
    want = dec.generate(prompts(), max_new_tokens=12)
    queue, made = RequestQueue(), dec.make_requests(prompts(), 12)
    made[2].on_tokens = lambda tokens: made[2].abort()
    server = threading.Thread(target=dec.serve, args=(queue,), kwargs={"overlap": overlap})
    server.start()
    for r in made:
        queue.put(r)
    queue.close()
    server.join()
    assert made[2].finish_reason == "abort" and made[2].output == want[2][: len(made[2].output)]
    assert [r.output for i, r in enumerate(made) if i != 2] == [w for i, w in enumerate(want) if i != 2]
    assert dec.slots.free() == dec.max_requests and dec.info()["captured_keys"]
