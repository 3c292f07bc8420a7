"""On the GPU: penalties inside the step graph give what the eager step gives, bit for bit, and greedy
decoding with them equals the reference decode; the state's apply equals its reference on the device."""

import pytest
import torch

from stepgraph import RunnerConfig, SamplingParams, Toggles
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from stepgraph.speculative.penalties import PenaltyState
from tests.e2e.test_penalties import (
    PENALISED,
    PROMPTS,
    draws_the_same_tokens_whether_penalised_or_not,
    reference_greedy,
)

pytestmark = pytest.mark.gpu

SAMPLED = [SamplingParams(temperature=0.8, top_k=40, seed=2, repetition_penalty=1.4, presence_penalty=0.5),
           SamplingParams(temperature=0.8, seed=3, logit_bias={5: 2.0, 17: float("-inf")}, bad_words_ids=[[5, 5], [9]]),
           SamplingParams(temperature=1.0, top_p=0.9, frequency_penalty=1.0, allowed_token_ids=range(0, 512, 3))]  # fmt: skip
# the penalised request ends first (9 tokens): the other two go on in the unpenalised keys
MIXED = [SamplingParams(), SamplingParams(repetition_penalty=1.8, no_repeat_ngram_size=2), SamplingParams()]


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("chunk", [None, 4], ids=["whole", "chunked"])
@pytest.mark.parametrize("params", [PENALISED, SAMPLED, MIXED], ids=["greedy", "sampled", "mixed"])
def test_step_graph_penalties_equal_eager(overlap, chunk, params):
    target, draft = build("tiny", device="cuda")
    got = []
    for toggles in (Toggles.all(True), Toggles(step_graph=False, prefill_graph=False)):
        dec = SpecDecoder.for_example(
            target, draft, max_batch=3, penalties=True, prefill_chunk=chunk, logprobs=2,
            config=RunnerConfig(toggles=toggles, progress=False),
        )  # fmt: skip
        requests = dec.make_requests(PROMPTS, [12, 9, 14], params)
        dec.serve(requests, overlap=overlap)
        if toggles.step_graph:
            replayed = {key.endswith("/penalised") for key, k in dec.info()["keys"].items() if k["replays"]}
            assert True in replayed and (False in replayed or params is not MIXED)
        got.append([(r.output, r.logprobs) for r in requests])
        dec.release()
    assert got[0] == got[1]
    if params is not SAMPLED:
        for prompt, (output, _), p in zip(PROMPTS, got[0], params):
            assert output == reference_greedy(target, prompt, len(output), p)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_a_request_draws_the_same_tokens_whether_its_batch_is_penalised_or_not(dtype):
    """The sampling kernels in the graphs: the same bits from the float32 copy as from the model's logits."""
    draws_the_same_tokens_whether_penalised_or_not(dtype, "cuda")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_apply_on_the_device_equals_the_cpu(dtype):
    V, L, B, K = 2500, 64, 6, 3  # more than one loop step of a dense bias row
    g = torch.Generator().manual_seed(0)
    states = [PenaltyState(8, V, L, dev) for dev in ("cpu", "cuda")]
    for slot in range(6):
        prompt = torch.randint(0, 50, (9,), generator=g).tolist()
        out = torch.randint(0, 50, (7,), generator=g)
        for s in states:
            s.admit(slot, SamplingParams(repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=-0.7,
                                         logit_bias={3 * slot: 1.5, 40 + slot: float("-inf"), 900: -2.0},
                                         bad_words_ids=[[out[-1].item(), 7], [slot]],
                                         allowed_token_ids=range(slot, V, 2) if slot > 3 else None))  # fmt: skip
            s.write_prompt(torch.tensor([prompt], device=s.device), torch.tensor([slot], device=s.device),
                           torch.tensor([0], device=s.device), torch.tensor([len(prompt)], device=s.device))  # fmt: skip
            s.record(out[None].to(s.device), torch.tensor([slot], device=s.device),
                     torch.tensor([len(prompt) - 1], device=s.device))  # fmt: skip
    logits = torch.randn(B, K + 1, V, generator=g).to(dtype)
    drafts = torch.randint(0, 50, (B, K), generator=g)
    slots, seq = torch.tensor([0, 5, 2, -1, 3, 1]), torch.full((B,), 15)
    outs = []
    for s in states:
        outs.append(s.apply(logits.to(s.device), drafts.to(s.device), slots.to(s.device), seq.to(s.device)).cpu())
    assert torch.equal(outs[0], outs[1])


def test_admitting_a_logit_bias_and_bad_words_waits_for_no_step():
    """The biases, bad words and allowed tokens go up from pinned memory: an admission with the device busy does not wait
    for it."""
    state = PenaltyState(4, 1000, 64, "cuda")
    busy = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):
        busy = busy @ busy / 64
    torch.cuda.set_sync_debug_mode("error")
    try:
        state.admit(1, SamplingParams(logit_bias={3: 1.5, 999: float("-inf"), 7: -0.25}, bad_words_ids=[[4, 5], [6]]))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    want = torch.zeros(1001)
    want[[3, 7, 999]] = torch.tensor([1.5, -0.25, float("-inf")])
    assert torch.equal(state.bias[1].cpu(), want) and state.bias_count[1].item() == 3
    assert state.bias_ids[1, :3].tolist() == [3, 7, 999]
    assert state.word_count[1].item() == 2
    assert state.words[1, 0, [0, -1]].tolist() == [5, 4] and state.words[1, 1, [0, -1]].tolist() == [6, -2]
    torch.cuda.set_sync_debug_mode("error")
    try:
        state.admit(2, SamplingParams(allowed_token_ids=[0, 9, 998], logit_bias={9: 2.0, 10: 1.0}))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    want = torch.full((1001,), float("-inf"))
    want[[0, 9, 998, 1000]] = torch.tensor([0.0, 2.0, 0.0, 0.0])
    assert torch.equal(state.bias[2].cpu(), want) and state.bias_count[2].item() == -1


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_token_bans_in_the_step_graph_equal_eager_and_the_reference(overlap):
    """min_tokens and no_repeat_ngram_size (with the kernels: the n-gram scan after the barrier)."""
    target, draft = build("tiny", device="cuda")
    plain = SpecDecoder.for_example(target, draft).generate(PROMPTS, max_new_tokens=1)
    eos = sorted({p[0] for p in plain})
    sampling = [
        SamplingParams(min_tokens=6, no_repeat_ngram_size=2),
        SamplingParams(),
        SamplingParams(min_tokens=9, temperature=0.9, seed=4, no_repeat_ngram_size=3),
    ]
    got = []
    for toggles in (Toggles.all(True), Toggles(step_graph=False, prefill_graph=False)):
        dec = SpecDecoder.for_example(target, draft, max_batch=3, penalties=True, eos_token_id=eos,
                                      config=RunnerConfig(toggles=toggles, progress=False))  # fmt: skip
        requests = dec.make_requests(PROMPTS, 14, sampling)
        dec.serve(requests, overlap=overlap)
        got.append([r.output for r in requests])
        dec.release()
    assert got[0] == got[1]
    assert got[0][0] == reference_greedy(target, PROMPTS[0], 14, sampling[0], eos) and len(got[0][1]) == 1
    assert len(got[0][2]) >= 9 and not set(got[0][2][:9]) & set(eos)
