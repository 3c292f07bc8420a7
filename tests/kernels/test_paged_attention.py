"""Paged decode attention against its torch reference (pages gathered into rows, masked SDPA), on odd
shapes, page boundaries, lengths 1 and the maximum, and several GQA ratios (interpreter on CPU)."""

import pytest
import torch

from stepgraph.kernels.decode_attention import (
    decode_attention,
    gather_pages,
    paged_attention,
    reference_paged_attention,
)

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def paged_case(B, T, H, KVH, hd, page, max_pages, dtype, seed=0, lengths=None):
    """Pages shuffled over a pool (each request's pages scattered, unused entries pointing at a NaN page),
    and each request's last query at ``lengths[b] - 1``."""
    g = torch.Generator().manual_seed(seed)
    R = B + 1
    num_pages = R * max_pages + 1
    pages = torch.randn(num_pages, 2, KVH, page, hd, generator=g).to(dtype)
    pages[-1] = float("nan")  # what no visible position may read
    table = torch.full((R, max_pages), num_pages - 1, dtype=torch.int32)
    order = torch.randperm(num_pages - 1, generator=g).to(torch.int32)
    rows = torch.randperm(R, generator=g)[:B]
    S = page * max_pages
    if lengths is None:
        lengths = torch.randint(T, S + 1, (B,), generator=g).tolist()
    for i, (r, n) in enumerate(zip(rows.tolist(), lengths)):
        used = -(-n // page)
        table[r, :used] = order[i * max_pages : i * max_pages + used]
    qkv = torch.randn(B, T, H + 2 * KVH, hd, generator=g).to(dtype)
    q = qkv[:, :, :H]  # a strided view, as in the model
    last = torch.tensor(lengths)[:, None] - 1
    positions = last - T + 1 + torch.arange(T)[None, :]
    return [t.to(DEV) for t in (q, pages, table, rows, positions)]


@pytest.mark.parametrize("T", [1, 4])
@pytest.mark.parametrize("H,KVH", [(4, 4), (4, 2), (8, 1)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 5e-3)])
def test_matches_the_reference_with_scattered_pages(T, H, KVH, dtype, tol):
    q, pages, table, rows, positions = paged_case(B=3, T=T, H=H, KVH=KVH, hd=16, page=16, max_pages=5, dtype=dtype)
    got = paged_attention(q, pages, table, rows, positions, 0.25)
    ref = reference_paged_attention(q, pages, table, rows, positions, 0.25)
    assert got.shape == (3, T, H, 16) and got.dtype == dtype
    assert not got.isnan().any()  # the NaN page behind unused entries is never read
    torch.testing.assert_close(got.float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("page", [1, 5, 16, 64])
def test_page_boundaries_and_the_extreme_lengths(page):
    """Lengths 1, one either side of a page boundary, and the whole table, for odd page sizes."""
    max_pages = max(2, 96 // page)
    S = page * max_pages
    lengths = [1, page, min(page + 1, S), S]
    q, pages, table, rows, positions = paged_case(
        B=4, T=1, H=4, KVH=2, hd=16, page=page, max_pages=max_pages, dtype=torch.float32, seed=page, lengths=lengths
    )
    got = paged_attention(q, pages, table, rows, positions, 0.3)
    ref = reference_paged_attention(q, pages, table, rows, positions, 0.3)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("hd", [8, 40])
def test_a_small_or_odd_head_dim(hd):
    q, pages, table, rows, positions = paged_case(B=2, T=2, H=4, KVH=2, hd=hd, page=5, max_pages=6, dtype=torch.float32)
    got = paged_attention(q, pages, table, rows, positions, 0.3)
    assert not got.isnan().any()
    torch.testing.assert_close(
        got, reference_paged_attention(q, pages, table, rows, positions, 0.3), atol=1e-5, rtol=1e-5
    )


def test_equals_row_attention_on_the_same_keys_bit_for_bit():
    """The pages gathered into rows give the row kernel the same keys in the same order: identical results."""
    q, pages, table, rows, positions = paged_case(
        B=3, T=4, H=4, KVH=2, hd=16, page=16, max_pages=4, dtype=torch.bfloat16
    )
    rows_cache = gather_pages(pages, table, rows).contiguous()
    as_rows = decode_attention(q, rows_cache, torch.arange(3, device=DEV), positions, 0.25)
    torch.testing.assert_close(paged_attention(q, pages, table, rows, positions, 0.25), as_rows, atol=0, rtol=0)


def test_a_bad_block_table_is_refused():
    q, pages, table, rows, positions = paged_case(
        B=1, T=1, H=4, KVH=2, hd=16, page=16, max_pages=2, dtype=torch.float32
    )
    with pytest.raises(ValueError, match="block_table must be"):
        paged_attention(q, pages, table.long(), rows, positions, 0.25)
