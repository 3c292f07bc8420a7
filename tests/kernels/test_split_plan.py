"""The host-planned split schedule: the plan's layout and its bounds, and planned paged attention against
the torch reference and the fixed schedule (interpreter on CPU)."""

import numpy as np
import pytest
import torch

from stepgraph.kernels.decode_attention import BLOCK_N, paged_attention, planned_paged_attention
from stepgraph.kernels.decode_attention import reference_paged_attention as reference
from stepgraph.kernels.split_plan import max_items, plan_splits
from stepgraph.kv.split_plan import GRAIN, SplitPlan
from tests.kernels.test_paged_attention import DEV, paged_case


def pieces(plan, batch, kv_heads, max_len=None):
    items = max_items(batch, kv_heads, max_len)
    work, first = plan[: 3 * items].reshape(items, 3), plan[3 * items :]
    return work, first


@pytest.mark.parametrize("lengths", [[1], [5000, 3, 40, 1], [32] * 64, [0, 7], [2048] * 3 + [1] * 20])
@pytest.mark.parametrize("kv_heads", [1, 8])
def test_a_plan_covers_each_row_once_in_block_aligned_pieces_within_its_grid(lengths, kv_heads):
    batch = len(lengths) + 3  # three padded rows
    plan = plan_splits(lengths, batch, kv_heads)
    work, first = pieces(plan, batch, kv_heads)
    assert plan.dtype == np.int32 and len(plan) == 3 * max_items(batch, kv_heads) + batch + 1
    assert first[0] == 0 and (np.diff(first) >= 0).all()
    for b, n in enumerate(lengths + [0, 0, 0]):
        mine = work[first[b] : first[b + 1]]
        assert (mine[:, 0] == b).all()
        covered = -(-n // BLOCK_N) * BLOCK_N
        assert mine[:, 1].tolist() == sorted(mine[:, 1]) and (mine[:, 1:] % BLOCK_N == 0).all()
        assert mine[:, 2].tolist() == [*mine[1:, 1].tolist(), covered][: len(mine)]  # contiguous, no gap
        assert (len(mine) == 0) == (n == 0) and (len(mine) == 0 or mine[0, 1] == 0)
    assert (work[first[-1] :] == 0).all()  # unused pieces are empty
    sizes = work[: first[-1], 2] - work[: first[-1], 1]
    assert sizes.max() <= max(BLOCK_N, -(-sum(lengths) // (max_items(batch, kv_heads) - batch)) + 2 * BLOCK_N)


def test_a_long_request_is_spread_over_many_pieces_and_short_ones_take_one():
    plan = plan_splits([4096] + [64] * 31, 32, 8)
    work, first = pieces(plan, 32, 8)
    assert first[1] - first[0] >= 8 and (np.diff(first[1:33]) == 1).all()


def test_a_plan_holds_no_more_pieces_than_its_rows_have_blocks():
    plan = plan_splits([100, 5000], 2, 1, max_len=96)  # lengths past max_len are read up to it
    work, first = pieces(plan, 2, 1, 96)
    assert max_items(2, 1, 96) == 2 * 3 + 2 and first.tolist() == [0, 3, 6]
    assert work[:6].tolist() == [[0, 0, 32], [0, 32, 64], [0, 64, 96], [1, 0, 32], [1, 32, 64], [1, 64, 96]]


def test_more_lengths_than_rows_is_refused():
    with pytest.raises(ValueError, match="3 lengths for a batch of 2"):
        plan_splits([1, 2, 3], 2, 1)


@pytest.mark.parametrize("T,H,KVH", [(1, 4, 4), (4, 8, 2)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 5e-3)])
def test_planned_attention_matches_the_reference_and_leaves_padded_rows_zero(T, H, KVH, dtype, tol):
    lengths = [150, 1 + T, 70]
    q, pages, table, rows, positions = paged_case(
        B=4, T=T, H=H, KVH=KVH, hd=16, page=5, max_pages=32, dtype=dtype, lengths=lengths + [T]
    )
    plan = SplitPlan(4, KVH, DEV)
    plan.update([n + 9 for n in lengths])  # upper bounds, as the cache plans them: the kernel stops at each length
    got = planned_paged_attention(q, pages, table, rows, positions, 0.25, plan.plan, plan.items)
    ref = reference(q, pages, table, rows, positions, 0.25)
    assert got.dtype == dtype and not got.isnan().any()
    torch.testing.assert_close(got[:3].float(), ref[:3], atol=tol, rtol=tol)
    assert (got[3] == 0).all()  # the padded row has no pieces
    fixed = paged_attention(q, pages, table, rows, positions, 0.25)
    torch.testing.assert_close(got[:3].float(), fixed[:3].float(), atol=tol, rtol=tol)


def test_planned_attention_ignores_keys_past_each_length_even_when_the_plan_reaches_them():
    q, pages, table, rows, positions = paged_case(
        B=2, T=1, H=4, KVH=2, hd=16, page=16, max_pages=8, dtype=torch.float32, lengths=[20, 100]
    )
    plan = SplitPlan(2, 2, DEV)
    plan.update([128, 128])  # the whole row
    got = planned_paged_attention(q, pages, table, rows, positions, 0.25, plan.plan, plan.items)
    torch.testing.assert_close(got, reference(q, pages, table, rows, positions, 0.25), atol=1e-5, rtol=1e-5)


def test_a_plan_of_the_wrong_size_is_refused():
    q, pages, table, rows, positions = paged_case(
        B=2, T=1, H=4, KVH=2, hd=16, page=16, max_pages=2, dtype=torch.float32
    )
    plan = SplitPlan(3, 2, DEV)  # made for a batch of 3
    with pytest.raises(ValueError, match="plan must be"):
        planned_paged_attention(q, pages, table, rows, positions, 0.25, plan.plan, plan.items)


def test_updates_rotate_through_the_staging_buffers_and_land_on_the_device():
    plan = SplitPlan(2, 4, DEV)
    for n in (1, 500, 3000, 7, 640, 639):
        plan.update([n, 3])
        rounded = [-(-n // GRAIN) * GRAIN, GRAIN]
        assert plan.lengths == rounded
        assert torch.equal(plan.plan.cpu(), torch.from_numpy(plan_splits(rounded, 2, 4)))
    assert plan.uploads == 5  # 639 rounds to 640: nothing to upload
