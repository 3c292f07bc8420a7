"""The step's switchable pieces: for each, the fused Triton path or the plain torch path it replaces.

Every choice is made once, at construction, from :class:`~stepgraph.config.Toggles`. A fused kernel and
its reference take the same arguments and write the same outputs (``out=``), so the step calls whichever
was chosen the same way; greedy output is bitwise identical for every combination (the fused kernels
equal their references bit for bit).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from stepgraph.config import Toggles
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref
from stepgraph.kernels.draft_extend_tail import argmax_rows, draft_extend_tail, draft_extend_tail_ref
from stepgraph.kernels.greedy_verify import greedy_chain_verify, greedy_chain_verify_ref
from stepgraph.sampling import Sampling, sampling_class
from stepgraph.speculative.general_verify import chain_verify_sampling_tree


@dataclass
class VerifyResult:
    """What the rest of the step needs from verify. Shapes ``[B, K+1]`` / ``[B]``.

    ``accepted_row`` indexes the verify's rows flattened over the batch (``[B * (K + 1)]`` for a chain):
    the row of the last accepted position, whose draft-extend output seeds the next step. It is the only
    place the layout of the verified positions shows, so a tree verify fills it the same way.
    """

    tokens: torch.Tensor  # emitted tokens, -1 after the last
    extend_tokens: torch.Tensor  # draft-extend input (valid ids everywhere)
    num_accepted: torch.Tensor
    accepted_row: torch.Tensor


class Pieces:
    """The step's pieces, chosen once. ``workspace`` (a zeroed int32 buffer of >= max_batch * (K + 1) for the
    largest K) runs the fused argmax kernels in one launch each instead of two; every kernel leaves it
    zeroed for the next."""

    def __init__(self, toggles: Toggles, device: torch.device, workspace: torch.Tensor | None = None) -> None:
        self.device, self.toggles = device, toggles
        fused_tail = toggles.fused_tail
        self._argmax = functools.partial(argmax_rows, workspace=workspace) if fused_tail else _torch_argmax
        self._tail = functools.partial(draft_extend_tail, workspace=workspace) if fused_tail else draft_extend_tail_ref
        self._greedy = greedy_chain_verify if toggles.fused_greedy_verify else greedy_chain_verify_ref
        if not toggles.lean_sampled_verify:
            self._sampled = chain_verify_sampling_tree
        else:
            kernels = functools.partial(chain_verify_sampling, dependent=toggles.dependent_launch)
            self._sampled = kernels if toggles.two_launch_sampling else chain_verify_sampling_ref

    # draft steps -------------------------------------------------------------------------------
    def argmax(self, logits: torch.Tensor) -> torch.Tensor:
        """``[N, V] -> [N]`` topk-1 token of each row."""
        return self._argmax(logits)

    # verify --------------------------------------------------------------------------------------
    def greedy_verify(
        self,
        logits: torch.Tensor,
        drafts: torch.Tensor,
        seq_lens: torch.Tensor,
        out_bonus: torch.Tensor,
        out_seq_lens: torch.Tensor,
    ) -> VerifyResult:
        """Greedy chain acceptance over ``logits [B, K+1, V]`` and ``drafts [B, K]``; writes the bonus token
        and ``seq_lens + n + 1`` into ``out_bonus [B]`` / ``out_seq_lens [B]``."""
        out = {"bonus": out_bonus, "new_seq_lens": out_seq_lens}
        r = self._greedy(logits, drafts, seq_lens, with_select=True, with_emitted=True, out=out)
        return VerifyResult(r.emitted, r.predict, r.num_accepted, r.select)

    def sampled_verify(
        self,
        logits: torch.Tensor,
        drafts: torch.Tensor,
        state: dict[str, torch.Tensor],
        sampling: Sampling,
        out_bonus: torch.Tensor,
        out_seq_lens: torch.Tensor,
    ) -> VerifyResult:
        """Sampled chain acceptance (shapes as :meth:`greedy_verify`) with each request's temperature,
        top-k, top-p, min-p, seed and offset from the relay ``state`` (fields ``[B]``), under the options
        the batch's sampling class declares (:data:`stepgraph.sampling.CLASSES`)."""
        r = self._sampled(
            logits,
            drafts,
            state["temperature"],
            state["top_k"],
            state["top_p"],
            state["seed"],
            state["offset"],
            min_p=state["min_p"],
            seq_lens=state["seq_len"],
            with_select=True,
            out={"bonus": out_bonus, "new_seq_lens": out_seq_lens},
            **sampling_class(sampling).kernel,
        )
        return VerifyResult(r.tokens, r.extend_tokens, r.num_accepted, r.select)

    # draft-extend tail --------------------------------------------------------------------------
    def tail(
        self,
        logits: torch.Tensor,
        hidden: torch.Tensor,
        select: torch.Tensor,
        out_tokens: torch.Tensor,
        out_hidden: torch.Tensor,
    ) -> None:
        """Row ``select[b]`` of ``logits [N, V]`` / ``hidden [N, D]``: its argmax into ``out_tokens [B]`` and
        the hidden row into ``out_hidden [B, D]``."""
        self._tail(logits, hidden, select, out_tokens=out_tokens, out_hidden=out_hidden)


def _torch_argmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.argmax(logits, -1)
