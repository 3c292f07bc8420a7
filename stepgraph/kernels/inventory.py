"""The kernel inventory: every kernel, its backend, devices, reference, and the tests and benchmark that
cover it in the source repository (``tests/`` and ``benchmarks/`` are not installed with the package)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


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
        reference="stepgraph.kernels.chain_sampling_ref.chain_verify_sampling_ref",
        launches="temperature 2 (per-split mass; chain walk and sample); top-k 1..1024 with top-p/min-p 5 "
        "(argmax and subset maxima, bound, gather above the bound, k-th key and top-p per row, chain walk); "
        "other filters 11 for bf16 logits, 19 otherwise (statistics, 8 or 16 cut-off rounds, kept mass, chain "
        "walk); top-p without top-k draws by a rising pivot in 9 (statistics, 5 rounds, cut, kept mass, chain "
        "walk), or 12 for bf16 logits and 20 otherwise with a top-k above 1024 and top-p (the general class)",
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
        name="token_logprobs",
        launcher="stepgraph.kernels.logprobs.token_logprobs",
        reference="stepgraph.kernels.logprobs.token_logprobs_ref",
        launches="3 without alternatives (split maxima; float64 sums; per-row scores), 4 with (split and subset "
        "maxima, bound, sums and the entries above the bound listed, per-row top-n)",
        test="tests/kernels/test_logprobs.py",
        benchmark="benchmarks/bench_kernels.py --only logprobs",
        piece="STEPGRAPH_FUSED_LOGPROBS",
    ),
    KernelEntry(
        name="relay_store",
        launcher="stepgraph.kernels.relay.RelayStore",
        reference="stepgraph.kernels.relay.relay_store_ref",
        launches="1 (all fields)",
        test="tests/kernels/test_relay_and_copy.py",
        benchmark="benchmarks/bench_kernels.py --only relay",
        piece="STEPGRAPH_FUSED_RELAY",
    ),
    KernelEntry(
        name="relay_gather",
        launcher="stepgraph.kernels.relay.RelayGather",
        reference="stepgraph.kernels.relay.relay_gather_ref",
        launches="1 (all fields)",
        test="tests/kernels/test_relay_and_copy.py",
        benchmark="benchmarks/bench_kernels.py --only relay",
        piece="STEPGRAPH_FUSED_RELAY",
    ),
    KernelEntry(
        name="input_copy",
        launcher="stepgraph.copy_in.input_copy",
        reference="stepgraph.kernels.copy_in.input_copy_ref",
        launches="1 (+1 host-to-device copy for host inputs and the table)",
        test="tests/kernels/test_relay_and_copy.py",
        benchmark="benchmarks/bench_kernels.py --only copy",
        piece="STEPGRAPH_ONE_LAUNCH_COPY",
    ),
    KernelEntry(
        name="skinny_matmul",
        launcher="stepgraph.kernels.skinny_matmul.skinny_matmul",
        reference="stepgraph.kernels.skinny_matmul.skinny_matmul_ref",
        launches="1, or 2 when the reduction is split (partial sums, then their fixed-order sum)",
        test="tests/kernels/test_skinny_matmul.py",
        benchmark="benchmarks/bench_kernels.py --only matmul",
        piece="example model: ModelConfig(matmul='triton')",
    ),
    KernelEntry(
        name="paged_attention",
        launcher="stepgraph.kernels.decode_attention.paged_attention",
        reference="stepgraph.kernels.decode_attention.reference_paged_attention",
        launches="2 (partial attention over a fixed split of each request's positions; their combine)",
        test="tests/kernels/test_paged_attention.py",
        benchmark="benchmarks/bench_paged.py --only step",
        piece="example model: ModelConfig(kv='paged', attention='triton')",
    ),
    KernelEntry(
        name="planned_paged_attention",
        launcher="stepgraph.kernels.decode_attention.planned_paged_attention",
        reference="stepgraph.kernels.decode_attention.reference_paged_attention",
        launches="2 (partial attention over the host's planned pieces; their combine)",
        test="tests/kernels/test_split_plan.py",
        benchmark="benchmarks/bench_paged.py --only schedule",
        piece="PagedKV(schedule='planned')",
    ),
    KernelEntry(
        name="penalise_rows",
        launcher="stepgraph.kernels.penalties.penalise_rows",
        reference="stepgraph.kernels.penalties.penalise_rows_ref",
        launches="1 after a float32 copy of the logits (one program per verify row, over its request's tokens)",
        test="tests/kernels/test_penalties.py",
        benchmark="benchmarks/bench_penalties.py",
        piece="SpecDecoder(penalties=True)",
    ),
    KernelEntry(
        name="record_tokens",
        launcher="stepgraph.kernels.penalties.record_tokens",
        reference="stepgraph.kernels.penalties.record_tokens_ref",
        launches="1 (one program per request: history positions and count increments)",
        test="tests/kernels/test_penalties.py",
        benchmark="benchmarks/bench_penalties.py",
        piece="SpecDecoder(penalties=True)",
    ),
    KernelEntry(
        name="propose",
        launcher="stepgraph.kernels.prompt_lookup.propose",
        reference="stepgraph.kernels.prompt_lookup.propose_ref",
        launches="1 (one program per query: the n-gram match over its row up to it, then its one-hot row)",
        test="tests/kernels/test_prompt_lookup.py",
        benchmark="benchmarks/bench_drafts.py",
        piece="stepgraph.drafts.PromptLookupDraft",
    ),
)


def print_inventory(console: Console | None = None) -> None:
    """One block per kernel: its name, then a field per line. Values wrap, and a long name folds onto
    the next line instead of being cut, so a narrow or piped terminal shows everything."""
    from rich.console import Console, Group
    from rich.table import Table

    console = console or Console()
    blocks = []
    for k in KERNELS:
        fields = Table.grid(padding=(0, 2))
        fields.add_column(style="dim", no_wrap=True)
        fields.add_column(overflow="fold")
        for label, value in (
            ("backend", f"{k.backend} ({k.devices})"),
            ("launches", k.launches),
            ("toggle", k.piece),
            ("launcher", k.launcher),
            ("reference", k.reference),
            ("tests (repository)", k.test),
            ("benchmark (repository)", k.benchmark),
        ):
            fields.add_row(label, value)
        blocks += [f"[bold]{k.name}[/]", fields, ""]
    console.print(Group(*blocks))
