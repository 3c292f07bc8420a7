"""The paged KV cache on the GPU: token for token what the row cache gives at the same shapes, the step
graph equal to eager, both loops, compiled forwards, and a pool small enough that requests wait."""

import pytest
import torch

from stepgraph import RunnerConfig, SamplingParams, Toggles
from stepgraph.examples.model import build, greedy_reference
from stepgraph.kernels.decode_attention import gather_pages, paged_attention, reference_paged_attention
from stepgraph.speculative.decoder import SpecDecoder

pytestmark = pytest.mark.gpu


def prompts(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 512, (int(k),), generator=g).tolist() for k in torch.randint(3, 60, (n,), generator=g)]


def decode(
    kv,
    *,
    dtype=torch.bfloat16,
    graphs=True,
    overlap=False,
    sampling=SamplingParams(),
    compile=False,
    splice=False,
    **kw,
):
    target, draft = build(
        "tiny", device="cuda", dtype=dtype, kv=kv, attention="triton", residual_scale=1.0, max_seq_len=128, **kw
    )
    toggles = Toggles.all(True) if graphs else Toggles.all(False)
    dec = SpecDecoder.for_example(
        target,
        draft,
        max_batch=4,
        config=RunnerConfig(toggles=toggles, progress=False),
        compile=compile,
        splice_stages=splice,
    )
    out = dec.generate(prompts(), max_new_tokens=40, sampling=sampling, overlap=overlap)
    assert dec.in_use == (0, 0) and dec.kv.info()["rows_held"] == 0
    return dec, out, target


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_paged_greedy_equals_the_row_cache_and_eager(dtype, overlap):
    dec, paged, target = decode("paged", dtype=dtype, overlap=overlap, page_size=16)
    _, rows, _ = decode("rows", dtype=dtype, overlap=overlap)
    _, eager, _ = decode("paged", dtype=dtype, overlap=overlap, graphs=False, page_size=16)
    assert paged == rows == eager
    assert dec.info()["replays"] > 0
    if dtype == torch.float32:
        assert paged == [greedy_reference(target, p, 40) for p in prompts()]


def test_requests_waiting_for_pages_decode_exactly_with_graphs():
    dec, paged, target = decode("paged", dtype=torch.float32, overlap=True, page_size=8, num_pages=40)
    assert dec.stats.stalled > 0
    assert paged == [greedy_reference(target, p, 40) for p in prompts()]


def test_sampled_output_equals_the_row_cache():
    sp = SamplingParams(temperature=0.8, top_k=50, top_p=0.9, seed=3)
    _, paged, _ = decode("paged", sampling=sp, overlap=True, page_size=16)
    _, rows, _ = decode("rows", sampling=sp, overlap=True)
    assert paged == rows


def test_compiled_forwards_over_pages_equal_the_compiled_row_cache():
    _, paged, _ = decode("paged", compile=True, page_size=16)
    _, rows, _ = decode("rows", compile=True)
    assert paged == rows


def test_paged_attention_kernel_on_the_gpu_matches_its_reference_and_the_row_kernel():
    from stepgraph.kernels.decode_attention import decode_attention

    g = torch.Generator(device="cuda").manual_seed(0)
    B, T, H, KVH, hd, P, n = 5, 4, 16, 8, 128, 16, 70
    pages = torch.randn(B * n + 1, 2, KVH, P, hd, device="cuda", generator=g, dtype=torch.bfloat16)
    table = torch.randperm(B * n, device="cuda", generator=g).to(torch.int32).view(B, n)
    rows = torch.tensor([3, 0, 4, 1, 2], device="cuda")
    last = torch.tensor([1119, 3, 16, 17, 640], device="cuda")
    positions = last[:, None] - T + 1 + torch.arange(T, device="cuda")
    positions = positions.clamp(min=0)
    q = torch.randn(B, T, H, hd, device="cuda", generator=g, dtype=torch.bfloat16)
    got = paged_attention(q, pages, table, rows, positions, hd**-0.5)
    ref = reference_paged_attention(q, pages, table, rows, positions, hd**-0.5)
    torch.testing.assert_close(got.float(), ref, atol=2e-2, rtol=2e-2)
    as_rows = decode_attention(q, gather_pages(pages, table, rows).contiguous(), torch.arange(B, device="cuda"),
                               positions, hd**-0.5)  # fmt: skip
    assert torch.equal(got, as_rows)


@pytest.mark.parametrize("kv", ["rows", "paged"])
def test_chunked_prefill_on_the_gpu_decodes_the_targets_greedy_in_fp32(kv):
    target, draft = build("tiny", device="cuda", dtype=torch.float32, kv=kv, attention="triton", max_seq_len=128)
    dec = SpecDecoder.for_example(target, draft, max_batch=4, config=RunnerConfig(progress=False), prefill_chunk=16)
    out = dec.generate(prompts(), max_new_tokens=40, overlap=True)
    assert out == [greedy_reference(target, p, 40) for p in prompts()]
    assert dec.in_use == (0, 0)
    chunks = dec.info()["prefill_chunks"]
    assert chunks["captured_keys"] and chunks["replays"] > 0  # the chunk forwards ran as graphs


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_chunk_forward_graphs_equal_the_same_forwards_run_eagerly(overlap):
    outs = []
    for graphs in (True, False):
        target, draft = build("tiny", device="cuda", dtype=torch.bfloat16, kv="paged", attention="triton")
        toggles = Toggles.all(True).with_piece("prefill_graph", graphs)
        cfg = RunnerConfig(toggles=toggles, progress=False)
        dec = SpecDecoder.for_example(target, draft, max_batch=8, config=cfg, prefill_chunk=32)
        dec.warmup()
        outs.append(dec.generate(prompts(8, seed=1), max_new_tokens=24, overlap=overlap))
        assert bool(dec.info()["prefill_chunks"]["captured_keys"]) == graphs
    assert outs[0] == outs[1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_the_planned_schedule_decodes_what_the_fixed_one_does_with_graphs_and_eager(dtype, overlap):
    dec, planned, target = decode("paged", dtype=dtype, overlap=overlap, page_size=16, kv_schedule="planned")
    _, eager, _ = decode("paged", dtype=dtype, overlap=overlap, page_size=16, kv_schedule="planned", graphs=False)
    assert planned == eager
    plans = [s.hook.plan for s in dec.step.runner.table.keys.values()]
    assert dec.info()["replays"] > 0 and plans and all(p.uploads > 0 for p in plans)
    if dtype == torch.float32:
        assert planned == [greedy_reference(target, p, 40) for p in prompts()]


def test_spliced_stages_over_pages_equal_the_whole_step_graph():
    _, spliced, _ = decode("paged", dtype=torch.float32, page_size=16, splice=True)
    _, whole, target = decode("paged", dtype=torch.float32, page_size=16)
    _, planned, _ = decode("paged", dtype=torch.float32, page_size=16, splice=True, kv_schedule="planned")
    assert spliced == whole == planned == [greedy_reference(target, p, 40) for p in prompts()]


def test_a_captured_planned_kernel_follows_each_new_plan_bit_for_bit():
    from stepgraph.kernels.decode_attention import planned_paged_attention
    from stepgraph.kv.split_plan import SplitPlan

    g = torch.Generator(device="cuda").manual_seed(0)
    B, T, H, KVH, hd, P, n = 6, 4, 16, 8, 128, 16, 80
    pages = torch.randn(B * n + 1, 2, KVH, P, hd, device="cuda", generator=g, dtype=torch.bfloat16)
    table = torch.randperm(B * n, device="cuda", generator=g).to(torch.int32).view(B, n)
    rows = torch.tensor([3, 0, 5, 1, 2, 4], device="cuda")
    positions = torch.zeros(B, T, dtype=torch.int64, device="cuda")
    q = torch.randn(B, T, H, hd, device="cuda", generator=g, dtype=torch.bfloat16)
    plan = SplitPlan(B, KVH, "cuda")
    plan.update([P * n] * 5)  # a capture's plan: one row padded
    out = {}

    def call():
        return planned_paged_attention(q, pages, table, rows, positions, hd**-0.5, plan.plan, plan.items)

    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out["o"] = call()
    for lengths in ([1279, 3, 16, 17, 640, 1], [40, 900, 33, 1, 1, 1279]):
        last = torch.tensor(lengths, device="cuda")
        positions.copy_((last[:, None] - T + 1 + torch.arange(T, device="cuda")).clamp(min=0))
        plan.update([-(-(x + 1) // P) * P for x in lengths])  # pages' worth, as the cache plans
        graph.replay()
        eager = call()
        assert torch.equal(out["o"], eager)
        ref = reference_paged_attention(q, pages, table, rows, positions, hd**-0.5)
        torch.testing.assert_close(eager.float(), ref, atol=2e-2, rtol=2e-2)
