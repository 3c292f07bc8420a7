"""Skinny matmul against torch in float32 (interpreter on CPU, the GPU where there is one)."""

import pytest
import torch

from stepgraph.kernels.skinny_matmul import MAX_ROWS, plan, skinny_matmul, skinny_matmul_ref

DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}  # about one rounding of the output


def case(M, K, N, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).to(dtype).to(DEV)
    w = (torch.randn(K, N, generator=g) / K**0.5).to(dtype).to(DEV)
    r = torch.randn(M, N, generator=g).to(dtype).to(DEV)
    return x, w, r


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,K,N", [(1, 70, 100), (5, 300, 33), (16, 1024, 96), (33, 200, 40)])
@pytest.mark.parametrize("residual", [False, True])
def test_matches_float32_reference_on_odd_shapes(M, K, N, dtype, residual):
    x, w, r = case(M, K, N, dtype)
    r = r if residual else None
    got = skinny_matmul(x, w, r)
    assert got.shape == (M, N) and got.dtype == dtype
    torch.testing.assert_close(got.float(), skinny_matmul_ref(x, w, r).float(), atol=TOL[dtype], rtol=TOL[dtype])


def test_split_reduction_is_used_and_deterministic():
    x, w, r = case(3, 1024, 40, torch.float32)
    assert plan(40, 1024)[2] > 1  # the reduction is split for this shape
    first = skinny_matmul(x, w, r)
    assert torch.equal(first, skinny_matmul(x, w, r))
    torch.testing.assert_close(first, skinny_matmul_ref(x, w, r), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_rows_result_does_not_depend_on_the_batch(dtype):
    x, w, r = case(16, 512, 72, dtype, seed=3)
    full = skinny_matmul(x, w, r)
    for m in (1, 7):
        assert torch.equal(skinny_matmul(x[:m], w, r[:m]), full[:m])
    assert torch.equal(skinny_matmul(x[5:6], w, r[5:6]), full[5:6])


def test_nan_and_inf_propagate_like_torch():
    x, w, _ = case(4, 96, 24, torch.float32)
    x[1, 7] = float("nan")
    w[3, 5] = float("inf")
    x[:, 3] = 0.0  # 0 * inf = nan in column 5 of every row
    got, ref = skinny_matmul(x, w), skinny_matmul_ref(x, w)
    assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.isinf(), ref.isinf())
    assert got[1].isnan().all() and got[0, 5].isnan()
    finite = ref.isfinite()
    torch.testing.assert_close(got[finite], ref[finite], atol=1e-5, rtol=1e-5)


def test_more_rows_than_it_serves_go_to_torch():
    x, w, r = case(MAX_ROWS + 1, 64, 48, torch.float32)
    assert torch.equal(skinny_matmul(x, w, r), torch.addmm(r, x, w))
    assert torch.equal(skinny_matmul(x, w), torch.mm(x, w))


def test_strided_inputs():
    x, w, r = case(6, 128, 64, torch.float32)
    wide = torch.randn(6, 300, device=DEV)
    wide[:, 10:138] = x
    got = skinny_matmul(wide[:, 10:138], w, r)  # rows with a stride past their length
    torch.testing.assert_close(got, skinny_matmul_ref(x, w, r), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(skinny_matmul(x, w.t().contiguous().t()), x @ w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "shapes,message",
    [
        (((3, 8), (9, 4), None), "inner sizes differ"),
        (((3, 8), (8, 4), (3, 5)), "residual"),
        (((3, 8, 1), (8, 4), None), "2-D"),
    ],
)
def test_bad_shapes_name_what_to_change(shapes, message):
    xs, ws, rs = shapes
    with pytest.raises(ValueError, match=message):
        skinny_matmul(torch.zeros(xs), torch.zeros(ws), None if rs is None else torch.zeros(rs))


def test_mixed_dtypes_are_refused():
    with pytest.raises(ValueError, match="one dtype"):
        skinny_matmul(torch.zeros(2, 8), torch.zeros(8, 4, dtype=torch.float16))


def test_under_torch_compile_the_row_count_stays_symbolic():
    x, w, r = case(5, 64, 24, torch.float32)
    fn = torch.compile(lambda x, w, r: skinny_matmul(x, w, r) * 2, backend="aot_eager", dynamic=True)
    for m in (2, 5):
        assert torch.equal(fn(x[:m], w, r[:m]), skinny_matmul(x[:m], w, r[:m]) * 2)
