"""Triton kernels of stepgraph, each with a plain-torch reference beside it (``*_ref``).

Every launcher runs on CUDA, or on the CPU through Triton's interpreter (``TRITON_INTERPRET=1``), and
falls back to its reference where Triton cannot run. ``python -m stepgraph kernels`` lists them.
"""

from stepgraph.kernels.chain_sampling import (
    SampledVerifyOutput,
    chain_verify_sampling,
    chain_verify_sampling_ref,
    sampling_probs,
)
from stepgraph.kernels.draft_extend_tail import TailOutput, argmax_rows, draft_extend_tail, draft_extend_tail_ref
from stepgraph.kernels.greedy_verify import GreedyVerifyOutput, greedy_chain_verify, greedy_chain_verify_ref
from stepgraph.kernels.input_copy import InputCopyPlan, StaticCopy, input_copy, input_copy_ref
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
from stepgraph.kernels.skinny_matmul import skinny_matmul, skinny_matmul_ref

__all__ = [
    "KERNELS",
    "GreedyVerifyOutput",
    "InputCopyPlan",
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
    "input_copy",
    "input_copy_ref",
    "print_inventory",
    "relay_gather",
    "relay_gather_ref",
    "relay_store",
    "relay_store_ref",
    "sampling_probs",
    "skinny_matmul",
    "skinny_matmul_ref",
]
