import pytest
import torch

from stepgraph.copy_in import input_copy
from stepgraph.kernels import StaticCopy, input_copy_ref
from stepgraph.kernels.inventory import KERNELS, print_inventory
from stepgraph.kernels.relay import (
    RelayGather,
    RelayStore,
    check_slots,
    relay_gather,
    relay_gather_ref,
    relay_store,
    relay_store_ref,
)
from tests.conftest import HAS_CUDA

DEV = "cuda" if HAS_CUDA else "cpu"


def fields(S=7):
    return [
        torch.randn(S, 33, device=DEV).bfloat16(),
        torch.arange(S, device=DEV),
        torch.randint(0, 9, (S,), device=DEV, dtype=torch.int32),
        torch.rand(S, device=DEV),
        torch.rand(S, 3, device=DEV) > 0.5,
    ]


def sources(B=5):
    return [
        torch.randn(B, 33, device=DEV).bfloat16(),
        torch.arange(B, device=DEV) + 100,
        torch.arange(B, device=DEV, dtype=torch.int32) + 50,
        torch.rand(B, device=DEV),
        torch.rand(B, 3, device=DEV) > 0.5,
    ]


def test_relay_store_one_launch_equals_per_field():
    slots = torch.tensor([3, -1, 0, 6, 2], device=DEV)
    a, b = fields(), fields()
    for x, y in zip(a, b):
        y.copy_(x)
    src = sources()
    RelayStore(a, src)(slots)
    relay_store_ref(b, src, slots)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    relay_store(a, src, slots)  # functional form
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_relay_store_scratch_row_path_is_graph_safe_and_equal():
    slots = torch.tensor([3, -1, 0, -1, 2], device=DEV)
    a, b = fields(8), fields(8)
    for x, y in zip(a, b):
        y.copy_(x)
    src = sources()
    RelayStore(a, src, fused=False, scratch_row=7)(slots)
    relay_store_ref(b, src, slots)
    assert all(torch.equal(x[:7], y[:7]) for x, y in zip(a, b))  # row 7 is scratch


def test_relay_gather_pads_and_skips_out_of_range():
    f = fields()
    slots = torch.tensor([4, -1, 0, 99], device=DEV)  # 99: out of range -> pad, never read
    pads = [0.0, -1, 3, 0.5, True]
    outs = [torch.empty(4, *t.shape[1:], dtype=t.dtype, device=DEV) for t in f]
    ref = [torch.empty_like(o) for o in outs]
    RelayGather(f, outs, pads)(slots)
    relay_gather_ref(f, ref, torch.where(slots >= 7, -1, slots), pads)
    assert all(torch.equal(x, y) for x, y in zip(outs, ref))
    outs2 = [torch.empty_like(o) for o in outs]
    relay_gather(f, outs2, slots, pads)
    assert all(torch.equal(x, y) for x, y in zip(outs, outs2))


def test_check_slots_reports_out_of_range():
    check_slots(torch.tensor([0, -1, 6]), 7)
    with pytest.raises(ValueError, match=r"\[0, 7\)"):
        check_slots(torch.tensor([0, 7]), 7)
    with pytest.raises(ValueError, match="integer"):
        check_slots(torch.tensor([0.0]), 7)


def test_relay_errors():
    with pytest.raises(ValueError, match="dtype"):
        RelayStore([torch.zeros(4, device=DEV)], [torch.zeros(4, dtype=torch.int64, device=DEV)])
    with pytest.raises(ValueError, match="rows"):
        RelayStore([torch.zeros(4, 2, device=DEV)], [torch.zeros(4, 3, device=DEV)])


@pytest.mark.parametrize("fused", [True, False])
def test_relay_state_clear_resets_one_slot_to_its_pads(fused):
    """A request's slot given back: every field of that slot back to its pad value (one launch when
    fused), the other slots untouched."""
    from stepgraph.config import Toggles
    from stepgraph.speculative.relay import RelayState

    relay = RelayState(
        5, 4, 3, torch.bfloat16, torch.device(DEV), 9, Toggles.all(True).with_piece("fused_relay", fused)
    )
    assert relay._clear.fused == (fused and relay._store.fused)
    for f in relay.fields.values():
        f.copy_(torch.randint(1, 100, f.shape, device=DEV).to(f.dtype))
    before = {n: f.clone() for n, f in relay.fields.items()}
    relay.clear(2)
    for n, f in relay.fields.items():
        assert torch.equal(f[2], torch.full_like(f[2], relay.pads[n])), n
        keep = [s for s in range(f.shape[0]) if s != 2]
        assert torch.equal(f[keep], before[n][keep]), n
    with pytest.raises(ValueError, match="slot 6 outside"):
        relay.clear(6)


def test_static_copy_and_functional_copy():
    srcs, dsts = sources(), [torch.zeros(8, *s.shape[1:], dtype=s.dtype, device=DEV) for s in sources()]
    ref = [d.clone() for d in dsts]
    pads = [1.0, -1, 2, 0.25, False]
    StaticCopy(srcs, dsts, pads)(5, 7)
    input_copy_ref(srcs, ref, 5, 7, pads)
    assert all(torch.equal(a, b) for a, b in zip(dsts, ref))
    dsts2 = [torch.zeros_like(d) for d in dsts]
    input_copy(srcs, dsts2, 5, 7, pads)
    assert all(torch.equal(a, b) for a, b in zip(dsts2, ref))


def test_inventory_lists_every_kernel_and_its_paths_exist():
    import importlib
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    names = {k.name for k in KERNELS}
    assert {"greedy_chain_verify", "chain_verify_sampling", "draft_extend_tail", "relay_store", "input_copy"} <= names
    for k in KERNELS:
        for dotted in (k.launcher, k.reference):
            mod, _, attr = dotted.rpartition(".")
            assert hasattr(importlib.import_module(mod), attr), dotted
        assert (root / k.test).is_file(), k.test
        assert (root / k.benchmark.split()[0]).is_file(), k.benchmark
        bench = (root / k.benchmark.split()[0]).read_text()
        assert k.benchmark.split()[-1] in bench  # the --only name is one of the script's benchmarks


def test_inventory_shows_whole_names_at_80_columns():
    from rich.console import Console

    console = Console(record=True, width=80)
    print_inventory(console)
    text = console.export_text()
    assert "…" not in text
    flat = text.replace("\n", "").replace(" ", "")
    for k in KERNELS:
        for value in (k.name, k.piece, k.reference, k.test):
            assert value.replace(" ", "") in flat, value
