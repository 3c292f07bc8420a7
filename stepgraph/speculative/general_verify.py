"""The general sampled-verify path (``lean_sampled_verify`` off): tree target-only sampling over
materialised probabilities, as tree-based engines do it. A chain is the tree with one child per node.

Per request: walk from the root; at each depth try the current node's children in sibling order,
accepting child ``c`` with probability ``q_cur(token_c)``; a rejected child's token is removed from the
current node's distribution. At the first depth with no accepted child, sample from the remaining
distribution (inverse CDF with one coin). Greedy rows (``q`` one-hot at the argmax) give the greedy
result. Graph-safe: static loops over depth and siblings, no host syncs.
Cost: materialises ``q`` for every node (``[B, N, V]`` floats, a sort per row for top-k/top-p).
"""

from __future__ import annotations

import torch

from stepgraph.kernels import written_into
from stepgraph.kernels.chain_sampling_ref import (
    SampledVerifyOutput,
    assemble_output,
    greedy_rows,
    inverse_cdf,
    pivot_draws,
    pivot_requests,
    sampling_probs,
)
from stepgraph.kernels.philox import verify_uniforms


def chain_verify_sampling_tree(
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
    """A chain's sampled verify through the general tree path, in the signature of
    :func:`stepgraph.kernels.chain_verify_sampling` (``filtered``, ``small_top_k``, ``late`` and the ``with_*``
    flags are taken for parity: every filter applies, every field is computed; ``pivot`` as there). Shapes as
    there."""
    B, K1, _ = logits.shape
    nxt, sib = chain_tree(K1 - 1, logits.device)
    root = torch.zeros((B, 1), dtype=torch.long, device=logits.device)  # the root's token is never read
    candidates = torch.cat([root, draft_tokens.long()], 1)
    r = tree_verify_sampling(
        logits, candidates, nxt, sib, temperature, top_k, top_p, seed, offset, max_depth=K1 - 1, seq_lens=seq_lens,
        min_p=min_p, pivot=pivot,
    )  # fmt: skip
    return written_into(r, out)


def chain_tree(num_draft: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(next_token, next_sibling)`` over ``N = K + 1`` nodes for a chain: node j's child is j+1."""
    n = num_draft + 1
    nxt = torch.arange(1, n + 1, device=device)
    nxt[-1] = -1
    return nxt, torch.full((n,), -1, device=device, dtype=torch.long)


def tree_verify_sampling(
    logits: torch.Tensor,
    candidates: torch.Tensor,
    next_token: torch.Tensor,
    next_sibling: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    seed: torch.Tensor,
    offset: torch.Tensor,
    *,
    max_depth: int,
    max_siblings: int = 1,
    seq_lens: torch.Tensor | None = None,
    min_p: torch.Tensor | None = None,
    pivot: bool = False,
) -> SampledVerifyOutput:
    """Target-only tree verification.

    Shapes: ``logits [B, N, V]`` (one row per node), ``candidates [B, N]`` (node tokens; node 0 is the
    root), ``next_token``/``next_sibling`` ``[N]`` (-1 for none), per-request ``temperature``/``top_k``/
    ``top_p``/``seed``/``offset`` ``[B]`` (and ``min_p``, ``None`` for off). Returns tokens along the
    accepted path (then the sampled token, then -1). Node ``c``'s coin and the sample's number come from
    the request's stream at ``(seed, offset)`` as the chain kernel draws them (a chain gets its tokens).
    With ``pivot``, a pivot request (:func:`~stepgraph.kernels.chain_sampling_ref.pivot_requests`) draws a
    token from each node instead and moves to the child that holds it, else emits it: the same law, as in the chain.
    """
    B, N, V = logits.shape
    dev = logits.device
    probs = sampling_probs(logits, temperature, top_k, top_p, filtered=True, min_p=min_p)  # [B, N, V]
    node_coins, final_coin = verify_uniforms(seed, offset, N - 1)  # nodes 1..N-1, then the sample
    coins = torch.cat([torch.zeros_like(final_coin)[:, None], node_coins], 1)  # [B, N]: node c's at c
    if pivot:
        mp = min_p if min_p is not None else torch.zeros(B, device=dev)
        is_pivot = pivot_requests(temperature, top_k, top_p)
        draws = pivot_draws(logits, temperature, top_k, top_p, mp, seed, offset)  # [B, N]: pivot requests' tokens
        drawn = torch.where(greedy_rows(logits, temperature), torch.argmax(logits, -1), draws)
    else:
        is_pivot = torch.zeros(B, dtype=torch.bool, device=dev)
        drawn = torch.zeros((B, N), dtype=torch.long, device=dev)
    rows = torch.arange(B, device=dev)
    cur = torch.zeros(B, dtype=torch.long, device=dev)
    n = torch.zeros(B, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    removed = torch.zeros((B, V), dtype=torch.bool, device=dev)
    path = torch.full((B, max_depth), -1, dtype=torch.long, device=dev)
    for depth in range(max_depth):
        child = next_token[cur]
        moved = torch.zeros(B, dtype=torch.bool, device=dev)
        for _ in range(max_siblings):
            valid = (child >= 0) & ~done & ~moved
            c = child.clamp(min=0)
            tok = candidates[rows, c]
            q = probs[rows, cur, tok]
            acc = valid & torch.where(is_pivot, tok == drawn[rows, cur], coins[rows, c] < q)
            rej = valid & ~acc
            removed = torch.where(acc[:, None], torch.zeros_like(removed), removed)
            removed[rows, tok] |= rej
            path[:, depth] = torch.where(acc, tok, path[:, depth])
            cur = torch.where(acc, c, cur)
            n = n + acc.long()
            moved |= acc
            child = torch.where(rej, next_sibling[c], child)
        done |= ~moved
    row = probs[rows, cur] * ~removed
    pick = inverse_cdf(row, final_coin)
    fallback = torch.argmax(probs[rows, cur], -1)
    final = torch.where(is_pivot, drawn[rows, cur], torch.where(pick >= 0, pick, fallback))
    return assemble_output(path, n, final, offset, seq_lens)
