import pytest
import torch

from stepgraph import KEEP, Buffer, StaticBuffers
from stepgraph.copy_in import STAGING_RING, input_copy
from stepgraph.kernels import input_copy_ref


def specs():
    return {
        "tokens": Buffer((8,), torch.int64, pad=-1),
        "lens": Buffer((8,), torch.int32, pad=0),
        "hidden": Buffer((8, 5), torch.bfloat16, pad=0.0),
        "probs": Buffer((8, 3), torch.float32, pad=float("nan")),
        "mask": Buffer((8, 2), torch.bool, pad=True),
        "keep": Buffer((8,), torch.int16, pad=KEEP),
        "u8": Buffer((8, 3), torch.uint8, pad=7),
        "h16": Buffer((8, 1), torch.float16, pad=-2.5),
    }


def inputs(n):
    return {
        "tokens": torch.arange(n),
        "lens": torch.arange(n, dtype=torch.int32) + 10,
        "hidden": torch.randn(n, 5).bfloat16(),
        "probs": torch.rand(n, 3),
        "mask": torch.rand(n, 2) > 0.5,
        "keep": torch.arange(n, dtype=torch.int16) * 3,
        "u8": torch.randint(0, 255, (n, 3), dtype=torch.uint8),
        "h16": torch.randn(n, 1).half(),
    }


def as_bytes(t):
    return t.contiguous().view(-1).view(torch.uint8) if t.dtype != torch.bool else t.to(torch.uint8).view(-1)


@pytest.mark.parametrize("one_launch", [True, False])
def test_copy_in_pads_tail_by_policy(one_launch):
    b = StaticBuffers(specs(), "cpu", one_launch_copy=one_launch)
    b.tensors["keep"].fill_(99)
    x = inputs(3)
    b.copy_in(x, 3, 6)
    for name, t in x.items():
        assert torch.equal(as_bytes(b[name][:3]), as_bytes(t)), name
    assert (b["tokens"][3:6] == -1).all() and (b["lens"][3:6] == 0).all()
    assert torch.isnan(b["probs"][3:6]).all() and b["mask"][3:6].all() and (b["u8"][3:6] == 7).all()
    assert (b["h16"][3:6] == -2.5).all()
    assert (b["keep"][3:6] == 99).all()  # KEEP leaves padded rows alone
    assert (b["tokens"][6:] == -1).all()  # rows past the padded batch untouched (reset value)


def test_one_launch_and_per_tensor_give_identical_bytes():
    a = StaticBuffers(specs(), "cpu", one_launch_copy=True)
    p = StaticBuffers(specs(), "cpu", one_launch_copy=False)
    assert a.copy_plan.uses_kernel and not p.copy_plan.uses_kernel
    x = inputs(5)
    for bufs in (a, p):
        bufs.copy_in(x, 5, 8)
    for name in specs():
        assert torch.equal(as_bytes(a[name]), as_bytes(p[name])), name
    assert a.copy_plan.launches == 1


def test_staged_copy_path_table_and_host_rows_in_one_copy():
    """The CUDA path (table + host rows through one staging buffer), exercised on the CPU."""
    a = StaticBuffers(specs(), "cpu", one_launch_copy=True, staged_copy=True)
    p = StaticBuffers(specs(), "cpu", one_launch_copy=False)
    for n, padded in ((5, 8), (2, 3), (8, 8)):
        x = inputs(n)
        for bufs in (a, p):
            bufs.copy_in(x, n, padded)
        for name in specs():
            assert torch.equal(as_bytes(a[name]), as_bytes(p[name])), (name, n)
    assert a.copy_plan.launches == 3


def test_kernel_falls_back_per_tensor_where_it_cannot_apply():
    b = StaticBuffers({"x": Buffer((4, 3), torch.float32), "y": Buffer((4,), torch.int64)}, "cpu")
    strided = torch.randn(3, 6)[:, ::2]  # rows are not one contiguous run of bytes
    b.copy_in({"x": strided, "y": torch.arange(3)}, 3, 4)
    assert torch.equal(b["x"][:3], strided) and torch.equal(b["y"][:3], torch.arange(3))
    assert b.copy_plan.launches == 1  # y went through the kernel, x fell back


def test_kernel_reads_sources_whose_rows_are_contiguous_but_not_the_tensor():
    """Views whose rows are each one run of bytes, though the tensor is not contiguous (columns of a wider
    tensor, every other element), go through the kernel at their own strides; one row with an odd stride
    counts as contiguous (torch ignores the strides of size-1 dimensions), its stride never used."""
    b = StaticBuffers(
        {"x": Buffer((4, 3), torch.float32), "y": Buffer((4,), torch.int64), "z": Buffer((4, 2), torch.int16)}, "cpu"
    )
    wide = torch.randn(3, 7)
    odd_row = torch.as_strided(torch.arange(20, dtype=torch.int16), (1, 2), (11, 1), 5)
    given = {"x": wide[:, 2:5], "y": torch.arange(6)[::2], "z": odd_row}
    assert not given["x"].is_contiguous() and not given["y"].is_contiguous() and odd_row.is_contiguous()
    plan = b.copy_plan
    plan.stage(given, 1)
    assert plan.staged().forms == {0: "device", 1: "device", 2: "device"}  # all three through the kernel
    plan.commit(2)
    assert torch.equal(b["x"][:1], wide[:1, 2:5]) and b["y"][:1].tolist() == [0] and b["z"][0].tolist() == [5, 6]
    b.copy_in({"x": wide[:, 2:5], "y": torch.arange(6)[::2]}, 3, 4)
    assert torch.equal(b["x"][:3], wide[:, 2:5]) and b["y"][:3].tolist() == [0, 2, 4]
    assert b.copy_plan.launches == 2


def test_input_copy_functional_many_tensors():
    srcs = [torch.randn(5, k) for k in range(1, 10)]
    dsts = [torch.zeros(7, k) for k in range(1, 10)]
    ref = [d.clone() for d in dsts]
    input_copy(srcs, dsts, 5, 7, [1.0] * 9)
    input_copy_ref(srcs, ref, 5, 7, [1.0] * 9)
    assert all(torch.equal(a, b) for a, b in zip(dsts, ref))


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"nope": torch.zeros(2)}, "not a declared buffer"),
        ({"tokens": torch.zeros(2, dtype=torch.int32)}, "dtype"),
        ({"hidden": torch.zeros(2, 4).bfloat16()}, "shape"),
        ({"tokens": torch.zeros(0, dtype=torch.int64)}, "empty batch"),
        ({"tokens": torch.zeros(9, dtype=torch.int64)}, "exceeds"),
        ({"tokens": torch.zeros(2, dtype=torch.int64), "lens": torch.zeros(3, dtype=torch.int32)}, "disagree"),
        ({"hidden": [[0.0] * 5, [1.0] * 5]}, "torch.Tensor, got list"),  # lists: 1-D integer buffers only
    ],
)
def test_bad_inputs_name_the_problem(bad, match):
    b = StaticBuffers(specs(), "cpu")
    with pytest.raises((ValueError, TypeError), match=match):
        b.check_inputs(bad)


@pytest.mark.parametrize(
    "spec,match",
    [
        (lambda: Buffer((0, 3), torch.float32), "positive"),
        (lambda: Buffer((4,), torch.int32, pad=float("nan")), "NaN"),
        (lambda: Buffer((4,), torch.uint8, pad=-1), "does not fit|not representable"),
        (lambda: Buffer((4,), "int64"), "torch.dtype"),
    ],
)
def test_buffer_declaration_errors(spec, match):
    with pytest.raises((ValueError, TypeError), match=match):
        spec()


def test_mismatched_batch_dims_rejected():
    with pytest.raises(ValueError, match="same leading"):
        StaticBuffers({"a": Buffer((4,), torch.int64), "b": Buffer((8,), torch.int64)}, "cpu")


def test_copy_in_ring_wraps_and_leaves_buffers_not_given_alone():
    """More calls than host tables in the ring: a buffer given once keeps its rows afterwards (its old table
    entry no longer matches the call's generation), and every call's bytes are right."""
    a = StaticBuffers(specs(), "cpu", one_launch_copy=True, staged_copy=True)
    p = StaticBuffers(specs(), "cpu", one_launch_copy=False)
    first = inputs(4)
    for bufs in (a, p):
        bufs.copy_in(first, 4, 6)
    calls = STAGING_RING + 4
    for call in range(calls):
        n = 1 + call % 5
        x = {"tokens": torch.arange(n) + 10 * call, "h16": torch.full((n, 1), float(call)).half()}
        for bufs in (a, p):
            bufs.copy_in(x, n, min(8, n + 2))
        for name in specs():
            assert torch.equal(as_bytes(a[name]), as_bytes(p[name])), (name, call)
    assert torch.equal(as_bytes(a["probs"][:4]), as_bytes(first["probs"]))  # given once, never since
    assert a.copy_plan.launches == calls + 1


@pytest.mark.parametrize(("one_launch", "staged"), [(True, True), (True, False), (False, False)])
def test_list_inputs_of_1d_integer_buffers_copy_like_tensors(one_launch, staged):
    """A 1-D integer or bool buffer takes a list of ints (written straight into the staging ring where there
    is one, else made a tensor), with the same bytes as the tensor would give, beside tensor inputs."""
    b = StaticBuffers(specs(), "cpu", one_launch_copy=one_launch, staged_copy=staged)
    t = StaticBuffers(specs(), "cpu", one_launch_copy=False)
    x = inputs(5)
    listed = {**x, "tokens": [7, -3, 2**62, 0, 5], "lens": (1, 2, 3, 4, 5), "keep": [9, 8, 7, 6, 5]}
    tensors = {**x, "tokens": torch.tensor(listed["tokens"]), "lens": torch.tensor(listed["lens"], dtype=torch.int32)}
    tensors["keep"] = torch.tensor(listed["keep"], dtype=torch.int16)
    b.copy_in(listed, 5, 7)
    t.copy_in(tensors, 5, 7)
    for name in specs():
        assert torch.equal(as_bytes(b[name]), as_bytes(t[name])), name
    assert b.stage({"tokens": [4, 5]}) == 2 and b.check_inputs({"tokens": [1, 2, 3]}) == 3
    b.abandon()


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        ({"tokens": [1, 2.5]}, ValueError, "tokens.*Python ints"),  # not an int
        ({"lens": [1, 2**40]}, ValueError, "lens.*Python ints"),  # out of the int32 range
        ({"tokens": ["a"]}, ValueError, "tokens.*Python ints"),
        ({"probs": [[0.1, 0.2, 0.3]]}, TypeError, "probs.*must be a torch.Tensor, got list"),  # 2-D buffer
        ({"tokens": [1, 2], "lens": [1, 2, 3]}, ValueError, "disagree on the batch size"),
        ({"tokens": []}, ValueError, "empty batch"),
        ({"tokens": list(range(9))}, ValueError, "batch of 9 exceeds"),  # refused before a row is packed
        ({"probs": torch.rand(9, 3), "tokens": [1]}, ValueError, "batch of 9 exceeds"),  # or copied
    ],
)
def test_bad_list_inputs_name_the_input_and_copy_nothing(bad, error, match):
    b = StaticBuffers(specs(), "cpu", one_launch_copy=True, staged_copy=True)
    b.copy_in(inputs(4), 4, 6)
    before = {n: as_bytes(t).clone() for n, t in b.tensors.items()}
    with pytest.raises(error, match=match):
        b.stage(bad)
    with pytest.raises(TypeError, match="torch.Tensor or a list of ints, got str"):
        b.stage({"tokens": "12"})
    assert all(torch.equal(as_bytes(t), before[n]) for n, t in b.tensors.items())


def test_copy_in_misaligned_sources_use_narrower_words():
    b = StaticBuffers({"x": Buffer((6, 5), torch.int16), "y": Buffer((6,), torch.int64)}, "cpu")
    base = torch.arange(40, dtype=torch.int16)
    x = base[1:31].view(6, 5)  # starts 2 bytes off an 8-byte boundary
    b.copy_in({"x": x, "y": torch.arange(6)}, 6, 6)
    assert torch.equal(b["x"], x) and torch.equal(b["y"], torch.arange(6))


def test_an_entry_alternating_between_its_dense_and_general_forms_copies_right():
    """A device-path source whose rows are row_bytes apart and aligned as its destination writes only its
    mark and address (the rest fixed per ring buffer); a misaligned or strided one writes all its per-call
    columns. One destination switching between the forms from call to call, around the ring more than
    once, copies the same bytes as copy_ + fill_."""
    decl = {"x": Buffer((6, 4), torch.int16, pad=-3), "y": Buffer((6,), torch.int64, pad=9)}  # x: 8-byte words
    a = StaticBuffers(decl, "cpu", one_launch_copy=True)
    p = StaticBuffers(decl, "cpu", one_launch_copy=False)
    base = torch.arange(100, dtype=torch.int16)
    for call in range(STAGING_RING + 5):
        n, form = 1 + call % 6, call % 3
        x = {  # dense; 2 bytes off an 8-byte boundary; every other row of a wider tensor
            0: (base + call)[:24].view(6, 4),
            1: (base + call)[1:25].view(6, 4),
            2: (base + call)[:48].view(12, 4)[::2],
        }[form][:n]
        given = {"x": x, "y": torch.arange(n) * (call + 1)}
        a.stage(given)
        assert a.copy_plan.staged().forms == {0: "dense" if form == 0 else "device", 1: "dense"}  # as taken
        a.commit(min(6, n + 2))
        p.copy_in(given, n, min(6, n + 2))
        for name in decl:
            assert torch.equal(a[name], p[name]), (name, call, form)


@pytest.mark.parametrize("staged", [False, True])
def test_a_failed_or_dropped_stage_copies_nothing_and_the_next_copy_is_right(staged):
    """Nothing half-done: a call whose second input is bad copies none of its inputs, a staged copy that
    is never committed never lands, and many of both (more than the ring holds) leave the ring working."""
    b = StaticBuffers(specs(), "cpu", one_launch_copy=True, staged_copy=staged)
    b.copy_in(inputs(4), 4, 6)
    before = {n: as_bytes(t).clone() for n, t in b.tensors.items()}
    bad = {"tokens": torch.arange(3) + 50, "lens": torch.zeros(3, dtype=torch.int64)}  # lens: wrong dtype
    for _ in range(STAGING_RING + 3):
        with pytest.raises(TypeError, match="lens"):
            b.stage(bad)
        b.stage({"tokens": torch.arange(3) + 70})  # staged, then dropped by the next stage
    assert all(torch.equal(as_bytes(t), before[n]) for n, t in b.tensors.items())
    # buffers taken and dropped are taken again: the ring counts launches only
    assert b.copy_plan.copies_launched == 1 and b.copy_plan.launches == 1
    assert b.check_inputs({"tokens": torch.arange(2)}) == 2  # checks only
    h16 = torch.full((2, 1), 3.0).half()  # a source the copy reads at commit: alive until then
    b.stage({"h16": h16})
    b.commit(3)
    assert b["h16"][:2].eq(3.0).all() and b["h16"][2].eq(-2.5).all()
    assert torch.equal(as_bytes(b["tokens"]), before["tokens"])  # not given: untouched
