"""Triton kernels of stepgraph, each with a plain-torch reference beside it (``*_ref``).

Every launcher runs on CUDA, or on the CPU through Triton's interpreter (``TRITON_INTERPRET=1``), and
falls back to its reference where Triton cannot run. ``python -m stepgraph kernels`` lists them.
"""

from ._common import triton_interprets, use_triton, written_into
from .chain_sampling import (
    SampledVerifyOutput,
    chain_verify_sampling,
    chain_verify_sampling_ref,
    sampling_probs,
)
from .copy_in import input_copy_ref
from .draft_extend_tail import TailOutput, argmax_rows, draft_extend_tail, draft_extend_tail_ref
from .greedy_verify import GreedyVerifyOutput, greedy_chain_verify, greedy_chain_verify_ref
from .inventory import KERNELS, print_inventory
from .relay import (
    RelayGather,
    RelayStore,
    check_slots,
    relay_gather,
    relay_gather_ref,
    relay_store,
    relay_store_ref,
)
from .row_copy import StaticCopy
from .skinny_matmul import skinny_matmul, skinny_matmul_ref

__all__ = [
    "KERNELS",
    "GreedyVerifyOutput",
    "RelayGather",
    "RelayStore",
    "SampledVerifyOutput",
    "StaticCopy",
    "TailOutput",
    "argmax_rows",
    "chain_verify_sampling",
    "chain_verify_sampling_ref",
    "check_slots",
    "draft_extend_tail",
    "draft_extend_tail_ref",
    "greedy_chain_verify",
    "greedy_chain_verify_ref",
    "input_copy_ref",
    "print_inventory",
    "relay_gather",
    "relay_gather_ref",
    "relay_store",
    "relay_store_ref",
    "sampling_probs",
    "skinny_matmul",
    "skinny_matmul_ref",
    "triton_interprets",
    "use_triton",
    "written_into",
]
