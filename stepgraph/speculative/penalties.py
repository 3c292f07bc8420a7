"""Repetition, presence and frequency penalties inside the step graph, from each request's tokens on the
device.

The definitions are Hugging Face's and the OpenAI API's, combined as vLLM applies them:

* ``repetition_penalty`` ``r`` (Hugging Face's ``RepetitionPenaltyLogitsProcessor``): a token that is
  in the prompt or in the output so far gets ``logit / r`` where its logit is positive, ``logit * r``
  otherwise;
* ``frequency_penalty`` ``f`` and ``presence_penalty`` ``p`` (the OpenAI API): ``logit - f * c - p * (c > 0)``
  with ``c`` the token's count in the output so far (the prompt does not count).

They apply to the target's raw logits, in that order, before temperature and filters, computed in float32
and rounded once to the logits' dtype. Log-probabilities stay those of the raw logits.

Inside a chain step, verify row ``i`` of a request (the token after its ``i``-th draft) is penalised with
the output so far *and* drafts ``1..i``: if they are accepted, that row's token follows them; if not, the
row is never used. Each request keeps, in its relay slot's rows of :class:`PenaltyState`, its tokens by
position (prompt then output) and its output counts; the step records what it emits, in the graph.

Only a request's own tokens change, so the penalty gathers and scatters at those (its ``seq_len + 1``
tokens and the drafts) instead of passing over the vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from stepgraph.sampling import NEUTRAL


def penalise(
    logits: torch.Tensor,
    counts: torch.Tensor,
    repetition: torch.Tensor,
    presence: torch.Tensor,
    frequency: torch.Tensor,
) -> torch.Tensor:
    """``logits`` (any float dtype) of tokens that were seen (prompt or output), with ``counts`` their
    output counts (same shape; settings broadcast against it): the penalised logits, in float32 and
    rounded once to ``logits.dtype``."""
    x = logits.float()
    x = torch.where(x > 0, x / repetition, x * repetition)
    x = x - frequency * counts - presence * (counts > 0)
    return x.to(logits.dtype)


class PenaltyState:
    """Per relay slot: the tokens by position (``history [rows, max_len + 1]`` int32; the last column
    takes a step's writes that go nowhere), the output counts (``counts [rows, V]`` int32) and the
    settings (``settings [rows, 3]`` float32: repetition, presence, frequency). Row ``rows - 1`` is the
    scratch row of padded batch rows (slot ``-1``); it stays zero."""

    def __init__(self, rows: int, vocab_size: int, max_len: int, device: torch.device | str) -> None:
        self.rows, self.vocab_size, self.max_len = rows, vocab_size, max_len
        self.device = torch.device(device)
        self.scratch = rows - 1
        self.counts = torch.zeros((rows, vocab_size), dtype=torch.int32, device=self.device)
        self.history = torch.zeros((rows, max_len + 1), dtype=torch.int32, device=self.device)
        self.settings = torch.tensor([NEUTRAL] * rows, dtype=torch.float32, device=self.device)
        self._positions = torch.arange(max_len, device=self.device)
        self._one = torch.ones(1, dtype=torch.int32, device=self.device)

    def tensors(self) -> dict[str, torch.Tensor]:
        """The state's tensors by name (to save and restore around benchmark replays)."""
        return {"penalty_counts": self.counts, "penalty_history": self.history, "penalty_settings": self.settings}

    # ---- host side, outside graphs -------------------------------------------------------------
    def admit(self, slot: int, prompt: Sequence[int], settings: Sequence[float]) -> None:
        """Start ``slot``'s request: its prompt (at positions ``0..P-1``), no output yet, its settings
        (``repetition, presence, frequency``). Stream-ordered, with no wait for the steps in flight."""
        if not 0 < len(prompt) <= self.max_len:
            raise ValueError(f"a prompt of {len(prompt)} tokens does not fit the penalties' {self.max_len} positions")
        self.counts[slot].zero_()
        ids = torch.tensor(prompt, dtype=torch.int32)
        if self.device.type == "cuda":
            ids = ids.pin_memory()
        self.history[slot, : len(prompt)].copy_(ids, non_blocking=True)
        for column, value in enumerate(settings):
            self.settings[slot, column].fill_(float(value))  # a kernel argument, not a pageable copy

    def record_first(self, slot: int, position: int, token: torch.Tensor) -> None:
        """The prefill's first token ``token [1]`` (on the device) at ``position`` (the prompt's length)."""
        self.history[slot, position].copy_(token[0])
        self.counts[slot].index_add_(0, token, self._one)

    def move(self, src: int, dst: int) -> None:
        """Copy slot ``src``'s rows to ``dst`` (a lone request moving to the view slot)."""
        for t in (self.counts, self.history, self.settings):
            t[dst].copy_(t[src])

    # ---- inside a graph ----------------------------------------------------------------------------
    def rows_of(self, slots: torch.Tensor) -> torch.Tensor:
        """``slots [B]`` as rows of the state (a padded row's ``-1``: the scratch row)."""
        return torch.where(slots < 0, self.scratch, slots)

    def apply(
        self, logits: torch.Tensor, drafts: torch.Tensor, slots: torch.Tensor, seq_len: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Penalise ``logits [B, K+1, V]`` in place: row ``i`` of request ``b`` (relay slot ``slots[b]``, its
        last token at position ``seq_len[b]``) with its tokens at positions ``0..seq_len[b]`` and
        ``drafts[b, :i]`` (``drafts [B, K]``). Returns what :meth:`restore` needs to put the raw logits
        back. Graph-safe."""
        B, R, _ = logits.shape
        K = drafts.shape[1]
        rows = self.rows_of(slots)
        seen = self.history[rows, : self.max_len].long()  # [B, L]
        seen = torch.where(self._positions[None, :] <= seq_len[:, None], seen, seen[:, :1])  # a repeat: no change
        chain = torch.arange(K, device=logits.device)[None, :] < torch.arange(R, device=logits.device)[:, None]
        d = drafts.long()
        chained = torch.where(chain[None], d[:, None, :], seen[:, :1, None])  # [B, R, K]: drafts before row i
        tokens = torch.cat([seen[:, None, :].expand(B, R, self.max_len), chained], 2)  # [B, R, W]
        raw = logits.gather(2, tokens)
        counts = self.counts.view(-1).take(rows[:, None, None] * self.vocab_size + tokens)
        counts = counts + ((tokens[..., None] == d[:, None, None, :]) & chain[None, :, None, :]).sum(-1)
        s = self.settings[rows][:, :, None, None]  # [B, 3, 1, 1]
        logits.scatter_(2, tokens, penalise(raw, counts, s[:, 0], s[:, 1], s[:, 2]))
        return tokens, raw

    @staticmethod
    def restore(logits: torch.Tensor, undo: tuple[torch.Tensor, torch.Tensor]) -> None:
        """Put back the raw logits that :meth:`apply` penalised."""
        tokens, raw = undo
        logits.scatter_(2, tokens, raw)

    def record(self, tokens: torch.Tensor, slots: torch.Tensor, seq_len: torch.Tensor) -> None:
        """A step's emitted ``tokens [B, R]`` (``-1``: none) of the requests in ``slots [B]``, whose last
        token was at ``seq_len [B]``: at positions ``seq_len + 1 ..`` and in the counts. Padded rows record
        nothing. Graph-safe."""
        R = tokens.shape[1]
        rows = self.rows_of(slots)
        positions = seq_len[:, None] + 1 + torch.arange(R, device=tokens.device)
        ok = (tokens >= 0) & (slots >= 0)[:, None] & (positions < self.max_len)
        positions = torch.where(ok, positions, self.max_len)  # the column of writes that go nowhere
        ids = torch.where(ok, tokens, 0)
        width = self.max_len + 1
        self.history.view(-1).scatter_(0, (rows[:, None] * width + positions).view(-1), ids.int().view(-1))
        self.counts.view(-1).scatter_add_(0, (rows[:, None] * self.vocab_size + ids).view(-1), ok.int().view(-1))


def penalised_logits_ref(
    logits: torch.Tensor, prompt: Sequence[int], output: Sequence[int], settings: Sequence[float]
) -> torch.Tensor:
    """Reference: one row of ``logits [V]`` penalised for a request with ``prompt`` and ``output`` so far
    and ``settings`` (repetition, presence, frequency), over the whole vocabulary."""
    repetition, presence, frequency = settings
    counts = torch.bincount(torch.tensor(list(output), dtype=torch.int64), minlength=logits.shape[-1])
    seen = counts > 0
    seen[torch.tensor(list(prompt), dtype=torch.int64)] = True
    x = logits.float()
    x = torch.where(seen, torch.where(x > 0, x / repetition, x * repetition), x)
    x = x - frequency * counts.float() - presence * seen.logical_and(counts > 0).float()
    return x.to(logits.dtype)
