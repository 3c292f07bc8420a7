"""The step's switchable pieces: each is a fused Triton path or the plain torch path it replaces.

Every choice here comes from :class:`~stepgraph.config.Toggles`; greedy output is bitwise identical for
every combination (the fused kernels equal their references bit for bit).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from stepgraph.config import Toggles
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref
from stepgraph.kernels.draft_extend_tail import argmax_rows, draft_extend_tail, draft_extend_tail_ref
from stepgraph.kernels.greedy_verify import greedy_chain_verify, greedy_chain_verify_ref
from stepgraph.keys import Sampling
from stepgraph.spec.general_verify import chain_tree, tree_verify_sampling


@dataclass
class VerifyResult:
    """What the rest of the step needs from verify. Shapes ``[B, K+1]`` / ``[B]``."""

    tokens: torch.Tensor  # emitted tokens, -1 after the last
    extend_tokens: torch.Tensor  # draft-extend input (valid ids everywhere)
    num_accepted: torch.Tensor
    select: torch.Tensor  # b * (K + 1) + n: the row the tail reads


class Pieces:
    """The step's pieces. ``workspace`` (a zeroed int32 buffer of >= max_batch * (K + 1)) runs the fused
    argmax kernels in one launch each instead of two; every kernel leaves it zeroed for the next."""

    def __init__(
        self, toggles: Toggles, num_draft: int, device: torch.device, workspace: torch.Tensor | None = None
    ) -> None:
        self.t = toggles
        self.K = num_draft
        self.ws = workspace
        self._tree = chain_tree(num_draft, device)
        self._j = torch.arange(num_draft + 1, device=device)

    # draft steps -------------------------------------------------------------------------------
    def argmax(self, logits: torch.Tensor) -> torch.Tensor:
        """``[N, V] -> [N]`` topk-1 token of each row (fused_tail: the two-stage kernel)."""
        return argmax_rows(logits, workspace=self.ws) if self.t.fused_tail else torch.argmax(logits, -1)

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
        if self.t.fused_greedy_verify:
            r = greedy_chain_verify(
                logits,
                drafts,
                seq_lens,
                with_select=True,
                with_emitted=True,
                out={"bonus": out_bonus, "new_seq_lens": out_seq_lens},
            )
            return VerifyResult(r.emitted, r.predict, r.num_accepted, r.select)
        r = greedy_chain_verify_ref(logits, drafts, seq_lens)
        out_bonus.copy_(r.bonus)
        out_seq_lens.copy_(r.new_seq_lens)
        tokens = torch.where(self._j[None, :] <= r.num_accepted[:, None], r.predict, -1)
        return VerifyResult(tokens, r.predict, r.num_accepted, r.select)

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
        top-k, top-p, seed and offset from the relay ``state`` (fields ``[B]``); ``sampling``: the batch's
        class (TEMPERATURE ignores the filters; TOP_K and TOP_K_TOP_P apply them)."""
        args = (state["temperature"], state["top_k"], state["top_p"])
        filtered = sampling in (Sampling.TOP_K, Sampling.TOP_K_TOP_P)
        seq = state["seq_len"]
        if self.t.lean_sampled_verify and self.t.two_launch_sampling:
            r = chain_verify_sampling(
                logits,
                drafts,
                *args,
                state["seed"],
                state["offset"],
                min_p=state["min_p"],
                filtered=filtered,
                small_top_k=sampling is Sampling.TOP_K,
                seq_lens=seq,
                with_select=True,
                out={"bonus": out_bonus, "new_seq_lens": out_seq_lens},
            )
            return VerifyResult(r.tokens, r.extend_tokens, r.num_accepted, r.select)
        if self.t.lean_sampled_verify:
            r = chain_verify_sampling_ref(
                logits, drafts, *args, state["seed"], state["offset"], min_p=state["min_p"], filtered=filtered,
                seq_lens=seq,
            )  # fmt: skip
        else:
            nxt, sib = self._tree
            candidates = torch.cat([state["token"][:, None], drafts.long()], 1)
            r = tree_verify_sampling(
                logits, candidates, nxt, sib, *args, state["offset"], max_depth=self.K, seq_lens=seq,
                min_p=state["min_p"],
            )  # fmt: skip
        out_bonus.copy_(r.bonus)
        out_seq_lens.copy_(r.new_seq_lens)
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
        if self.t.fused_tail:
            draft_extend_tail(logits, hidden, select, out_tokens=out_tokens, out_hidden=out_hidden, workspace=self.ws)
            return
        r = draft_extend_tail_ref(logits, hidden, select)
        out_tokens.copy_(r.tokens)
        out_hidden.copy_(r.hidden)
