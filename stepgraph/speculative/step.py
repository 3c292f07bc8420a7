"""The EAGLE-style chain speculative step (topk-1, K draft tokens) as one graph per key.

Per request, with state (token ``t`` at position ``s``, first draft ``d_1``, draft feature ``f``):

1. draft: ``d_2..d_K`` by K-1 topk-1 draft steps from ``(d_1, f)`` at positions ``s+1..s+K-1``;
2. verify: the target over ``[t, d_1..d_K]`` at ``s..s+K``; greedy or sampled acceptance gives ``n``
   accepted drafts and one more token (the bonus or the correction);
3. draft-extend: the draft over the K+1 verified positions ``s+1..s+K+1`` with the target's hidden
   states, then the tail: row ``n`` gives the next step's ``d_1`` and feature;
4. commit: next state (bonus, next ``d_1``, feature, ``s + n + 1``, random offset) into the request's slot.

With a KV cache that keeps metadata of its own (a paged cache's block table, :mod:`stepgraph.kv`), a
first stage, ``kv``, brings it up to date from the step's inputs before any forward reads it.

The stages are data (:mod:`stepgraph.speculative.stages`). K is part of each key: a step built for
several draft lengths captures each, and K = 0 is plain decoding (the target over ``[t]``, its sampling,
and the draft over that one position, so the draft's cache and the relay stay current for any K next).
Everything stays on the device; the per-step host inputs are the batch's slot list and, with pages,
the entries handed out since the step before (both in the one copy launch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import torch

from stepgraph.buffers import Buffer
from stepgraph.compile import CompiledForward, backend_name
from stepgraph.config import RunnerConfig
from stepgraph.keys import GraphKey, draft_lengths
from stepgraph.kv import KVCache
from stepgraph.outputs import StepOutputs
from stepgraph.runner import StepGraphRunner, WarmupReport
from stepgraph.sampling import Sampling, sampling_class
from stepgraph.speculative.penalties import PenaltyState, draft_penalties
from stepgraph.speculative.pieces import Pieces
from stepgraph.speculative.relay import RelayState
from stepgraph.speculative.scores import check_logprobs_mode, check_top_logprobs, processed_scores, token_scores
from stepgraph.speculative.stages import Drafted, Extended, Scored, Stage, StageResult, StepContext, Verified
from stepgraph.speculative.tp import TensorParallel
from stepgraph.splice import SpliceError, StageGraph, splice
from stepgraph.splice import support as splice_support


class Target(Protocol):
    """``target(tokens [B, T], positions [B, T], cache_rows [B]) -> (logits [B, T, V], hidden [B, T, D])``."""

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, cache_rows: torch.Tensor): ...


class Draft(Protocol):
    """``draft(tokens, positions, hidden [B, T, D], cache_rows) -> (logits [B, T, V], hidden [B, T, Dd])``;
    a plain draft model ignores ``hidden``. With penalties, the draft's logits are penalised as the
    target's are before its argmax; a draft whose logits only mark its proposals (one-hot rows) says so
    with ``marks_proposals = True``, and they are left as they are."""

    def __call__(self, tokens, positions, hidden, cache_rows): ...


class ChainStep:
    """The chain step over user models: relay state, pieces, stages, and a :class:`StepGraphRunner`.

    Parameters
    ----------
    target, draft:
        Graph-safe callables over static KV caches (see :class:`Target`, :class:`Draft`).
    num_draft_tokens:
        K, the chain length, or several of them (each K its own keys; K = 0 is plain decoding). A run
        names its K (default: the first).
    num_slots:
        Relay slots (at least the number of requests alive at once, plus one while a slot drains).
    max_batch:
        Largest batch (the runner's buffers).
    vocab_size, draft_hidden_size, hidden_dtype:
        Model shapes: logits width and the draft feature size and dtype.
    scratch_cache_row:
        The models' cache row for padded batch rows.
    config:
        Runner settings; its toggles choose the pieces.
    tp:
        Tensor-parallel broadcast of what the stages declare shared (``None``: single rank).
    splice_stages:
        Build each key's step graph from per-stage graphs (draft, verify, draft-extend) spliced as child
        nodes, with the input copies and the relay commit captured around them (:mod:`stepgraph.splice`).
    compile:
        ``True`` (inductor) or a torch.compile backend name: the step's target and draft forwards run
        compiled, with no CUDA graphs of their own, inside the step graph (:mod:`stepgraph.compile`);
        ``STEPGRAPH_COMPILE=0`` turns it off.
    before_replay:
        A per-key host hook for the models' backend (see :class:`~stepgraph.runner.StepGraphRunner`); a
        cache with hooks of its own (``PagedKV(schedule="planned")``) has them called too, after it.
    logprobs:
        ``None``, or the top alternatives per token (0..20): the step also outputs each emitted token's
        log-probability and the alternatives (:mod:`stepgraph.speculative.scores`).
    logprobs_mode:
        ``"raw"`` (the target's distribution) or ``"processed"`` (the one each token was drawn from).
    kv_cache:
        The models' cache when it keeps device metadata that the step must update (a
        :class:`~stepgraph.kv.PagedKV`): its buffers join the step's inputs and its ``apply`` runs first.
    penalties:
        The requests' penalty state (:class:`~stepgraph.speculative.penalties.PenaltyState`, one row per
        relay slot and the scratch row): verify penalises the target's logits with each request's tokens
        and drafts before acceptance, and the commit records the emitted tokens (``None``: no penalties).
        Each key then comes penalised and not: a run says whether its batch is (:meth:`run`).
    """

    def __init__(
        self,
        target: Target,
        draft: Draft,
        *,
        num_draft_tokens: int | Sequence[int],
        num_slots: int,
        max_batch: int,
        vocab_size: int,
        draft_hidden_size: int,
        hidden_dtype: torch.dtype,
        scratch_cache_row: int,
        device: torch.device | str,
        config: RunnerConfig | None = None,
        tp: TensorParallel | None = None,
        splice_stages: bool = False,
        compile: bool | str = False,
        before_replay=None,
        logprobs: int | None = None,
        kv_cache: KVCache | None = None,
        penalties: PenaltyState | None = None,
        logprobs_mode: str = "raw",
    ) -> None:
        self.draft_lens = draft_lengths(num_draft_tokens)
        self.logprobs = check_top_logprobs(logprobs)
        self.logprobs_mode = check_logprobs_mode(logprobs_mode)
        self.config = config or RunnerConfig()
        self.toggles = self.config.toggles
        self.device = torch.device(device)
        backend = backend_name(compile)  # validated even when STEPGRAPH_COMPILE=0 turns it off
        backend = backend if self.toggles.compile_forwards else None
        planned = getattr(kv_cache, "schedule", None) == "planned"
        if backend is not None and planned:
            raise ValueError("compile=True with a PagedKV(schedule='planned') is not supported: the compiled "
                             "forwards would be specialised on each key's plan; use schedule='fixed'")  # fmt: skip
        self.compiled: dict[str, CompiledForward] = {}
        if backend is not None:
            self.compiled = {
                "target": CompiledForward(target, name="target", backend=backend),
                "draft": CompiledForward(draft, name="draft", backend=backend),
            }
            target, draft = self.compiled["target"], self.compiled["draft"]
        self.target, self.draft, self.tp = target, draft, tp
        if tp is not None and tp.packed is None:
            tp.packed = self.toggles.tp_broadcast  # STEPGRAPH_TP_BROADCAST: one packed broadcast, or one per field
        self.V = vocab_size
        self.relay = RelayState(
            num_slots, max_batch, draft_hidden_size, hidden_dtype, self.device, scratch_cache_row, self.toggles
        )
        if penalties is not None and penalties.rows != num_slots + 1:
            raise ValueError(f"penalties has {penalties.rows} rows; the step needs num_slots + 1 = {num_slots + 1}")
        self.penalties = self.relay.penalties = penalties
        self.draft_penalties = draft_penalties(penalties, draft)
        # a batch without penalty settings runs unpenalised keys, unless STEPGRAPH_PENALTY_VARIANTS=0
        penalised_keys = penalties is not None and self.toggles.penalty_variants
        self._always_penalised = penalties is not None and not penalised_keys
        workspace = torch.zeros(max_batch * (self.max_draft_len + 1), dtype=torch.int32, device=self.device)
        self.pieces = Pieces(self.toggles, self.device, workspace)
        self._offsets = {k: torch.arange(k + 1, device=self.device) for k in self.draft_lens}  # [K+1] positions
        #: The step, as data: each stage a function of the context returning what it made.
        scores = (Stage("scores", self._scores),) if self.logprobs is not None else ()
        self.kv = kv_cache
        #: the cache's step inputs (name -> declaration): what :meth:`KVCache.step_inputs` fills
        self.kv_buffers = kv_cache.buffers(max_batch, self.max_draft_len) if kv_cache is not None else {}
        kv_stage = (Stage("kv", self._apply_kv, spliced=False),) if self.kv_buffers else ()
        self.stages: tuple[Stage, ...] = (
            *kv_stage,
            Stage("draft", self._draft),
            Stage("verify", self._verify),
            *scores,
            Stage("extend", self._extend),
            Stage("commit", self._commit, spliced=False),
        )
        buffers = {"slots": Buffer((max_batch,), torch.int64, pad=-1), **self.kv_buffers}
        self._spliced: dict[GraphKey, dict[str, StageGraph]] = {}
        if splice_stages:
            ok, why = splice_support()
            if not ok and self.device.type == "cuda":
                raise SpliceError(f"splice_stages=True but {why}")
        self.runner = StepGraphRunner(
            self._step,
            buffers,
            device=self.device,
            config=self.config,
            agree=tp.agree if tp is not None else None,
            parked=self.relay.parked,
            before_capture=self._capture_stages if splice_stages else None,
            before_replay=_both(before_replay, kv_cache.before_replay) if planned else before_replay,
            draft_lens=self.draft_lens,
            penalised_keys=penalised_keys,
            name="chain step",
        )

    @property
    def K(self) -> int:
        """The default draft length (the first of :attr:`draft_lens`)."""
        return self.draft_lens[0]

    @property
    def max_draft_len(self) -> int:
        return max(self.draft_lens)

    # ------------------------------------------------------------------------------------------------
    def context(
        self, slots: torch.Tensor, batch: int, sampling: Sampling, draft_len: int, penalised: bool = False
    ) -> StepContext:
        """The context of one step of a key over the requests in ``slots[:batch]``: their relay rows gathered
        (one launch, or slot-0 views for a single request) and where the next step's state goes; it applies
        the penalties if the key is ``penalised`` (or every key does: ``STEPGRAPH_PENALTY_VARIANTS=0``)."""
        state = self.relay.inputs(slots, batch)
        penalised = penalised or self._always_penalised
        return StepContext(batch, sampling, draft_len, state, self.relay.outputs(batch), slots, penalised=penalised)

    def run_stage(self, stage: Stage, ctx: StepContext) -> StageResult:
        """One stage: its result recorded in ``ctx``, and what it declares shared broadcast across ranks."""
        result = stage.run(ctx)
        ctx.results[stage.name] = result
        if self.tp is not None and result.SHARED:
            self.tp.broadcast(result.shared())
        return result

    def _step(
        self, buf: Mapping[str, torch.Tensor], batch: int, sampling: Sampling, draft_len: int, penalised: bool = False
    ) -> dict[str, torch.Tensor]:
        ctx = self.context(buf["slots"], batch, sampling, draft_len, penalised)
        ctx.inputs = buf
        spliced = self._spliced.get(GraphKey(batch, sampling, draft_len, penalised))
        with self._planning():
            self._run_stages(ctx, spliced)
        v = ctx.verified
        out = {"tokens": v.tokens, "num_accepted": v.num_accepted}
        scored = ctx.results.get("scores")
        if scored is not None:
            sc = scored.scores
            out.update(logprobs=sc.logprobs, top_ids=sc.top_ids, top_logprobs=sc.top_logprobs)
        return out

    def _planning(self):
        """The scope of a step's forwards: a planned cache's attention follows the key's plan inside it."""
        planning = getattr(self.kv, "planning", None)
        return planning() if planning is not None else contextlib.nullcontext()

    def _run_stages(self, ctx: StepContext, spliced: dict[str, StageGraph] | None) -> None:
        for stage in self.stages:
            if spliced is not None and stage.spliced:  # splice the stage's graph; the glue is captured here
                graph = spliced[stage.name]
                splice(graph)
                ctx.results[stage.name] = result = graph.outputs
                if self.tp is not None and result.SHARED:
                    self.tp.broadcast(result.shared())
            else:
                self.run_stage(stage, ctx)

    # The stages: each reads the context and returns what it made.
    def _apply_kv(self, ctx: StepContext) -> StageResult:
        """The cache's metadata (a paged cache's block-table entries) from the step's inputs, on the device."""
        self.kv.apply(ctx.inputs, ctx.state["cache_row"])
        return StageResult()

    def _draft(self, ctx: StepContext) -> Drafted:
        """K-1 topk-1 draft steps from the first draft token and feature in the relay (none for K <= 1)."""
        st, K = ctx.state, ctx.draft_len
        s, rows = st["seq_len"], st["cache_row"]
        if K == 0:
            return Drafted(st["draft"][:, None][:, :0])  # [B, 0]: plain decoding
        drafts, tok, feat = [st["draft"]], st["draft"], st["hidden"]
        for i in range(1, K):
            logits, hid = self.draft(tok[:, None], (s + i)[:, None], feat[:, None, :], rows)
            if ctx.penalised and self.draft_penalties is not None:  # row i of the chain: the drafts before it count
                logits = self.draft_penalties.apply(logits, torch.stack(drafts, 1), ctx.slots[: ctx.batch], s, i)
            tok, feat = self.pieces.argmax(logits[:, 0]), hid[:, 0]
            drafts.append(tok)
        return Drafted(torch.stack(drafts, 1))

    def _verify(self, ctx: StepContext) -> Verified:
        """Target forward over ``[t, d_1..d_K]`` and acceptance (greedy or sampled)."""
        st, drafts, nxt = ctx.state, ctx.drafted.drafts, ctx.next
        positions = st["seq_len"][:, None] + self._offsets[ctx.draft_len]  # [B, K+1]
        logits, hidden = self.target(torch.cat([st["token"][:, None], drafts], 1), positions, st["cache_row"])
        scored = logits  # acceptance reads the penalised logits; log-probabilities the raw ones
        if ctx.penalised:
            scored = self.penalties.apply(logits, drafts, ctx.slots[: ctx.batch], st["seq_len"])
        if ctx.sampling is Sampling.GREEDY:
            v = self.pieces.greedy_verify(scored, drafts, st["seq_len"], nxt["token"], nxt["seq_len"])
        else:
            v = self.pieces.sampled_verify(scored, drafts, st, ctx.sampling, nxt["token"], nxt["seq_len"])
        return Verified(
            v.tokens,
            v.extend_tokens,
            v.num_accepted,
            v.accepted_row,
            hidden,
            positions,
            nxt["token"],
            nxt["seq_len"],
            logits,
            scored,
        )

    def _scores(self, ctx: StepContext) -> Scored:
        """The emitted tokens' log-probabilities and alternatives, after the verify's tokens are shared."""
        v, st = ctx.verified, ctx.state
        kernels = self.toggles.fused_logprobs
        if self.logprobs_mode == "raw":
            return Scored(token_scores(v.logits, v.tokens, self.logprobs, kernels=kernels))
        if ctx.sampling is Sampling.GREEDY:  # every request greedy: the penalised logits as they are
            return Scored(token_scores(v.scored, v.tokens, self.logprobs, kernels=kernels))
        settings = (st["temperature"], st["top_k"], st["top_p"], st["min_p"])
        filtered = sampling_class(ctx.sampling).kernel["filtered"]  # the temperature class sorts nothing
        scores = processed_scores(v.scored, v.tokens, self.logprobs, *settings, filtered=filtered, kernels=kernels)
        return Scored(scores)

    def _extend(self, ctx: StepContext) -> Extended:
        """Draft over the K+1 verified positions, then the fused tail at the last accepted row."""
        v, nxt = ctx.verified, ctx.next
        d_logits, d_hidden = self.draft(v.extend_tokens, v.positions + 1, v.hidden, ctx.state["cache_row"])
        if ctx.penalised and self.draft_penalties is not None:  # row j follows extend tokens 0..j: rows 1..K+1
            slots, seq_len = ctx.slots[: ctx.batch], ctx.state["seq_len"]  # of the chain (the row the tail reads)
            d_logits = self.draft_penalties.apply(d_logits, v.extend_tokens, slots, seq_len, 1, v.accepted_row)
        flat = ctx.batch * (ctx.draft_len + 1)  # [B, K+1, V] as rows
        self.pieces.tail(
            d_logits.reshape(flat, -1), d_hidden.reshape(flat, -1), v.accepted_row, nxt["draft"], nxt["hidden"]
        )
        return Extended(nxt["draft"], nxt["hidden"])

    def _commit(self, ctx: StepContext) -> StageResult:
        """The next step's state into the requests' slots (one relay store; nothing for a single request),
        and the emitted tokens into the penalty state (a penalised key: a request that sets a penalty runs
        penalised keys only, so its tokens are all there)."""
        if ctx.penalised:  # the old lengths from positions: a single request's were overwritten
            v = ctx.verified
            self.penalties.record(v.tokens, ctx.slots[: ctx.batch], v.positions[:, 0])
        self.relay.commit(ctx.slots, ctx.batch)
        return StageResult()

    def stage_graphs(self, key: GraphKey) -> dict[str, StageGraph]:
        """Splice mode: the per-stage graphs captured for ``key`` (by stage name; empty when none)."""
        return dict(self._spliced.get(key, {}))

    def _capture_stages(self, key: GraphKey) -> list[StageGraph]:
        """Splice mode: capture each spliced stage as a child graph for ``key`` (called by the runner after
        its memory check, on parked state), each primed with one replay for the next. Returns them: the
        key's graph holds them while alive."""
        slots = self.runner.buffers.views(key.batch_size)["slots"]
        ctx = self.context(slots, key.batch_size, key.sampling, key.draft_len, key.penalised)
        backend = self.runner.backend
        opts = {"pool": backend.pool(), "stream": backend.stream}
        graphs: dict[str, StageGraph] = {}
        with self._planning():
            for stage in self.stages:
                if stage.spliced:
                    graph = StageGraph(lambda stage=stage: stage.run(ctx), name=f"{stage.name} {key}", **opts)
                    graphs[stage.name] = graph
                    ctx.results[stage.name] = graph.outputs
        self._spliced[key] = graphs
        return list(graphs.values())

    # ------------------------------------------------------------------------------------------------
    def run(
        self,
        slots: torch.Tensor | Sequence[int] | None,
        sampling: Sampling,
        *,
        batch_size: int | None = None,
        draft_len: int | None = None,
        kv_inputs: dict | None = None,
        penalised: bool = False,
    ) -> StepOutputs:
        """One step for the requests in ``slots`` (``[B]``, a tensor or a list of ints, which goes into the
        copy-in's pinned buffer without becoming a tensor; ``None`` = the same slots as the last run), with
        ``draft_len`` draft tokens (one of :attr:`draft_lens`; default the first). ``kv_inputs``: the
        cache's step inputs (:meth:`KVCache.step_inputs`), copied in the same launch; given whenever the
        slots are. ``penalised``: some request of the batch sets a penalty (or a logit bias, a ban, allowed
        tokens: :meth:`SamplingParams.needs_penalty_state`), so the step applies them; a batch without any
        runs a key that skips the penalties' work (its requests' penalty state is not kept up to date).

        Returns ``tokens [B, K+1]`` (accepted drafts, then the bonus/correction, then -1) and
        ``num_accepted [B]``, and with ``logprobs`` also ``logprobs [B, K+1]``, ``top_ids`` and
        ``top_logprobs`` ``[B, K+1, n]``; valid until the next run.
        """
        if penalised and self.penalties is None:
            raise ValueError("penalised=True but this step has no penalty state: build it with penalties")
        variant = {"draft_len": draft_len, "penalised": penalised and self.runner.penalised_keys}
        if slots is None:
            if kv_inputs:
                return self.runner.run(kv_inputs, sampling, **variant)
            return self.runner.run(None, sampling, batch_size=batch_size, **variant)
        return self.runner.run({"slots": slots, **kv_inputs} if kv_inputs else {"slots": slots}, sampling, **variant)

    def warmup(
        self, max_running_requests: int | None = None, sampling: Sampling | str | Iterable | None = None
    ) -> WarmupReport:
        with self.relay.parked():
            return self.runner.warmup(max_running_requests, sampling)

    def capture(self, keys: Iterable[GraphKey | tuple] | None = None) -> list[GraphKey]:
        return self.runner.capture(keys)

    def info(self) -> dict:
        compiled = {"compile": {n: f.info() for n, f in self.compiled.items()}} if self.compiled else {}
        info = {**self.runner.info(), "num_draft_tokens": self.K, "draft_lens": list(self.draft_lens)}
        scores = {"logprobs": self.logprobs, "logprobs_mode": self.logprobs_mode}
        return {**info, "penalties": self.penalties is not None, **scores, **compiled}

    def update_weights(self, apply: Callable[[], None]) -> None:
        """Apply a weight update that moves tensors (new addresses): refused while graphs are live
        (:class:`~stepgraph.errors.RecaptureRefused`); after :meth:`release` it applies, and the next run
        captures again with the new weights."""
        self.runner.request_recapture("weight update")
        apply()

    def release(self) -> None:
        """Release the step graphs, then the per-stage graphs they held (splice mode)."""
        self.runner.release()
        for graphs in self._spliced.values():
            for graph in graphs.values():
                graph.release()
        self._spliced.clear()


def _both(first, second):
    """A ``before_replay`` factory calling ``first``'s hook (if any) then ``second``'s."""
    if first is None:
        return second

    def make(key):
        hooks = [h for h in (first(key), second(key)) if h is not None]
        if len(hooks) < 2:
            return hooks[0] if hooks else None

        def hook(batch_size: int) -> None:
            for h in hooks:
                h(batch_size)

        return hook

    return make
