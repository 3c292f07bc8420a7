"""Repetition, presence and frequency penalties inside the step graph, from each request's tokens on the
device.

The definitions are Hugging Face's and the OpenAI API's, combined as vLLM applies them:

* ``repetition_penalty`` ``r`` (Hugging Face's ``RepetitionPenaltyLogitsProcessor``): a token that is
  in the prompt or in the output so far gets ``logit / r`` where its logit is positive, ``logit * r``
  otherwise;
* ``frequency_penalty`` ``f`` and ``presence_penalty`` ``p`` (the OpenAI API): ``logit - f * c - p * (c > 0)``
  with ``c`` the token's count in the output so far (the prompt does not count).

They apply to the target's raw logits, in that order, before temperature and filters; the penalised
logits are float32 whatever the model's dtype (as transformers' and vLLM's processors run).
Log-probabilities stay those of the raw logits.

Inside a chain step, verify row ``i`` of a request (the token after its ``i``-th draft) is penalised with
the output so far *and* drafts ``1..i``: if they are accepted, that row's token follows them; if not, the
row is never used. Each request keeps, in its relay slot's rows of :class:`PenaltyState`, its tokens by
position (prompt then output) and its output counts; the step records what it emits, in the graph.

The draft's proposals are penalised the same way (:func:`draft_penalties`): each draft step's logits with
the output so far and the drafts before it, the draft-extend's accepted row (the one its tail reads) with
the tokens it follows, and the prefill's first draft with the first token. A draft that predicts the target
then proposes the target's penalised choice: a penalty takes no acceptance from a draft that agrees with
the target.

``logit_bias`` (the OpenAI API's) rides on the same copy: each biased token's logit plus its bias, before
the penalties (vLLM's order, and transformers' for its ``sequence_bias`` of single tokens).
``allowed_token_ids`` (vLLM's) is a bias of ``-inf`` on every other token: the slot's bias row then covers
the whole vocabulary, and its rows take it whole.
``min_tokens`` and ``no_repeat_ngram_size`` ride on it too, as transformers'
``MinNewTokensLengthLogitsProcessor`` and ``NoRepeatNGramLogitsProcessor`` define them. Each slot keeps
the position from which its EOS ids may be drawn (the prompt's length plus ``min_tokens``), those ids (up
to :data:`MAX_BANNED`), and its n-gram size. A verify row whose token would come before that position
gets ``-inf`` at the EOS ids, and every row gets ``-inf`` at each token that would complete an n-gram
already in its tokens (prompt, output and the drafts before it), or one of its ``bad_words_ids``.

Only a request's own tokens change, so the penalty reads and writes those (its ``seq_len + 1`` tokens
and the drafts) instead of passing over the vocabulary (but for a request with ``allowed_token_ids``): a
copy of the logits and one kernel (:mod:`stepgraph.kernels.penalties`), and one kernel to record a step's
tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from stepgraph.kernels.penalties import (
    DENSE,
    BadWords,
    Bans,
    LogitBias,
    bad_word_bans,
    bad_word_table,
    penalise_rows,
    record_tokens,
    repeated_ngram_bans,
    write_history,
)
from stepgraph.sampling import MAX_BAD_WORD_LEN, MAX_BAD_WORDS, MAX_LOGIT_BIAS, SamplingParams

#: EOS ids a request's ``min_tokens`` can hold back (transformers' configs carry up to three)
MAX_BANNED = 8


class PenaltyState:
    """Per relay slot: the tokens by position (``history [rows, max_len + 1]`` int32; the last column
    takes a step's writes that go nowhere), the output counts (``counts [rows, V]`` int32) and the
    settings (``settings [rows, 3]`` float32: repetition, presence, frequency), and ``min_tokens``' ban:
    ``ban_until [rows]`` int32 (the first position whose token may be a banned id; 0: none) and ``banned
    [rows, MAX_BANNED]`` int32 (the ids, ``-1``: none), and ``no_repeat [rows]`` int32 (the n-gram size;
    0: none), and ``logit_bias``'s :class:`~stepgraph.kernels.penalties.LogitBias`: ``bias_count [rows]``
    int32 (:data:`~stepgraph.kernels.penalties.DENSE` for ``allowed_token_ids``), ``bias_ids [rows,
    MAX_LOGIT_BIAS]`` int32 and ``bias [rows, V + 1]`` float32 (as much memory as the counts), and
    ``bad_words_ids``' :class:`~stepgraph.kernels.penalties.BadWords`: ``word_count [rows]``, and ``words
    [rows, MAX_BAD_WORDS, MAX_BAD_WORD_LEN]`` int32 (each word's last token, then the others right-aligned:
    :func:`~stepgraph.kernels.penalties.bad_word_table`).
    Row ``rows - 1`` is the scratch row of padded batch rows (slot ``-1``); it stays zero."""

    def __init__(self, rows: int, vocab_size: int, max_len: int, device: torch.device | str) -> None:
        self.rows, self.vocab_size, self.max_len = rows, vocab_size, max_len
        self.device = torch.device(device)
        self.scratch = rows - 1
        self.counts = torch.zeros((rows, vocab_size), dtype=torch.int32, device=self.device)
        self.history = torch.zeros((rows, max_len + 1), dtype=torch.int32, device=self.device)
        self.settings = torch.tensor([SamplingParams().penalties()] * rows, dtype=torch.float32, device=self.device)
        self.ban_until = torch.zeros(rows, dtype=torch.int32, device=self.device)
        self.banned = torch.full((rows, MAX_BANNED), -1, dtype=torch.int32, device=self.device)
        self.no_repeat = torch.zeros(rows, dtype=torch.int32, device=self.device)
        self.bias_count = torch.zeros(rows, dtype=torch.int32, device=self.device)
        self.bias_ids = torch.zeros((rows, MAX_LOGIT_BIAS), dtype=torch.int32, device=self.device)
        self.bias = torch.zeros((rows, vocab_size + 1), dtype=torch.float32, device=self.device)
        # a slot's biases go up from pinned memory: stream-ordered, waiting for no step in flight (a slot's
        # next request is admitted after its last one's steps were read, so its upload has run)
        pinned = self.device.type == "cuda"
        self._host_ids = torch.zeros((rows, MAX_LOGIT_BIAS), dtype=torch.int32, pin_memory=pinned)
        self._host_bias = torch.zeros((rows, MAX_LOGIT_BIAS), dtype=torch.float32, pin_memory=pinned)
        self._bias_values = torch.zeros((rows, MAX_LOGIT_BIAS), dtype=torch.float32, device=self.device)
        # allowed_token_ids go up as a bitmask (a bit a token), then mask the slot's bias row
        packed = (rows, (vocab_size + 7) // 8)
        self._host_allowed = torch.zeros(packed, dtype=torch.uint8, pin_memory=pinned)
        self._allowed = torch.zeros(packed, dtype=torch.uint8, device=self.device)
        self._bit = torch.arange(8, dtype=torch.uint8, device=self.device)
        self.word_count = torch.zeros(rows, dtype=torch.int32, device=self.device)
        words = (rows, MAX_BAD_WORDS, MAX_BAD_WORD_LEN)
        self.words = torch.zeros(words, dtype=torch.int32, device=self.device)
        self._host_words = torch.zeros(words, dtype=torch.int32, pin_memory=pinned)
        self._one = torch.ones(1, dtype=torch.int32, device=self.device)

    def tensors(self) -> dict[str, torch.Tensor]:
        """The state's tensors by name (to save and restore around benchmark replays)."""
        return {
            "penalty_counts": self.counts, "penalty_history": self.history, "penalty_settings": self.settings,
            "penalty_ban_until": self.ban_until, "penalty_banned": self.banned, "penalty_no_repeat": self.no_repeat,
            "penalty_bias_count": self.bias_count, "penalty_bias_ids": self.bias_ids, "penalty_bias": self.bias,
            "penalty_word_count": self.word_count, "penalty_words": self.words,
        }  # fmt: skip

    # ---- host side, outside graphs -------------------------------------------------------------
    def admit(self, slot: int, params: SamplingParams, prompt_len: int = 0, eos: Sequence[int] = ()) -> None:
        """Start ``slot``'s request: no output yet, and the settings of ``params`` (its penalties, its n-gram
        size, its logit bias and bad words, and with ``min_tokens`` its ``eos`` ids held back until it has
        that many new tokens after a prompt of ``prompt_len``); its prompt goes in with :meth:`write_prompt`.
        Stream-ordered, with no wait for the steps in flight.

        Raises
        ------
        ValueError
            For ``min_tokens`` with more than :data:`MAX_BANNED` EOS ids, or a ``logit_bias`` or
            ``bad_words_ids`` id outside the vocabulary.
        """
        if params.min_tokens and len(eos) > MAX_BANNED:
            raise ValueError(f"min_tokens holds back at most {MAX_BANNED} EOS ids; this request has {len(eos)}")
        check_token_ids(params, self.vocab_size)
        self.counts[slot].zero_()
        for column, value in enumerate(params.penalties()):
            self.settings[slot, column].fill_(value)  # a kernel argument, not a pageable copy
        until = min(prompt_len + params.min_tokens, self.max_len + 1) if params.min_tokens and eos else 0
        self.ban_until[slot].fill_(until)
        self.banned[slot].fill_(-1)
        for j, token in enumerate(eos if until else ()):
            self.banned[slot, j].fill_(int(token))
        self.no_repeat[slot].fill_(params.no_repeat_ngram_size)
        self._admit_bias(slot, params.logit_bias)
        self._admit_allowed(slot, params.allowed_token_ids)
        self._admit_words(slot, params.bad_words_ids)

    def _admit_bias(self, slot: int, pairs: tuple[tuple[int, float], ...]) -> None:
        n = len(pairs)
        self.bias_count[slot].fill_(n)
        self.bias[slot].zero_()
        if not n:
            return
        ids, values = zip(*pairs)
        self._host_ids[slot, :n] = torch.tensor(ids, dtype=torch.int32)
        self._host_bias[slot, :n] = torch.tensor(values, dtype=torch.float32)
        self.bias_ids[slot].copy_(self._host_ids[slot], non_blocking=True)
        self._bias_values[slot].copy_(self._host_bias[slot], non_blocking=True)
        self.bias[slot].scatter_(0, self.bias_ids[slot, :n].long(), self._bias_values[slot, :n])

    def _admit_allowed(self, slot: int, allowed: tuple[int, ...] | None) -> None:
        """Every token but ``allowed`` at ``-inf`` in the slot's bias row, which then biases the whole row."""
        if allowed is None:
            return
        mask = np.zeros(self._host_allowed.shape[1] * 8, dtype=bool)
        mask[list(allowed)] = True
        self._host_allowed[slot] = torch.from_numpy(np.packbits(mask, bitorder="little"))
        self._allowed[slot].copy_(self._host_allowed[slot], non_blocking=True)
        bits = (self._allowed[slot, :, None] >> self._bit) & 1  # [V / 8, 8]: token 8 * i + j at [i, j]
        self.bias[slot, : self.vocab_size].masked_fill_(bits.view(-1)[: self.vocab_size] == 0, float("-inf"))
        self.bias_count[slot].fill_(DENSE)

    def _admit_words(self, slot: int, words: tuple[tuple[int, ...], ...]) -> None:
        self.word_count[slot].fill_(len(words))
        if not words:
            return
        self._host_words[slot, : len(words)] = bad_word_table(words, MAX_BAD_WORD_LEN)
        self.words[slot].copy_(self._host_words[slot], non_blocking=True)

    def record_first(self, slot: int, position: int, token: torch.Tensor) -> None:
        """The prefill's first token ``token [1]`` (on the device) at ``position`` (the prompt's length)."""
        self.history[slot, position].copy_(token[0])
        self.counts[slot].index_add_(0, token, self._one)

    def move(self, src: int, dst: int) -> None:
        """Copy slot ``src``'s rows to ``dst`` (a lone request moving to the view slot)."""
        for t in (self.counts, self.history, self.settings, self.ban_until, self.banned, self.no_repeat,
                  self.bias_count, self.bias_ids, self.bias, self.word_count, self.words):  # fmt: skip
            t[dst].copy_(t[src])

    # ---- inside a graph ----------------------------------------------------------------------------
    def write_prompt(
        self, tokens: torch.Tensor, slots: torch.Tensor, start: torch.Tensor, lengths: torch.Tensor
    ) -> None:
        """Prompt tokens ``tokens [n, T]`` (on the device) of the requests in ``slots [n]``: row ``b``'s first
        ``lengths[b]`` at positions ``start[b] ..`` (a whole prompt, or a chunk of one). Graph-safe."""
        T = tokens.shape[1]
        offsets = torch.arange(T, device=tokens.device)
        positions = start[:, None] + offsets
        ok = (offsets < lengths[:, None]) & (slots >= 0)[:, None] & (positions < self.max_len)
        write_history(self.history, slots, positions, tokens, ok, self.scratch)

    def apply(
        self,
        logits: torch.Tensor,
        drafts: torch.Tensor,
        slots: torch.Tensor,
        seq_len: torch.Tensor,
        first_row: int = 0,
        select: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``logits [B, R, V]`` penalised, in a new float32 tensor: row ``r`` of request ``b`` (relay slot
        ``slots[b]``, its last token at position ``seq_len[b]``) is row ``i = first_row + r`` of its chain,
        penalised with its tokens at positions ``0..seq_len[b]`` and ``drafts[b, :i]`` (``drafts [B, K]``,
        ``K >= first_row + R - 1``), after its logit bias, with its EOS ids at ``-inf`` where its token would
        come before ``min_tokens`` and at the tokens that would repeat an n-gram or complete a bad word. The
        verify's ``[B, K+1, V]`` rows start the chain (``first_row = 0``); a draft's rows continue it.
        ``select [B]``: only each request's row ``select[b]`` of the ``B * R`` (flattened; out of range:
        none), the other rows of the result left unwritten. Graph-safe (two kernels: the float32 copy, then
        the penalties)."""
        args = (self.history, self.counts, self.settings, self.scratch)
        bans = Bans(self.ban_until, self.banned, self.no_repeat)
        bias = LogitBias(self.bias_count, self.bias_ids, self.bias)
        words = BadWords(self.word_count, self.words)
        return penalise_rows(
            logits, drafts, slots, seq_len, *args, bans=bans, first_row=first_row, bias=bias, words=words,
            select=select,
        )  # fmt: skip

    def record(self, tokens: torch.Tensor, slots: torch.Tensor, seq_len: torch.Tensor) -> None:
        """A step's emitted ``tokens [B, R]`` (``-1``: none) of the requests in ``slots [B]``, whose last
        token was at ``seq_len [B]``: at positions ``seq_len + 1 ..`` and in the counts. Padded rows record
        nothing. Graph-safe (one kernel)."""
        record_tokens(tokens, slots, seq_len, self.history, self.counts, self.scratch)


def draft_penalties(penalties: PenaltyState | None, draft) -> PenaltyState | None:
    """The state that a draft's proposals are penalised with: ``penalties``, unless there are none or the
    draft's logits only mark its proposals (``draft.marks_proposals``, as prompt lookup's one-hot rows do).
    A draft that predicts the target proposes the target's next token when its logits are processed as
    the target's are: with penalties, its unprocessed argmax is rejected wherever a penalty moves it."""
    if penalties is None or getattr(draft, "marks_proposals", False):
        return None
    return penalties


def check_token_ids(params: SamplingParams, vocab_size: int) -> None:
    """A clear error for a ``logit_bias``, ``bad_words_ids``, ``stop_token_ids`` or ``allowed_token_ids`` id
    outside ``[0, vocab_size)``."""
    if params.logit_bias and params.logit_bias[-1][0] >= vocab_size:
        raise ValueError(f"logit_bias names token {params.logit_bias[-1][0]}; ids must be in [0, {vocab_size})")
    for word in params.bad_words_ids:
        if max(word) >= vocab_size:
            raise ValueError(f"bad_words_ids holds {list(word)}; ids must be in [0, {vocab_size})")
    if params.stop_token_ids and max(params.stop_token_ids) >= vocab_size:
        raise ValueError(
            f"stop_token_ids holds {max(params.stop_token_ids)}, outside the vocabulary [0, {vocab_size}); "
            "it would never match"
        )
    if params.allowed_token_ids and params.allowed_token_ids[-1] >= vocab_size:
        raise ValueError(f"allowed_token_ids holds {params.allowed_token_ids[-1]}; ids must be in [0, {vocab_size})")


def check_some_token_left(params: SamplingParams, stops: Sequence[int]) -> None:
    """A clear error for ``allowed_token_ids`` that leave the request no token to draw: each one banned for
    good (a ``logit_bias`` of ``-inf``, a bad word of one token), or, before ``min_tokens``, held back as
    one of its ``stops`` (its EOS and stop token ids)."""
    if params.allowed_token_ids is None:
        return
    never = {t for t, b in params.logit_bias if b == float("-inf")}
    never |= {w[0] for w in params.bad_words_ids if len(w) == 1}
    left = set(params.allowed_token_ids) - never
    if not left:
        raise ValueError(
            "allowed_token_ids leaves no token to emit: each one is banned by a logit_bias of -inf or a one-token "
            "bad word; allow another token or lift a ban"
        )
    if params.min_tokens and not left - set(stops):
        raise ValueError(
            "allowed_token_ids leaves no token to emit before min_tokens: the others are EOS or stop token ids, "
            "which min_tokens holds back; allow another token or lower min_tokens"
        )


def penalised_logits_ref(
    logits: torch.Tensor, prompt: Sequence[int], output: Sequence[int], params: SamplingParams, eos: Sequence[int] = ()
) -> torch.Tensor:
    """Reference: one row of ``logits [V]`` processed for a request with ``prompt`` and ``output`` so far
    and ``params`` (its logit bias and ``allowed_token_ids``, penalties, ``min_tokens`` over ``eos``,
    ``no_repeat_ngram_size`` and ``bad_words_ids``), over the whole vocabulary, in float32."""
    repetition, presence, frequency = params.penalties()
    dev = logits.device
    counts = torch.bincount(torch.tensor(list(output), dtype=torch.int64, device=dev), minlength=logits.shape[-1])
    seen = counts > 0
    seen[torch.tensor(list(prompt), dtype=torch.int64, device=dev)] = True
    x = logits.to(torch.float32, copy=True)
    for token, bias in params.logit_bias:
        x[token] += bias
    if params.allowed_token_ids is not None:  # every other token biased by -inf
        allowed = torch.zeros_like(seen)
        allowed[torch.tensor(params.allowed_token_ids, dtype=torch.int64, device=dev)] = True
        x = torch.where(allowed, x, x + float("-inf"))
    x = torch.where(seen, torch.where(x > 0, x / repetition, x * repetition), x)
    x = x - frequency * counts.float() - presence * (counts > 0).float()
    banned = set(eos) if len(output) < params.min_tokens else set()
    banned |= repeated_ngram_bans([*prompt, *output], params.no_repeat_ngram_size)
    banned |= bad_word_bans([*prompt, *output], params.bad_words_ids)
    if banned:
        x[torch.tensor(sorted(banned), dtype=torch.int64, device=dev)] = float("-inf")
    return x
