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
draft-extend tail pick the proposal; its feature is a zero of width 1. A call is two launches: the
write of its tokens, and one kernel that matches and writes the one-hot rows
(:mod:`stepgraph.kernels.prompt_lookup`).
"""

from __future__ import annotations

import numbers

import torch

from stepgraph.kernels.prompt_lookup import propose


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
    #: its logits only mark the proposals: the step does not penalise them (penalties would move a one-hot
    #: row's argmax off its proposal)
    marks_proposals = True

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
        args = (self.min_ngram, self.max_ngram, self.vocab_size, hidden.dtype)
        return propose(self.rows, cache_rows, at, tokens, *args), hidden.new_zeros((B, T, 1))
