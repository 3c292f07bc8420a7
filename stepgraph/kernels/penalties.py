"""Penalised logits and the token record of :mod:`stepgraph.speculative.penalties`, as two Triton kernels
with their torch references.

``penalise_rows``: ``out = logits`` with the request's logit bias added (:class:`LogitBias`), then every
token it has seen penalised, for each verify row ``i`` with its tokens at positions ``0..seq_len`` and its
drafts ``0..i-1``, then its bans at ``-inf`` (:class:`Bans`: EOS before ``min_tokens``, and the tokens that
would repeat an n-gram of those tokens; :class:`BadWords`: the last token of each bad word whose other
tokens end the row's). Two kernels: the float32 copy, a program a tile of rows, adds a dense bias row
(:data:`DENSE`, every token); then one program per row writes its listed biased tokens and walks the
request's tokens (``seq_len + 1`` of them, not ``max_len``) and its drafts; duplicates write the same value,
since a value depends only on the token and the row.

``record_tokens``: a step's emitted tokens into the history at their positions and into the counts (atomic
adds: a step may emit a token twice).

The state's layout: ``history [S, L + 1]`` int32 (column ``L`` takes writes that go nowhere), ``counts
[S, V]`` int32, ``settings [S, 3]`` float32 (repetition, presence, frequency); slot ``-1`` (a padded
row) reads and writes row ``scratch``, which records nothing. Quotients and products round as in the
reference (IEEE division, no multiply-add contraction), and the result stays in float32: a bf16 row's
penalised logits are not rounded back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ._common import EXACT_ROUNDING, jit_any_batch, next_pow2, use_triton

HISTORY_BLOCK = 256
COPY_BLOCK = 2048  # logits a program of the float32 copy takes (a block of a row, or whole short rows)
#: a :class:`LogitBias` count meaning "the table's whole row"
DENSE = -1
WORD_BLOCK: tl.constexpr = tl.constexpr(64)  # bad words compared at once


class Bans(NamedTuple):
    """Per state row: ``until [S]`` int32 and ``banned [S, E]`` int32 (the ids ``banned[row]``, ``-1``:
    none, are ``-inf`` for a token at a position below ``until[row]``), and ``no_repeat [S]`` int32 (an
    n-gram size, 0: none; a token that would complete an n-gram already among the row's tokens is
    ``-inf``)."""

    until: torch.Tensor
    banned: torch.Tensor
    no_repeat: torch.Tensor


class LogitBias(NamedTuple):
    """Per state row: ``count [S]`` int32 biased tokens, their ids ``ids [S, M]`` int32 (the first ``count``
    of a row; the rest unread), and ``table [S, V + 1]`` float32 with each biased token's bias at its id
    and 0 elsewhere (column ``V`` unread). A bias is never 0: a token without one is left as it is. A
    ``count`` of :data:`DENSE` biases the whole row by its table (``ids`` unread): a request with
    ``allowed_token_ids`` has ``-inf`` at every other token."""

    count: torch.Tensor
    ids: torch.Tensor
    table: torch.Tensor


class BadWords(NamedTuple):
    """Per state row: ``count [S]`` int32 bad words, and ``words [S, W, N]`` int32 (``N`` a power of two): word
    ``w``'s last token at ``words[row, w, 0]``, the tokens before it right-aligned in ``words[row, w, 1:]``,
    :data:`ANY` to their left (the first ``count`` words of a row; the rest unread). So column ``c >= 1`` of
    every word is compared with the row's token ``N - c`` places from its end. :func:`bad_word_table` makes
    a row's."""

    count: torch.Tensor
    words: torch.Tensor


#: a bad word table's entry left of a word's tokens: any token matches it
ANY = -2
ANY_C: tl.constexpr = tl.constexpr(ANY)


def bad_word_table(words: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """``words [len(words), width]`` int32 for :class:`BadWords`: each word's last token, then the ones
    before it right-aligned after :data:`ANY` (a word of at most ``width`` tokens)."""
    table = torch.full((len(words), width), ANY, dtype=torch.int32)
    for w, word in enumerate(words):
        table[w, 0] = word[-1]
        if len(word) > 1:
            table[w, width - len(word) + 1 :] = torch.tensor(word[:-1], dtype=torch.int32)
    return table


def bad_word_bans(tokens: Sequence[int], words: Sequence[Sequence[int]]) -> set[int]:
    """The next tokens that would complete one of ``words`` after ``tokens`` (transformers'
    ``NoBadWordsLogitsProcessor``): each word's last token where ``tokens`` end with the ones before it."""
    tokens = list(tokens)
    return {w[-1] for w in words if len(w) - 1 <= len(tokens) and tokens[len(tokens) - len(w) + 1 :] == list(w[:-1])}


def repeated_ngram_bans(tokens: Sequence[int], n: int) -> set[int]:
    """The next tokens that would repeat an ``n``-gram of ``tokens`` (transformers'
    ``NoRepeatNGramLogitsProcessor``): those that followed an earlier occurrence of the last ``n - 1``."""
    if n <= 0 or len(tokens) + 1 < n:
        return set()
    tokens = list(tokens)
    tail = tokens[len(tokens) - n + 1 :]
    return {tokens[j + n - 1] for j in range(len(tokens) - n + 1) if tokens[j : j + n - 1] == tail}


def penalise(logits, counts, repetition, presence, frequency) -> torch.Tensor:
    """The definition: ``logits`` of seen tokens with ``counts`` their output counts (settings broadcast),
    in float32 (as transformers' and vLLM's logits processors run)."""
    x = logits.float()
    x = torch.where(x > 0, x / repetition, x * repetition)
    return x - frequency * counts - presence * (counts > 0)


def penalise_rows_ref(
    logits,
    drafts,
    slots,
    seq_len,
    history,
    counts,
    settings,
    scratch: int,
    bans: Bans | None = None,
    first_row: int = 0,
    bias: LogitBias | None = None,
    words: BadWords | None = None,
) -> torch.Tensor:
    """Reference of :func:`penalise_rows` (shapes there): the biases added to a copy, a gather of every
    row's seen tokens, the definition, and a scatter into the copy; then the bans' ``-inf`` (the n-gram
    and bad-word bans row by row on the host, for the rows that have them)."""
    B, R, _ = logits.shape
    K, L, V = drafts.shape[1], history.shape[1] - 1, counts.shape[1]
    dev = logits.device
    rows = torch.where(slots < 0, scratch, slots)
    seen = history[rows, :L].long()  # [B, L]
    seen = torch.where(torch.arange(L, device=dev)[None, :] <= seq_len[:, None], seen, seen[:, :1])  # a repeat
    chain_rows = first_row + torch.arange(R, device=dev)  # each row's place in the chain
    chain = torch.arange(K, device=dev)[None, :] < chain_rows[:, None]  # [R, K]: j < i
    d = drafts.long()
    chained = torch.where(chain[None], d[:, None, :], seen[:, :1, None])  # [B, R, K]
    tokens = torch.cat([seen[:, None, :].expand(B, R, L), chained], 2)  # [B, R, L + K]
    n = counts.view(-1).take(rows[:, None, None] * V + tokens)
    n = n + ((tokens[..., None] == d[:, None, None, :]) & chain[None, :, None, :]).sum(-1)
    s = settings[rows][:, :, None, None]  # [B, 3, 1, 1]
    out = logits.to(torch.float32, copy=True)
    if bias is not None:
        table = bias.table[rows, None, :V]  # [B, 1, V]
        out = torch.where(table != 0, out + table, out)
    out.scatter_(2, tokens, penalise(out.gather(2, tokens), n, s[:, 0], s[:, 1], s[:, 2]))
    if words is not None:
        for b, count in enumerate(words.count[rows].tolist()):
            listed = [[t for t in w[1:] if t != ANY] + w[:1] for w in words.words[rows[b], :count].tolist()]
            seen = history[rows[b], : int(seq_len[b]) + 1].tolist()
            for i in range(R) if listed else ():
                banned = bad_word_bans(seen + drafts[b, : min(first_row + i, K)].tolist(), listed)
                out[b, i, sorted(banned)] = float("-inf")
    if bans is None:
        return out
    on = seq_len[:, None] + 1 + chain_rows[None, :] < bans.until[rows][:, None]  # [B, R]
    ids = bans.banned[rows].long()
    hit = torch.zeros(B, V + 1, dtype=torch.bool, device=dev).scatter_(1, torch.where(ids >= 0, ids, V), True)
    out.masked_fill_(on[:, :, None] & hit[:, None, :V], float("-inf"))
    for b, n in enumerate(bans.no_repeat[rows].tolist()):
        if n > 0:
            seen = history[rows[b], : int(seq_len[b]) + 1].tolist()
            for i in range(R):
                banned = repeated_ngram_bans(seen + drafts[b, : min(first_row + i, K)].tolist(), n)
                out[b, i, sorted(banned)] = float("-inf")
    return out


def penalise_rows(
    logits,
    drafts,
    slots,
    seq_len,
    history,
    counts,
    settings,
    scratch: int,
    bans: Bans | None = None,
    first_row: int = 0,
    bias: LogitBias | None = None,
    words: BadWords | None = None,
    select: torch.Tensor | None = None,
) -> torch.Tensor:
    """``logits [B, R, V]`` (any float dtype) penalised into a new float32 tensor: row ``r`` of request
    ``b`` (state row ``slots[b]``, ``-1``: ``scratch``; its last token at position ``seq_len[b]``) is row
    ``i = first_row + r`` of the chain, first biased by ``bias`` (:class:`LogitBias`: ``logit + bias`` at
    the state row's biased tokens), then penalised with the tokens ``history[row, 0..seq_len[b]]`` and
    ``drafts[b, :i]`` (``drafts [B, K]``, ``K >= first_row + R - 1``; the verify's rows: ``first_row = 0``,
    ``K = R - 1``). ``bans`` (:class:`Bans`): row ``i`` (the token at position ``seq_len[b] + 1 + i``) then
    gets ``-inf`` at the ids ``banned[row]`` while that position is below ``until[row]`` (min_tokens' EOS
    ban), and at each token that would complete an ``no_repeat[row]``-gram already among its tokens.
    ``words`` (:class:`BadWords`): row ``i`` gets ``-inf`` at the last token of each of the state row's bad
    words whose other tokens end its tokens. ``select [B]``: only row ``select[b]`` of the ``B * R`` rows
    (flattened over the batch; out of range: none) is read and written for request ``b``, the others of the
    result left as allocated, as a draft-extend's tail reads one row a request. Graph-safe; the torch
    reference off Triton devices."""
    if not use_triton(logits):
        args = (logits, drafts, slots, seq_len, history, counts, settings, scratch)
        return penalise_rows_ref(*args, bans=bans, first_row=first_row, bias=bias, words=words)
    B, R, V = logits.shape
    K = drafts.shape[1]
    logits, drafts = logits.contiguous(), drafts.contiguous()
    if B * R == 0:
        return logits.to(torch.float32, copy=True)
    n_bias, bias_ids, bias_table = bias if bias is not None else (slots, slots, counts)  # unread without a bias
    chosen = select.contiguous() if select is not None else slots  # unread without a selection
    if bias is None and select is None:
        out = logits.to(torch.float32, copy=True)
    else:  # the float32 copy, with each dense bias row (allowed tokens) added on the way
        out = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
        columns = min(COPY_BLOCK, next_pow2(V))  # a tile of whole rows where they are short
        rows = COPY_BLOCK // columns
        _copy_rows_kernel[(triton.cdiv(B * R, rows), triton.cdiv(V, columns))](
            logits, out, slots.contiguous(), n_bias, bias_table, chosen, B * R, R, V, scratch, bias_table.stride(0),
            ROWS=rows, COLUMNS=columns, HAS_BIAS=bias is not None, HAS_SELECT=select is not None, num_warps=4,
            **EXACT_ROUNDING,
        )  # fmt: skip
    until, banned, no_repeat = bans if bans is not None else (slots, slots, slots)  # unread without bans
    E = banned.shape[1] if bans is not None else 1
    n_words, word_table = words if words is not None else (slots, slots[:, None, None])
    _penalise_rows_kernel[(B * R,)](
        logits, out, drafts, slots.contiguous(), seq_len.contiguous(), history, counts, settings, until,
        banned.contiguous(), no_repeat, n_bias, bias_ids, bias_table, n_words, word_table, chosen,
        R, K, V, history.shape[1] - 1, history.stride(0), scratch, first_row, bias_ids.stride(0),
        bias_table.stride(0), word_table.stride(0), word_table.stride(1),
        BLOCK=HISTORY_BLOCK, KB=next_pow2(max(K, 1)), E=next_pow2(E), E_ROW=E, HAS_BAN=bans is not None,
        HAS_BIAS=bias is not None, HAS_WORDS=words is not None, WORD_LEN=word_table.shape[2],
        HAS_SELECT=select is not None, num_warps=4, **EXACT_ROUNDING,
    )  # fmt: skip
    return out


@triton.jit
def _penalised(raw, n, rep, pres, freq):
    x = raw.to(tl.float32)
    x = tl.where(x > 0, tl.math.div_rn(x, rep), x * rep)  # "/" on a GPU is approximate, not IEEE-rounded
    x = x - freq * n.to(tl.float32)
    return x - pres * (n > 0).to(tl.float32)


@triton.jit
def _banned(tok, ids, banning):
    """Whether each of ``tok`` is one of the ids being banned (``banning`` per id)."""
    return tl.sum(((tok[:, None] == ids[None, :]) & banning[None, :]).to(tl.int32), 1) > 0


@triton.jit
def _biased(raw, tok, mask, bias_row, n_bias, HAS_BIAS: tl.constexpr):
    """``raw`` as float32, plus the bias of each of ``tok`` that has one (``bias_row``: the table's row;
    nothing read where ``mask`` is false, or at all when the row has no bias, ``n_bias == 0``)."""
    x = raw.to(tl.float32)
    if HAS_BIAS:
        b = tl.load(bias_row + tok, mask=tl.where(n_bias != 0, mask, False), other=0.0)
        x = tl.where(b != 0, x + b, x)
    return x


@jit_any_batch
def _copy_rows_kernel(
    logits_ptr, out_ptr, slots_ptr, n_bias_ptr, bias_ptr, select_ptr, N, R, V, scratch, bias_stride,
    ROWS: tl.constexpr, COLUMNS: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_SELECT: tl.constexpr,
):  # fmt: skip
    """``out = logits`` as float32 (``N`` rows of ``V``), plus the bias table's row where the row is dense
    (``HAS_BIAS``), only at each request's row ``select[b]`` with ``HAS_SELECT``: a program a tile of
    ``ROWS`` rows by ``COLUMNS`` tokens (grid: row tiles, column tiles)."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    v = tl.program_id(1) * COLUMNS + tl.arange(0, COLUMNS)
    live = r < N
    if HAS_SELECT:  # the other rows are neither read nor written
        live = live & (tl.load(select_ptr + r // R, mask=live, other=-1) == r)
    at = r.to(tl.int64)[:, None] * V + v[None, :]
    inside = live[:, None] & (v < V)[None, :]
    value = tl.load(logits_ptr + at, mask=inside, other=0.0).to(tl.float32)
    if HAS_BIAS:
        slot = tl.load(slots_ptr + r // R, mask=live, other=-1)
        row = tl.where(slot < 0, scratch, slot).to(tl.int64)
        dense = tl.load(n_bias_ptr + row, mask=live, other=0) < 0  # a listed row's biases are the other kernel's
        b = tl.load(bias_ptr + row[:, None] * bias_stride + v[None, :], mask=inside & dense[:, None], other=0.0)
        value = tl.where(b != 0, value + b, value)  # as _biased
    tl.store(out_ptr + at, value, mask=inside)


@jit_any_batch
def _penalise_rows_kernel(
    logits_ptr, out_ptr, drafts_ptr, slots_ptr, seq_ptr, history_ptr, counts_ptr, settings_ptr, until_ptr,
    banned_ptr, no_repeat_ptr, n_bias_ptr, bias_ids_ptr, bias_ptr, n_words_ptr, words_ptr, select_ptr,
    R, K, V, L, history_stride, scratch, first_row, bias_ids_stride, bias_stride, words_stride, word_stride,
    BLOCK: tl.constexpr, KB: tl.constexpr, E: tl.constexpr, E_ROW: tl.constexpr, HAS_BAN: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_WORDS: tl.constexpr, WORD_LEN: tl.constexpr, HAS_SELECT: tl.constexpr,
):  # fmt: skip
    # a banned id's every write is -inf (whichever of this program's threads writes it last)
    pid = tl.program_id(0)
    b = pid // R
    if HAS_SELECT:  # noqa: SIM102 (a constexpr test outside, a runtime one inside: Triton compiles them apart)
        if tl.load(select_ptr + b) != pid:  # a row the copy left out
            return
    i = first_row + pid % R  # the row's place in the chain
    slot = tl.load(slots_ptr + b)
    row = tl.where(slot < 0, scratch, slot).to(tl.int64)
    seq = tl.load(seq_ptr + b)
    rep = tl.load(settings_ptr + row * 3)
    pres = tl.load(settings_ptr + row * 3 + 1)
    freq = tl.load(settings_ptr + row * 3 + 2)
    j = tl.arange(0, KB)
    before = j < tl.minimum(i, K)  # the drafts before row i
    d = tl.load(drafts_ptr + b * K + j, mask=before, other=-1)
    base = pid.to(tl.int64) * V  # this row of logits and of out
    counts_row = counts_ptr + row * V
    e = tl.arange(0, E)
    ids = tl.full([E], -1, tl.int64)
    banning = e < 0
    if HAS_BAN:
        ids = tl.load(banned_ptr + row * E_ROW + e, mask=e < E_ROW, other=-1).to(tl.int64)
        banning = (ids >= 0) & (seq + 1 + i + e * 0 < tl.load(until_ptr + row + e * 0))
    bias_row = bias_ptr + row * bias_stride
    n_bias = 0
    if HAS_BIAS:  # the biased tokens, before the seen ones (the barrier) rewrite theirs with the penalty
        n_bias = tl.load(n_bias_ptr + row)
        for start in range(0, n_bias, BLOCK):  # the listed ids (a dense row's count, < 0: none; the copy biased it)
            at = start + tl.arange(0, BLOCK)
            ok = at < n_bias
            tok = tl.load(bias_ids_ptr + row * bias_ids_stride + at, mask=ok, other=0).to(tl.int64)
            raw = tl.load(logits_ptr + base + tok, mask=ok, other=0.0)
            tl.store(out_ptr + base + tok, _biased(raw, tok, ok, bias_row, n_bias, HAS_BIAS), mask=ok)
        tl.debug_barrier()
    # the request's tokens at positions 0..seq
    for start in range(0, seq + 1, BLOCK):
        p = start + tl.arange(0, BLOCK)
        ok = (p <= seq) & (p < L)
        tok = tl.load(history_ptr + row * history_stride + p, mask=ok, other=0).to(tl.int64)
        n = tl.load(counts_row + tok, mask=ok, other=0)
        n += tl.sum((tok[:, None] == d[None, :]).to(tl.int32), 1)
        raw = tl.load(logits_ptr + base + tok, mask=ok, other=0.0)
        value = _penalised(_biased(raw, tok, ok, bias_row, n_bias, HAS_BIAS), n, rep, pres, freq)
        if HAS_BAN:
            value = tl.where(_banned(tok, ids, banning), float("-inf"), value)
        tl.store(out_ptr + base + tok, value, mask=ok)
    # the drafts before row i
    dt = tl.where(before, d, 0).to(tl.int64)
    n = tl.load(counts_row + dt, mask=before, other=0)
    n += tl.sum((dt[:, None] == d[None, :]).to(tl.int32), 1)
    raw = tl.load(logits_ptr + base + dt, mask=before, other=0.0)
    value = _penalised(_biased(raw, dt, before, bias_row, n_bias, HAS_BIAS), n, rep, pres, freq)
    if HAS_BAN:
        value = tl.where(_banned(dt, ids, banning), float("-inf"), value)
        tl.store(out_ptr + base + tl.where(banning, ids, 0), tl.full([E], float("-inf"), tl.float32), mask=banning)
    tl.store(out_ptr + base + dt, value, mask=before)
    ctx = seq + 1 + tl.minimum(i, K)  # the row's tokens: history 0..seq, then its drafts
    if HAS_BAN or HAS_WORDS:  # the sequence bans after every write above, each a -inf
        tl.debug_barrier()
    if HAS_WORDS:  # a word a row of the tile: its tokens but the last against the row's last ones
        column = tl.arange(0, WORD_LEN)
        tail = _token_at(ctx - WORD_LEN + column, seq, i, K, L, b, row, history_ptr, history_stride, drafts_ptr)
        n_words = tl.load(n_words_ptr + row)
        for w0 in range(0, n_words, WORD_BLOCK):
            w = w0 + tl.arange(0, WORD_BLOCK)
            listed = w < n_words
            entries = words_ptr + row * words_stride + w[:, None].to(tl.int64) * word_stride + column[None, :]
            tile = tl.load(entries, mask=listed[:, None], other=ANY_C)
            fits = (tile == tail[None, :]) | (tile == ANY_C) | (column[None, :] == 0)
            ends = listed & (tl.min(fits.to(tl.int32), axis=1) > 0)
            last = tl.sum(tl.where(column[None, :] == 0, tile, 0), axis=1).to(tl.int64)
            tl.store(out_ptr + base + last, tl.full([WORD_BLOCK], float("-inf"), tl.float32), mask=ends)
    if HAS_BAN:  # n-gram bans
        n = tl.load(no_repeat_ptr + row)
        lanes = tl.arange(0, BLOCK)
        for g0 in range(0, tl.where(n > 0, ctx - n + 1, 0), BLOCK):  # n-grams starting at g (none past ctx)
            g = g0 + lanes  # (loop variables of their own: a compiled loop keeps each name's type)
            match = g <= ctx - n
            for k in range(0, n - 1):  # g's first n - 1 tokens against the row's last n - 1
                at_g = _token_at(g + k, seq, i, K, L, b, row, history_ptr, history_stride, drafts_ptr)
                at_tail = _token_at(ctx - n + 1 + k + lanes * 0, seq, i, K, L, b, row, history_ptr, history_stride,
                                    drafts_ptr)  # fmt: skip
                match = match & (at_g == at_tail)
            nxt = _token_at(g + n - 1, seq, i, K, L, b, row, history_ptr, history_stride, drafts_ptr)
            match = match & (nxt >= 0)
            tl.store(out_ptr + base + tl.where(match, nxt, 0), tl.full([BLOCK], float("-inf"), tl.float32), mask=match)


@triton.jit
def _token_at(p, seq, i, K, L, b, row, history_ptr, history_stride, drafts_ptr):
    """Row ``i``'s token at positions ``p``: the history up to ``seq``, then drafts ``0..i-1``; -1 past them."""
    in_history = (p <= seq) & (p < L) & (p >= 0)
    h = tl.load(history_ptr + row * history_stride + p, mask=in_history, other=-1).to(tl.int64)
    dp = p - seq - 1
    in_drafts = (dp >= 0) & (dp < i) & (dp < K)
    d = tl.load(drafts_ptr + b * K + dp, mask=in_drafts, other=-1).to(tl.int64)
    return tl.where(in_history, h, tl.where(in_drafts, d, -1))


def write_history(history, slots, positions, tokens, ok, scratch: int) -> torch.Tensor:
    """``tokens [B, T]`` into ``history`` at ``positions [B, T]`` of the rows ``slots [B]`` where ``ok``
    (elsewhere into column ``L``, where writes go nowhere). Returns the ids written (0 where not ``ok``)."""
    L = history.shape[1] - 1
    rows = torch.where(slots < 0, scratch, slots)[:, None] * (L + 1)
    ids = torch.where(ok, tokens, 0)
    history.view(-1).scatter_(0, (rows + torch.where(ok, positions, L)).view(-1), ids.int().view(-1))
    return ids


def record_tokens_ref(tokens, slots, seq_len, history, counts, scratch: int) -> None:
    """Reference of :func:`record_tokens`."""
    R, L, V = tokens.shape[1], history.shape[1] - 1, counts.shape[1]
    positions = seq_len[:, None] + 1 + torch.arange(R, device=tokens.device)
    ok = (tokens >= 0) & (slots >= 0)[:, None] & (positions < L)
    ids = write_history(history, slots, positions, tokens, ok, scratch)
    rows = torch.where(slots < 0, scratch, slots)
    counts.view(-1).scatter_add_(0, (rows[:, None] * V + ids).view(-1), ok.int().view(-1))


def record_tokens(tokens, slots, seq_len, history, counts, scratch: int) -> None:
    """A step's ``tokens [B, R]`` (``-1``: none) for the state rows ``slots [B]`` (``-1``: records
    nothing) at positions ``seq_len + 1 ..`` of ``history``, and one count each in ``counts``.
    Graph-safe; the torch reference off Triton devices."""
    if not use_triton(tokens):
        return record_tokens_ref(tokens, slots, seq_len, history, counts, scratch)
    B, R = tokens.shape
    if B * R == 0:
        return None
    _record_tokens_kernel[(B,)](
        tokens.contiguous(), slots.contiguous(), seq_len.contiguous(), history, counts, R, counts.shape[1],
        history.shape[1] - 1,
        history.stride(0), RB=next_pow2(R), num_warps=1,
    )  # fmt: skip
    return None


@jit_any_batch
def _record_tokens_kernel(tokens_ptr, slots_ptr, seq_ptr, history_ptr, counts_ptr, R, V, L, history_stride,
                          RB: tl.constexpr):  # fmt: skip
    b = tl.program_id(0)
    r = tl.arange(0, RB)
    slot = tl.load(slots_ptr + b + r * 0)  # as a vector: every mask below is one
    seq = tl.load(seq_ptr + b + r * 0)
    tok = tl.load(tokens_ptr + b * R + r, mask=r < R, other=-1)
    pos = seq + 1 + r
    ok = (tok >= 0) & (slot >= 0) & (pos < L) & (r < R)
    row = tl.where(slot < 0, 0, slot).to(tl.int64)
    ids = tl.where(ok, tok, 0).to(tl.int64)
    tl.store(history_ptr + row * history_stride + pos, ids.to(tl.int32), mask=ok)
    tl.atomic_add(counts_ptr + row * V + ids, tl.full([RB], 1, tl.int32), mask=ok)
