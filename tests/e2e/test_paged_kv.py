"""The paged KV cache behind the KV seam: token for token what the row cache gives, requests that wait
for pages instead of failing, and no row or page kept whatever raises."""

import random

import pytest
import torch

from stepgraph import RunnerConfig, SamplingParams, SpecDecoder, Toggles
from stepgraph.examples.model import build, greedy_reference
from stepgraph.kv import PagedKV, make_kv


def workload(n=10, seed=0):
    rng = random.Random(seed)
    prompts = [[rng.randrange(512) for _ in range(rng.randint(1, 40))] for _ in range(n)]
    return prompts, [rng.randint(5, 30) for _ in prompts]


def models(kv, **overrides):
    # residual_scale 1: attention decides tokens, so a wrong page would show in the output
    return build("tiny", kv=kv, **{"page_size": 4, "max_seq_len": 96, "residual_scale": 1.0, **overrides})


@pytest.fixture(autouse=True)
def _torch_pieces(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the torch references of the pieces (fast); the kernels below


def test_a_paged_target_gives_the_row_targets_logits_bit_for_bit():
    """Same weights, pages scattered over the pool: SDPA over the gathered pages sees the same keys."""
    outs = []
    for kv in ("rows", "paged"):
        target, _ = models(kv)
        rows = [target.kv.admit(60, 60) for _ in range(3)]  # paged: the rows' pages interleave
        rows = torch.tensor(rows[::-1])
        g = torch.Generator().manual_seed(1)
        tokens = torch.randint(0, 512, (3, 57), generator=g)
        pos = torch.arange(57)[None].expand(3, 57)
        target(tokens[:, :53], pos[:, :53], rows)  # a prefill, then a verify-shaped forward
        outs.append(target(tokens[:, 53:], pos[:, 53:], rows))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_greedy_equals_the_row_cache_token_for_token_with_a_pool_that_makes_requests_wait(overlap):
    prompts, lengths = workload()
    results = {}
    for kv, extra in (("rows", {}), ("paged", {"num_pages": 40})):
        target, draft = models(kv, **extra)
        dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3)
        out = dec.generate(prompts, max_new_tokens=lengths, overlap=overlap)
        results[kv] = (out, dec)
        assert out == [greedy_reference(target, p, n) for p, n in zip(prompts, lengths)]
        assert dec.in_use == (0, 0)
    dec = results["paged"][1]
    info = dec.kv.info()
    assert info["pages_held"] == 0 and info["rows_held"] == 0
    assert dec.stats.stalled > 0  # 40 pages of 4 for up to 8 requests: some sat steps out
    assert results["paged"][0] == results["rows"][0]


def test_sampled_output_and_changing_draft_lengths_match_the_row_cache():
    prompts, lengths = workload(6, seed=3)
    sp = SamplingParams(temperature=0.8, top_k=40, seed=5)
    outs = []
    for kv in ("rows", "paged"):
        target, draft = models(kv)
        dec = SpecDecoder.for_example(target, draft, num_draft_tokens=(3, 0, 1))
        outs.append(dec.generate(prompts, max_new_tokens=lengths, sampling=sp, overlap=True))
    assert outs[0] == outs[1]


def test_a_request_that_can_never_fit_is_refused_at_admission():
    target, draft = models("paged", num_pages=10)  # 40 positions in all
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3)
    with pytest.raises(ValueError, match="num_pages"):
        dec.generate([[1] * 30], max_new_tokens=20)
    assert dec.generate([[1] * 10], max_new_tokens=10) == [greedy_reference(target, [1] * 10, 10)]


def test_requests_wait_for_pages_one_at_a_time_and_all_finish():
    """A pool that holds one request's worst case: the others wait in the queue, none fails."""
    target, draft = models("paged", num_pages=12)  # 48 positions; each request needs up to 8 + 20 + 8
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3)
    prompts = [[i + 1] * 8 for i in range(4)]
    rows_held = []
    out = dec.generate(prompts, max_new_tokens=20, on_step=lambda b: rows_held.append(dec.kv.info()["rows_held"]))
    assert out == [greedy_reference(target, p, 20) for p in prompts]
    assert max(rows_held) <= 2 and dec.kv.info()["pages_held"] == 0


@pytest.mark.parametrize(
    "overlap,chunk", [(False, None), (True, None), (True, 4)], ids=["sync", "overlapped", "chunked-prefill"]
)
def test_nothing_is_kept_when_a_callback_raises_mid_run(overlap, chunk):
    """Also with chunked prefill (requests admitted, their prompts going through between steps)."""
    target, draft = models("paged", num_pages=40)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, prefill_chunk=chunk)
    prompts, lengths = workload(6)
    seen = []

    def boom(i, tokens):
        seen.append(i)
        if len(seen) == 12:
            raise RuntimeError("user callback")

    with pytest.raises(RuntimeError, match="user callback"):
        dec.generate(prompts, max_new_tokens=lengths, overlap=overlap, on_tokens=boom)
    assert dec.in_use == (0, 0) and dec.kv.info()["pages_held"] == 0
    assert dec.generate(prompts[:2], max_new_tokens=5) == [greedy_reference(target, p, 5) for p in prompts[:2]]


def test_pages_handed_out_while_serving_reach_the_device_table_through_the_step_inputs():
    target, draft = models("paged", num_pages=60)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3)
    tables = []
    dec.generate(workload(4)[0], max_new_tokens=25, on_step=lambda b: tables.append(dec.kv.table.clone()))
    kv = dec.kv
    assert any(not torch.equal(a, b) for a, b in zip(tables, tables[1:]))  # entries changed while serving
    assert dec.runner.buffers.specs["kv_pages"].shape == (8, kv.pages_for(8) + 1)


def test_the_pool_stays_safe_under_contention():
    """The banker's rule: a grant that could leave some request unable to finish is withheld."""
    kv = PagedKV(3, 64, page_size=4, num_pages=10)
    a = kv.admit(4, 32)  # holds 1 page, may come to 8
    b = kv.admit(4, 32)
    assert kv.reserve([(a, 20)]) == [True]  # a holds 5: 4 free, a can finish, then b
    assert kv.reserve([(b, 20)]) == [False]  # b to 5 would leave 0 free: neither could finish
    assert kv.reserve([(b, 8)]) == [True]  # b to 2: 3 free, a can finish (3 more), then b
    assert not kv.can_admit(4, 32)  # 3 free: a third request would leave 2, less than a's 3 more
    assert kv.reserve([(b, 12), (a, 24)]) == [False, True]  # the one asking least goes first
    kv.release(a)
    assert kv.can_admit(4, 32) and kv.reserve([(b, 32)]) == [True]
    kv.release(b)
    assert kv.info()["pages_held"] == 0 and kv.free_rows() == 3


def test_apply_writes_entries_into_the_table_and_skips_padding():
    kv = PagedKV(2, 32, page_size=4, num_pages=16)
    buffers = kv.buffers(max_batch=3, max_draft_len=3)
    row = kv.admit(4, 32)
    assert kv.reserve([(row, 13)]) == [True]  # pages for positions 4..12 handed out, pending
    inputs = kv.step_inputs([row], True, buffers)["kv_pages"]
    padded = torch.full(buffers["kv_pages"].shape, -1, dtype=torch.int64)
    padded[:1] = inputs
    before = kv.table.clone()
    kv.apply({"kv_pages": padded}, torch.tensor([row, kv.scratch_row, kv.scratch_row]))
    assert torch.equal(kv.table[row, :4], kv._host_table[row, :4]) and not torch.equal(before, kv.table)
    assert torch.equal(kv.table[kv.scratch_row, : kv.max_pages], before[kv.scratch_row, : kv.max_pages])
    assert kv.step_inputs([row], False, buffers) is None  # nothing new: the buffer stays as it is


def test_a_batch_of_other_requests_in_the_same_slots_gets_new_step_inputs():
    """The scheduler leaves the step's inputs in place while the relay slots stay the same, and a lone
    request always decodes in slot 0: the pages handed to the request that decoded there before must not
    be written into the next one's table row. A short request grows alone while a long prompt is prefilled
    one position a step; then the long one decodes alone, in the same slot."""
    target, draft = models("paged", max_seq_len=128)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, prefill_chunk=1)
    prompts, lengths = [list(range(1, 13)), list(range(100, 146))], [6, 21]
    assert dec.generate(prompts, max_new_tokens=lengths) == [
        greedy_reference(target, p, n) for p, n in zip(prompts, lengths)
    ]


def test_step_inputs_are_new_when_a_row_changes_hands_under_the_same_slots():
    kv = PagedKV(2, 64, page_size=4, num_pages=16)
    buffers = kv.buffers(max_batch=1, max_draft_len=3)
    a = kv.admit(4, 32)
    assert kv.reserve([(a, 13)]) == [True]
    assert kv.step_inputs([a], True, buffers) is not None
    assert kv.step_inputs([a], False, buffers) is None  # the same request: its buffer stays
    b = kv.admit(4, 32)  # another row, its table row uploaded at admission: nothing pending
    assert kv.step_inputs([b], False, buffers)["kv_pages"].eq(-1).all()  # a's entries must not land in b's row
    kv.release(a)
    kv.release(b)
    a2 = kv.admit(20, 32)  # a's row again, for another request
    assert a2 == a and kv.step_inputs([a2], False, buffers)["kv_pages"].eq(-1).all()
    assert kv.step_inputs([a2], False, buffers) is None


def test_the_triton_paged_attention_decodes_what_the_row_kernel_decodes(monkeypatch):
    """Decode and verify forwards through the paged kernel (Triton's interpreter on a CPU); the step's own
    pieces through their torch references, to keep it short."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    prompts, lengths = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9]], [5, 7, 6]
    outs = []
    for kv, extra in (("rows", {}), ("paged", {"num_pages": 20})):
        target, draft = models(kv, attention="triton", num_layers=1, max_seq_len=48, **extra)
        dec = SpecDecoder.for_example(
            target, draft, num_draft_tokens=3, config=RunnerConfig(toggles=Toggles.all(False))
        )
        outs.append(dec.generate(prompts, max_new_tokens=lengths, overlap=True))
        assert outs[-1] == [greedy_reference(target, p, n) for p, n in zip(prompts, lengths)]
    assert outs[0] == outs[1]


def test_the_planned_schedule_decodes_what_the_fixed_one_does(monkeypatch):
    """The same decoding with the split planned on the host before each step (interpreter on a CPU)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    prompts, lengths = [[3, 1, 4, 1, 5], [9, 2, 6]], [6, 9]
    target, draft = models(
        "paged", attention="triton", num_layers=1, max_seq_len=48, num_pages=20, kv_schedule="planned"
    )
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, config=RunnerConfig(toggles=Toggles.all(False)))
    out = dec.generate(prompts, max_new_tokens=lengths, overlap=True)
    assert out == [greedy_reference(target, p, n) for p, n in zip(prompts, lengths)]  # on the fixed split
    plans = [s.hook.plan for s in dec.step.runner.table.keys.values()]  # one per key
    assert plans and len({id(p) for p in plans}) == len(plans) and all(p.last is not None for p in plans)


def test_the_planned_schedules_hook_plans_for_the_steps_rows_and_only_steps_follow_it():
    from stepgraph.kernels.split_plan import plan_splits
    from stepgraph.keys import GraphKey
    from stepgraph.sampling import Sampling

    kv = PagedKV(4, 160, page_size=4, schedule="planned")
    with pytest.raises(RuntimeError, match="layer caches first"):
        kv.before_replay(GraphKey(4, Sampling.GREEDY))
    kv.layer_cache(2, 8, torch.float32)
    a, b = kv.admit(9, 30), kv.admit(3, 150)  # 3 pages and 1
    kv.reserve([(b, 13)])  # 4 pages
    kv.step_inputs([b, a], True, kv.buffers(4, 3))
    hook = kv.before_replay(GraphKey(4, Sampling.GREEDY))
    hook(2)
    assert hook.plan.lengths == [128, 128]  # [16, 12] rounded up to the plan's grain
    kv.step_inputs([b, a], False, kv.buffers(4, 3))
    kv.reserve([(b, 130)])
    hook(2)
    assert hook.plan.lengths == [256, 128] and (hook.plan.last == plan_splits([256, 128], 4, 2, 160)).all()
    hook(3)  # not the launched step's rows (a warm-up): every row may read all of it
    assert hook.plan.lengths == [256] * 3  # the whole row, 160, rounded
    assert kv._active is None
    with kv.planning():
        assert kv._active is hook.plan
    assert kv._active is None
    assert PagedKV(2, 8).before_replay(GraphKey(1, Sampling.GREEDY)) is None  # the fixed schedule has none
    with pytest.raises(ValueError, match="schedule must be"):
        PagedKV(2, 8, schedule="dynamic")
    with pytest.raises(ValueError, match="is for kv='paged'"):
        make_kv("rows", 2, 8, schedule="planned")
    target, draft = models("paged", kv_schedule="planned")
    with pytest.raises(ValueError, match="use schedule='fixed'"):
        SpecDecoder.for_example(target, draft, num_draft_tokens=2, compile=True)
