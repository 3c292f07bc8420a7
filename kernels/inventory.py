"""The kernel inventory: every kernel, its backend, devices, reference, tests and benchmark."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class KernelEntry:
    name: str
    launcher: str
    reference: str
    launches: str
    test: str
    benchmark: str
    backend: str = "Triton"
    devices: str = "CUDA; CPU through TRITON_INTERPRET=1"
    piece: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


KERNELS: tuple[KernelEntry, ...] = (
    KernelEntry(
        name="greedy_chain_verify",
        launcher="stepgraph.kernels.greedy_verify.greedy_chain_verify",
        reference="stepgraph.kernels.greedy_verify.greedy_chain_verify_ref",
        launches="1 with a workspace up to 64 rows (the last program of a request finalizes), else 2",
        test="tests/kernels/test_greedy_verify.py",
        benchmark="benchmarks/bench_kernels.py --only greedy_verify",
        piece="STEPGRAPH_FUSED_GREEDY_VERIFY",
    ),
    KernelEntry(
        name="chain_verify_sampling",
        launcher="stepgraph.kernels.chain_sampling.chain_verify_sampling",
        reference="stepgraph.kernels.chain_sampling.chain_verify_sampling_ref",
        launches="2 (row statistics + exact top-k/top-p cut-off; per-request chain walk)",
        test="tests/kernels/test_chain_sampling.py",
        benchmark="benchmarks/bench_kernels.py --only sampling",
        piece="STEPGRAPH_TWO_LAUNCH_SAMPLING",
    ),
    KernelEntry(
        name="draft_extend_tail",
        launcher="stepgraph.kernels.draft_extend_tail.draft_extend_tail",
        reference="stepgraph.kernels.draft_extend_tail.draft_extend_tail_ref",
        launches="1 with a workspace up to 64 rows, else 2 (argmax of the selected rows; hidden gather)",
        test="tests/kernels/test_draft_extend_tail.py",
        benchmark="benchmarks/bench_kernels.py --only tail",
        piece="STEPGRAPH_FUSED_TAIL",
    ),
    KernelEntry(
        name="argmax_rows",
        launcher="stepgraph.kernels.draft_extend_tail.argmax_rows",
        reference="torch.argmax",
        launches="1 with a workspace up to 64 rows, else 2",
        test="tests/kernels/test_draft_extend_tail.py",
        benchmark="benchmarks/bench_kernels.py --only tail",
        piece="STEPGRAPH_FUSED_TAIL (draft steps)",
    ),
    KernelEntry(
        name="relay_store",
        launcher="stepgraph.kernels.relay.RelayStore",
        reference="stepgraph.kernels.relay.relay_store_ref",
        launches="1 (all fields)",
        test="tests/kernels/test_relay.py",
        benchmark="benchmarks/bench_kernels.py --only relay",
        piece="STEPGRAPH_FUSED_RELAY",
    ),
    KernelEntry(
        name="relay_gather",
        launcher="stepgraph.kernels.relay.RelayGather",
        reference="stepgraph.kernels.relay.relay_gather_ref",
        launches="1 (all fields)",
        test="tests/kernels/test_relay.py",
        benchmark="benchmarks/bench_kernels.py --only relay",
        piece="STEPGRAPH_ONE_LAUNCH_COPY (in-graph input copies)",
    ),
    KernelEntry(
        name="input_copy",
        launcher="stepgraph.kernels.input_copy.input_copy",
        reference="stepgraph.kernels.input_copy.input_copy_ref",
        launches="1 (+1 host-to-device copy for host inputs and the table)",
        test="tests/kernels/test_input_copy.py",
        benchmark="benchmarks/bench_kernels.py --only copy",
        piece="STEPGRAPH_ONE_LAUNCH_COPY",
    ),
)


def print_inventory(console=None) -> None:
    """Two tables: what each kernel is (backend, devices, launches, toggle), then where its reference,
    test and benchmark live. Kernel names never wrap."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    what = Table(title="stepgraph kernels", title_justify="left")
    what.add_column("kernel", no_wrap=True)
    for col in ("backend", "devices", "launches", "piece toggle"):
        what.add_column(col)
    where = Table(title="references, tests, benchmarks", title_justify="left")
    where.add_column("kernel", no_wrap=True)
    for col in ("reference", "test", "benchmark"):
        where.add_column(col)
    for k in KERNELS:
        what.add_row(k.name, k.backend, k.devices, k.launches, k.piece)
        where.add_row(k.name, k.reference, k.test, k.benchmark)
    console.print(what)
    console.print(where)
