"""Chain verify sampling in plain torch: the reference the kernels are tested against, the path the
``two_launch_sampling`` piece falls back to, and the one definition of the kept set every path shares.

The kept set of a sampled row, with ``z = x * (1 / T)`` (float32), ``m = max z`` and the weights
``w = exp(z - m)`` (float32):

* top-k (``0 < k < V``): entries whose logit is ``>=`` the k-th largest (ties at the k-th value kept;
  ``-0.0 == +0.0``); ``k = 0`` or ``k >= V`` is off;
* top-p (``p < 1``), over the top-k set: an entry is kept when the mass (float64 sum of ``w``) of
  top-k entries with a strictly larger logit is ``< p * `` the top-k set's mass; ``p = 1`` is off;
* min-p (``min_p > 0``): entries with ``w >= min_p`` (probability at least ``min_p`` times the largest);
  ``min_p = 0`` is off.

``q`` is ``w`` over the kept set, renormalised. Greedy rows (``T == 0``) and degenerate rows (a NaN or
``+inf``, or every entry ``-inf``) are one-hot at the argmax.

The chain rule, and its second form for pivot requests (a draw per row), are in
:mod:`.chain_sampling`; :func:`pivot_draws` defines the draws.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._common import written_into
from .philox import philox_uniform, pivot_counter, verify_stream, verify_uniforms

#: Attempts a pivot row makes at most; past them (never seen: each attempt raises the pivot past its rejected
#: candidates, and rows that need a third are rare) it takes its argmax, which every top-p set keeps.
PIVOT_ROUNDS = 64
#: Candidates an attempt draws from one set: the first that is kept is the row's draw. Rows rejecting draw
#: after draw (a large top-k alone over flat logits, a small top-p) need a few attempts where one candidate
#: each took up to eight.
PIVOT_SAMPLES = 4
#: The largest top-k that the small top-k path lists (the ``top_k`` class); a larger one alone (no top-p) is a
#: pivot request's.
SMALL_TOP_K_MAX = 1024
#: Entries of a pivot row's sub-block (``[i * PIVOT_SUB, (i + 1) * PIVOT_SUB)``): the first draw's unit.
PIVOT_SUB = 256


class SampledVerifyOutput(NamedTuple):
    """Shapes: ``tokens [B, K+1]`` int64 (accepted drafts, then the correction or bonus, then -1);
    ``num_accepted [B]`` int64; ``bonus [B]`` int64 (the last emitted token); ``extend_tokens [B, K+1]``
    (``tokens`` with the -1 tail replaced by valid ids, the draft-extend input); optional
    ``accept_len``, ``new_seq_lens``, ``select`` as in :class:`GreedyVerifyOutput`."""

    tokens: torch.Tensor
    num_accepted: torch.Tensor
    bonus: torch.Tensor
    extend_tokens: torch.Tensor
    accept_len: torch.Tensor | None = None
    new_seq_lens: torch.Tensor | None = None
    select: torch.Tensor | None = None


def assemble_output(accepted, n, final, offset, seq_lens) -> SampledVerifyOutput:
    """The outputs of a sampled verify from ``accepted [B, K]`` (tokens along the path; only the first
    ``n`` count), ``n [B]`` and ``final [B]`` (correction or bonus). Advances ``offset`` by one."""
    B, K = accepted.shape
    dev = accepted.device
    j = torch.arange(K + 1, device=dev)[None, :]
    padded = torch.cat([accepted.long(), torch.zeros((B, 1), dtype=torch.long, device=dev)], 1)
    tokens = torch.where(j < n[:, None], padded, torch.where(j == n[:, None], final[:, None], -1))
    offset.add_(1)
    return SampledVerifyOutput(
        tokens=tokens,
        num_accepted=n,
        bonus=final,
        extend_tokens=torch.where(j < n[:, None], padded, final[:, None]),
        accept_len=n + 1,
        new_seq_lens=(seq_lens + n + 1).to(seq_lens.dtype) if seq_lens is not None else None,
        select=torch.arange(B, device=dev) * (K + 1) + n,
    )


def _degenerate_rows(logits: torch.Tensor) -> torch.Tensor:
    """Rows (``[..., V]``) that fall back to greedy: any NaN or +inf, or every entry -inf."""
    x = logits.float()
    return torch.isnan(x).any(-1) | (x == float("inf")).any(-1) | (x == float("-inf")).all(-1)


def greedy_rows(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """The rows (``[B, R]`` of logits ``[B, R, V]``) whose sample is the argmax: temperature 0, degenerate
    logits, or a temperature so small that the largest logit over it leaves float32 (``x_max * (1 / T)``
    not finite, computed as the kernels compute it): the distribution's limit as ``T -> 0`` is the argmax."""
    B = logits.shape[0]
    t = temperature.float().view(B, 1)
    inv_t = 1.0 / torch.where(t > 0, t, torch.ones_like(t))
    z_max = logits.float().amax(-1) * inv_t
    return (t <= 0) | _degenerate_rows(logits) | ~torch.isfinite(z_max)


def sortable_keys(logits: torch.Tensor) -> torch.Tensor:
    """int64 keys in the kernels' order: ``a < b`` iff key(a) < key(b), ``-0.0`` and ``+0.0`` equal, every
    NaN largest. 16-bit keys for bfloat16 logits (their float32 keys end in 16 zero bits), else 32-bit."""
    x = logits.float()
    x = torch.where(torch.isnan(x), torch.full_like(x, float("nan")), x)
    x = torch.where(x == 0, torch.zeros_like(x), x)
    b = x.view(torch.int32)
    key = b ^ ((b >> 31) & 0x7FFFFFFF)
    if logits.dtype == torch.bfloat16:
        key = key >> 16
    return key.long()


def _weights(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """``w = exp(z - max z)`` with ``z = x * (1 / T)`` in float32, ``[B, R, V]``."""
    B = logits.shape[0]
    t = temperature.float().view(B, 1, 1)
    z = logits.float() * (1.0 / torch.where(t > 0, t, torch.ones_like(t)))
    return torch.exp(z - z.amax(-1, keepdim=True))


def kept_mask(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor | None = None,
) -> torch.Tensor:
    """The kept set (module docstring) of every row: ``[B, R, V]`` bool, for logits ``[B, R, V]`` and
    per-request ``[B]`` settings. Meaningful for sampled rows with regular logits. Cost: a sort per row."""
    B, R, V = logits.shape
    w = _weights(logits, temperature)
    key = sortable_keys(logits)
    skey, order = torch.sort(key, dim=-1, descending=True, stable=True)
    k = top_k.long().view(B, 1, 1)
    kth = skey.gather(-1, (k.clamp(1, V) - 1).expand(B, R, 1))
    keep = torch.where((k > 0) & (k < V), key >= kth, torch.ones_like(key, dtype=torch.bool))
    ws = torch.where(keep, w, torch.zeros_like(w)).double().gather(-1, order)
    before = torch.cumsum(ws, -1) - ws
    starts = torch.ones_like(skey, dtype=torch.bool)
    starts[..., 1:] = skey[..., 1:] != skey[..., :-1]
    arange = torch.arange(V, device=logits.device).expand_as(skey)
    first = torch.cummax(torch.where(starts, arange, torch.zeros_like(arange)), -1).values
    p = top_p.double().view(B, 1, 1)
    keep_sorted = (before.gather(-1, first) < p * ws.sum(-1, keepdim=True)) | (p >= 1.0)
    keep = keep & torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    if min_p is not None:
        mp = min_p.float().view(B, 1, 1)
        keep = keep & ((w >= mp) | (mp <= 0))
    return keep


def filter_cut_keys_ref(
    logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """The smallest kept key of every row after top-k and top-p, ``[B, R]`` int64 (:func:`sortable_keys`)."""
    key = sortable_keys(logits)
    kept = kept_mask(logits, temperature, top_k, top_p)
    return torch.where(kept, key, torch.full_like(key, 2**62)).amin(-1)


def sampling_probs(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    *,
    filtered: bool = True,
    min_p: torch.Tensor | None = None,
) -> torch.Tensor:
    """The sampling distribution ``q`` of every row, materialised: ``[B, R, V]`` float32 (rows sum to 1).

    The kept set of :func:`kept_mask` when ``filtered`` (else every entry). Greedy and degenerate rows
    come back as a one-hot at the argmax. Graph-safe (no host syncs). Cost: a sort per row when filtered.
    """
    e = _weights(logits, temperature)
    if filtered:
        e = torch.where(kept_mask(logits, temperature, top_k, top_p, min_p), e, torch.zeros_like(e))
    probs = e / e.sum(-1, keepdim=True)
    greedy = greedy_rows(logits, temperature)
    one_hot = torch.zeros_like(probs).scatter(-1, torch.argmax(logits, -1, keepdim=True), 1.0)
    return torch.where(greedy[..., None], one_hot, probs)


def chain_verify_sampling_ref(
    logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    seed: torch.Tensor,
    offset: torch.Tensor,
    *,
    min_p: torch.Tensor | None = None,
    filtered: bool = True,
    small_top_k: bool = False,
    pivot: bool = False,
    late: bool = True,
    seq_lens: torch.Tensor | None = None,
    with_accept_len: bool = True,
    with_select: bool = True,
    out: dict[str, torch.Tensor] | None = None,
) -> SampledVerifyOutput:
    """Plain torch implementation of the same rule (materialised ``q``, torch RNG). Graph-safe.
    ``small_top_k``, ``late`` and the ``with_*`` flags are accepted for parity with the kernels and change
    nothing (every filter applies, every field is computed); ``out`` as in the kernel.

    Randomness is the kernel's: each request's Philox stream at ``(seed, offset)``
    (:func:`stepgraph.kernels.philox.verify_uniforms`), one coin per draft and one number for the sample,
    drawn by inverse CDF in vocabulary order as the kernel draws it; with ``pivot`` (and ``filtered``), a
    pivot request's rows draw by :func:`pivot_draws` instead; ``offset`` advances by one. So a
    seeded request gets the kernel's tokens, except where a number falls within float rounding of a
    boundary (the two sum their masses in different orders).
    Cost: ``sampling_probs`` (a sort per row when filtered) + O(B*(K+1)*V) elementwise work.
    """
    B, K1, V = logits.shape
    K = K1 - 1
    dev = logits.device
    probs = sampling_probs(logits, temperature, top_k, top_p, filtered=filtered, min_p=min_p)  # [B, K1, V]
    predict = torch.argmax(logits, -1)
    greedy = greedy_rows(logits, temperature)  # [B, K1]
    d = draft_tokens.long()
    d_ok = (d >= 0) & (d < V)
    d_safe = torch.where(d_ok, d, torch.zeros_like(d))
    q_d = probs[:, :K].gather(-1, d_safe[..., None]).squeeze(-1)
    coins, u = verify_uniforms(seed, offset, K)  # [B, K], [B]
    accept = d_ok & torch.where(greedy[:, :K], d == predict[:, :K], coins < q_d)
    n = accept.long().cumprod(1).sum(1) if K > 0 else torch.zeros(B, dtype=torch.long, device=dev)
    row = probs.gather(1, n.view(B, 1, 1).expand(B, 1, V)).squeeze(1)  # q_n  [B, V]
    excl = torch.where(n < K, d_safe.gather(1, n.clamp(max=max(K - 1, 0)).view(B, 1)).squeeze(1) if K > 0 else n, -1)
    row = torch.where(torch.arange(V, device=dev)[None, :] == excl[:, None], torch.zeros_like(row), row)
    sample = inverse_cdf(row, u)
    pred_n = predict.gather(1, n.view(B, 1)).squeeze(1)
    use_greedy = greedy.gather(1, n.view(B, 1)).squeeze(1) | ~(row > 0).any(-1)
    final = torch.where(use_greedy, pred_n, sample)
    if filtered and pivot:  # pivot requests: a draw per row; the drafts while they match it, then the first miss
        drawing = pivot_requests(temperature, top_k, top_p)
        mp = min_p if min_p is not None else torch.zeros(B, device=dev)
        y = torch.where(greedy, predict, pivot_draws(logits, temperature, top_k, top_p, mp, seed, offset))
        match = d_ok & (d == y[:, :K])
        n_p = match.long().cumprod(1).sum(1) if K > 0 else torch.zeros(B, dtype=torch.long, device=dev)
        n = torch.where(drawing, n_p, n)
        final = torch.where(drawing, y.gather(1, n_p.view(B, 1)).squeeze(1), final)
    return written_into(assemble_output(d, n, final, offset, seq_lens), out)


def pivot_requests(temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: the sampled requests whose rows draw by a rising pivot in the filtered class with
    ``pivot`` on: top-p on (``0 < top_p < 1``) and top-k off (``0``), or a top-k above
    :data:`SMALL_TOP_K_MAX` (with or without top-p; a top-k of ``V`` or more is not off here, so that a
    request is a pivot request exactly when its class is ``top_p``); min-p may be on. Those with both a
    top-k and top-p are :func:`late_pivot_requests`."""
    k = top_k.long()
    top_p_alone = (k <= 0) & (top_p > 0) & (top_p < 1)
    return (temperature > 0) & (top_p_alone | ((k > SMALL_TOP_K_MAX) & (top_p > 0)))


def late_pivot_requests(temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: the pivot requests with a top-k above :data:`SMALL_TOP_K_MAX` and top-p. Their top-p
    weighs the top-k set alone, so their draws start from its cut, once the cut-off rounds have found it."""
    return pivot_requests(temperature, top_k, top_p) & (top_k.long() > SMALL_TOP_K_MAX) & (top_p < 1)


def pivot_draws(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    seed: torch.Tensor,
    offset: torch.Tensor,
) -> torch.Tensor:
    """One draw from ``q_j`` for every row of ``logits [B, K+1, V]`` whose kept set is top-p or top-k (with
    min-p): ``[B, K+1]`` int64, by attempts of :data:`PIVOT_SAMPLES` candidates each. Candidate ``c`` of attempt
    ``r`` takes the number at :func:`~.philox.pivot_counter` ``(K1, r * PIVOT_SAMPLES + c, row)``. Without min-p
    the first attempt's are by :func:`first_pivot_draw`, from every entry; every other by inverse CDF (float64,
    vocabulary order) from the weights of the entries that can be drawn: a key ``>= lo`` and a weight ``>=
    min_p``. ``lo`` starts below every key, or at the top-k cut (the k-th largest key) for
    :func:`late_pivot_requests`, whose first attempt is then by inverse CDF too. A candidate is kept when fewer
    than ``top_k`` keys are strictly larger (``top_k > 0``), the float64 mass of the strictly larger keys that can
    be drawn is ``< top_p *`` the total of every entry ``>=`` the starting ``lo`` (``top_p < 1``) and its weight is
    ``>= min_p``. The row's draw is the attempt's first kept candidate; if none is, no key ``<=`` the largest
    candidate's is kept, ``lo`` rises past it and the row tries again (:data:`PIVOT_ROUNDS` attempts at most).
    Candidates from one set until one is kept are a draw from the kept set, which is an upper set of keys:
    rejection sampling, exact. Graph-safe: on a GPU it runs every attempt (no host sync); on the CPU it stops
    once every row has kept a candidate."""
    B, K1, V = logits.shape
    w32 = _weights(logits, temperature)
    mp = min_p.float().view(B, 1, 1)
    w = w32.double()
    k = top_k.long().view(B, 1, 1)
    key = sortable_keys(logits)
    lo = torch.full((B, K1, 1), -(2**62), dtype=torch.long, device=logits.device)  # below every key
    late = late_pivot_requests(temperature, top_k, top_p).view(B, 1, 1)
    if V > SMALL_TOP_K_MAX:  # else a late request's top-k is V or more: no cut (and no sort)
        kth = torch.sort(key, dim=-1, descending=True).values.gather(
            -1, (k.view(B, 1).clamp(1, V) - 1)[..., None].expand_as(lo)
        )
        lo = torch.where(late & (k < V), kth, lo)  # the top-k cut of late requests
    goal_p = top_p.double().view(B, 1, 1) * torch.where(key >= lo, w, 0.0).sum(-1, keepdim=True)
    w = torch.where((w32 >= mp) | (mp <= 0), w, 0.0)  # min-p's cut, known from the start
    stream = verify_stream(offset, K1).view(B, 1, 1)
    rows = torch.arange(K1, device=logits.device).view(1, K1, 1)
    cands = torch.arange(PIVOT_SAMPLES, device=logits.device)
    inverse_first = (mp > 0) | late  # their first attempt by inverse CDF, from what they can draw
    y = torch.zeros((B, K1), dtype=torch.long, device=logits.device)
    done = torch.zeros((B, K1), dtype=torch.bool, device=logits.device)
    for rnd in range(PIVOT_ROUNDS):
        u = philox_uniform(seed.long().view(B, 1, 1), stream | pivot_counter(K1, rnd * PIVOT_SAMPLES + cands, rows))
        cdf = torch.cumsum(torch.where(key >= lo, w, 0.0), -1)
        pick = torch.searchsorted(cdf, u.double() * cdf[..., -1:], right=True).clamp(max=V - 1)  # [B, K1, SAMPLES]
        if rnd == 0:
            pick = torch.where(inverse_first, pick, first_pivot_draw(logits, temperature, u))
        k_c = key.gather(-1, pick)
        above = torch.stack([torch.where(key > k_c[..., c, None], w, 0.0).sum(-1) for c in range(PIVOT_SAMPLES)], -1)
        larger = torch.stack([(key > k_c[..., c, None]).sum(-1) for c in range(PIVOT_SAMPLES)], -1)
        kept = ((above < goal_p) | (top_p.view(B, 1, 1) >= 1)) & ((larger < k) | (k <= 0))
        kept = kept & ((w32.gather(-1, pick) >= mp) | (mp <= 0))
        first = torch.where(kept, cands, PIVOT_SAMPLES).amin(-1, keepdim=True)  # its first kept candidate
        hit = (first < PIVOT_SAMPLES).squeeze(-1)
        y = torch.where(done | ~hit, y, pick.gather(-1, first.clamp(max=PIVOT_SAMPLES - 1)).squeeze(-1))
        lo = torch.where((done | hit)[..., None], lo, k_c.amax(-1, keepdim=True) + 1)
        done = done | hit
        if not logits.is_cuda and bool(done.all()):
            break
    return torch.where(done, y, torch.argmax(logits, -1))


def first_pivot_draw(logits: torch.Tensor, temperature: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """A pivot row's first candidates, ``[B, K+1, N]`` int64, by numbers ``u [B, K+1, N]``, from every entry of
    ``logits [B, K+1, V]`` (no min-p yet), in two steps that need no ``max z`` before a pass over the row:

    * the sub-block (:data:`PIVOT_SUB` entries) where the cumulative mass passes ``u`` times the row's, a
      sub-block's mass being ``s * exp(p - m)`` (float32 ``exp``, then float64): ``p`` is its largest ``z``,
      ``s`` the float64 sum of its ``exp(z - p)`` (float32), ``m = max z``;
    * the entry of that sub-block where the cumulative ``w`` (float64) passes what is left of the goal,
      or its last one of positive weight.

    The masses differ from the sums of ``w`` by float32 rounding (about 1e-7 relative): the law is ``q``'s
    as closely as a float32 ``u`` resolves it. Rows without a positive weight (degenerate rows, which do
    not draw) give an arbitrary entry."""
    B, K1, V = logits.shape
    N = u.shape[-1]
    t = temperature.float().view(B, 1, 1)
    z = logits.float() * (1.0 / torch.where(t > 0, t, torch.ones_like(t)))
    z_max = z.amax(-1, keepdim=True)
    n_sub = -(-V // PIVOT_SUB)
    zb = torch.nn.functional.pad(z, (0, n_sub * PIVOT_SUB - V), value=float("-inf")).view(B, K1, n_sub, PIVOT_SUB)
    peak = zb.amax(-1)
    some = peak > float("-inf")
    s = torch.where(some[..., None], torch.exp(zb - peak[..., None]), 0.0).double().sum(-1)
    mass = torch.where(some, s * torch.exp(peak - z_max).double(), 0.0)  # [B, K1, n_sub]
    goal = u.double() * mass.sum(-1, keepdim=True)  # [B, K1, N]
    cum = torch.cumsum(mass, -1)
    sub = torch.searchsorted(cum, goal, right=True)
    last = torch.where(mass > 0, torch.arange(n_sub, device=z.device), 0).amax(-1, keepdim=True)
    sub = torch.minimum(sub, last)
    before = torch.nn.functional.pad(cum[..., :-1], (1, 0))  # the mass of the sub-blocks before each
    local = goal - before.gather(-1, sub)
    z_sub = zb.gather(2, sub[..., None].expand(B, K1, N, PIVOT_SUB))  # [B, K1, N, SUB]
    w = torch.exp(z_sub - z_max[..., None]).double()
    lanes = torch.arange(PIVOT_SUB, device=z.device)
    hit = torch.where((w > 0) & (torch.cumsum(w, -1) > local[..., None]), lanes, PIVOT_SUB).amin(-1)
    hit = torch.where(hit < PIVOT_SUB, hit, torch.where(w > 0, lanes, 0).amax(-1))
    return (sub * PIVOT_SUB + hit).clamp(max=V - 1)


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The kernels' sampling rule over ``weights [B, V]`` (>= 0) and numbers ``u [B]`` in ``[0, 1)``: the
    first entry in vocabulary order whose cumulative weight exceeds ``u`` times the total, or the last
    entry of positive weight when rounding leaves none. ``[B]`` int64 (-1 for a row of zero weight)."""
    w = weights.float()
    cdf = torch.cumsum(w, -1)
    goal = (u.float() * cdf[:, -1]).contiguous()[:, None]
    pick = torch.searchsorted(cdf.contiguous(), goal, right=True).squeeze(1)
    positions = torch.arange(w.shape[-1], device=w.device)
    last = torch.where(w > 0, positions, -1).amax(-1)
    return torch.where(pick < w.shape[-1], pick, last)
