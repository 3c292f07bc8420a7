"""Prompt lookup: drafts taken from the request's own tokens, with no draft model.

The draft proposes, after the last token, the token that followed the latest earlier occurrence of the
last ``n`` tokens (``n`` from ``max_ngram`` down to ``min_ngram``, the longest that matches), in the
request's prompt and output so far. It is transformers' ``prompt_lookup_num_tokens`` and vLLM's
``ngram`` method, computed on the device and inside the step graph: repetitive work (code edits,
retrieval-augmented answers, summaries) accepts several tokens per step.

It is a :class:`~stepgraph.speculative.step.Draft` whose cache holds token ids instead of keys and
values: each call writes its input tokens at their positions in the request's row (``cache_rows``), as a
draft model writes its KV cache, then answers every query position from the row up to that position.
So it runs wherever a draft model runs (whole and chunked prefill, both loops, splicing, tensor
parallelism) with the same bookkeeping: a chain's later drafts continue the match through the drafts
before them, and the draft-extend over the verified positions rewrites the row with what was accepted.
Where nothing matches, the proposal is the last token again; any proposal keeps the output exact, since
verify accepts only what the target would emit.

Its logits are one-hot rows (the proposal's logit 1, the others 0), so the step's argmax and
draft-extend tail pick the proposal; its feature is a zero of width 1.
"""

from __future__ import annotations

import numbers

import torch


class PromptLookupDraft:
    """``draft(tokens [B, T], positions [B, T], hidden [B, T, *], cache_rows [B]) -> (logits [B, T, V],
    hidden [B, T, 1])``: position ``t``'s logits one-hot at the token that followed the latest earlier
    match of the ``n`` tokens ending there.

    Parameters
    ----------
    vocab_size:
        V, the target's vocabulary.
    num_rows:
        Cache rows, the scratch row included (every ``cache_rows`` value is below it).
    max_seq_len:
        Positions per row; a write past it goes to a sink column.
    device:
        Where the token rows live (``[num_rows, max_seq_len + 1]`` int32).
    max_ngram, min_ngram:
        The lengths of suffix matched, longest first (transformers' ``max_matching_ngram_size``, vLLM's
        ``prompt_lookup_max`` / ``prompt_lookup_min``).
    """

    hidden_size = 1

    def __init__(
        self,
        vocab_size: int,
        num_rows: int,
        max_seq_len: int,
        device: torch.device | str = "cpu",
        *,
        max_ngram: int = 3,
        min_ngram: int = 1,
    ) -> None:
        for name, value in (("vocab_size", vocab_size), ("num_rows", num_rows), ("max_seq_len", max_seq_len)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not (isinstance(min_ngram, int) and isinstance(max_ngram, int) and 1 <= min_ngram <= max_ngram):
            raise ValueError(
                f"need 1 <= min_ngram <= max_ngram (ints), got min_ngram={min_ngram!r}, max_ngram={max_ngram!r}"
            )
        self.vocab_size, self.max_seq_len = int(vocab_size), int(max_seq_len)
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        self.device = torch.device(device)
        self.rows = torch.zeros((num_rows, max_seq_len + 1), dtype=torch.int32, device=self.device)
        self._columns = torch.arange(max_seq_len + 1, device=self.device)

    @classmethod
    def for_example(cls, target, **kwargs) -> PromptLookupDraft:
        """Sized for an example target (:class:`~stepgraph.examples.model.ExampleTarget`)."""
        cfg = target.cfg
        return cls(cfg.vocab_size, cfg.scratch_row + 1, cfg.max_seq_len, target.device, **kwargs)

    def __call__(self, tokens, positions, hidden, cache_rows):
        B, T = tokens.shape
        at = positions.clamp(0, self.max_seq_len)  # past the row: the sink column
        self.rows[cache_rows[:, None].expand(B, T), at] = tokens.to(torch.int32)
        proposal = lookup(self.rows[cache_rows], at, self.min_ngram, self.max_ngram)  # [B, T]
        proposal = torch.where(proposal >= 0, proposal, tokens.to(torch.int32)).clamp(0, self.vocab_size - 1)
        logits = torch.zeros((B, T, self.vocab_size), dtype=hidden.dtype, device=tokens.device)
        logits.scatter_(2, proposal.long()[..., None], 1.0)
        return logits, hidden.new_zeros((B, T, 1))


def lookup(rows: torch.Tensor, at: torch.Tensor, min_ngram: int, max_ngram: int) -> torch.Tensor:
    """For each query ``at[b, t]`` (a position of ``rows [B, L]``, whose tokens up to it are known): the
    token after the latest ``j < at`` whose ``n`` tokens ending at ``j`` equal those ending at ``at``,
    for the longest ``n`` in ``min_ngram..max_ngram`` that matches; ``-1`` where none does. ``[B, T]``,
    graph-safe (no host sync), ``O(B * T * L * max_ngram)``."""
    B, L = rows.shape
    j = torch.arange(L, device=rows.device)[None, None, :]
    q = at[..., None]  # [B, T, 1]
    before = j < q
    same = torch.ones((B, *at.shape[1:], L), dtype=torch.bool, device=rows.device)
    best = torch.full(at.shape, -1, dtype=torch.int64, device=rows.device)
    for n in range(1, max_ngram + 1):  # same: tokens j - m == tokens at - m for every m < n
        m = n - 1
        shifted = torch.roll(rows, m, 1)  # shifted[:, j] = rows[:, j - m] (wrapped where j < m: masked)
        suffix = torch.gather(rows, 1, (at - m).clamp(min=0))  # [B, T]
        same &= shifted[:, None, :] == suffix[..., None]
        if n >= min_ngram:  # longer matches overwrite shorter ones
            match = same & before & (j >= m) & (q >= m)
            latest = torch.where(match, j, -1).amax(-1)  # [B, T]
            best = torch.where(latest >= 0, latest, best)
    follows = torch.gather(rows, 1, (best + 1).clamp(max=L - 1))
    return torch.where(best >= 0, follows.to(torch.int64), -1)
