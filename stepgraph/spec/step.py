"""The EAGLE-style chain speculative step (topk-1, K draft tokens) as one graph per key.

Per request, with state (token ``t`` at position ``s``, first draft ``d_1``, draft feature ``f``):

1. draft: ``d_2..d_K`` by K-1 topk-1 draft steps from ``(d_1, f)`` at positions ``s+1..s+K-1``;
2. verify: the target over ``[t, d_1..d_K]`` at ``s..s+K``; greedy or sampled acceptance gives ``n``
   accepted drafts and one more token (the bonus or the correction);
3. draft-extend: the draft over the K+1 verified positions ``s+1..s+K+1`` with the target's hidden
   states, then the tail: row ``n`` gives the next step's ``d_1`` and feature;
4. relay: next state (bonus, next ``d_1``, feature, ``s + n + 1``, random offset) into the request's slot.

Everything stays on the device; the only per-step host input is the batch's slot list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from stepgraph.buffers import Buffer
from stepgraph.compile import CompiledForward, backend_name
from stepgraph.config import RunnerConfig
from stepgraph.keys import GraphKey, Sampling
from stepgraph.outputs import StepOutputs
from stepgraph.runner import StepGraphRunner, WarmupReport
from stepgraph.spec.pieces import Pieces, VerifyResult
from stepgraph.spec.relay import RelayState
from stepgraph.spec.tp import TensorParallel
from stepgraph.splice import SpliceError, StageGraph, splice
from stepgraph.splice import support as splice_support


class Target(Protocol):
    """``target(tokens [B, T], positions [B, T], cache_rows [B]) -> (logits [B, T, V], hidden [B, T, D])``."""

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, cache_rows: torch.Tensor): ...


class Draft(Protocol):
    """``draft(tokens, positions, hidden [B, T, D], cache_rows) -> (logits [B, T, V], hidden [B, T, Dd])``;
    a plain draft model ignores ``hidden``."""

    def __call__(self, tokens, positions, hidden, cache_rows): ...


RelayFields = dict[str, torch.Tensor]  # a relay field name -> its [B, ...] rows (see RelayState)


@dataclass
class Drafted:
    """What the draft stage made: the batch's gathered relay state and its K draft tokens ``[B, K]``."""

    batch: int
    state: RelayFields
    drafts: torch.Tensor


@dataclass
class Verified:
    """What the verify stage made: acceptance (:class:`VerifyResult`), the target's hidden states
    ``[B, K+1, D]`` and positions ``[B, K+1]``, and where the step's next-state outputs go."""

    drafted: Drafted
    result: VerifyResult
    hidden: torch.Tensor
    positions: torch.Tensor
    out: RelayFields


class ChainStep:
    """The chain step over user models: relay state, pieces, and a :class:`StepGraphRunner`.

    Parameters
    ----------
    target, draft:
        Graph-safe callables over static KV caches (see :class:`Target`, :class:`Draft`).
    num_draft_tokens:
        K, the chain length (>= 1).
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
        Tensor-parallel broadcast of the verify result (``None``: single rank).
    splice_stages:
        Build each key's step graph from per-stage graphs (draft, verify, draft-extend) spliced as child
        nodes, with the input copies and the relay store captured around them (:mod:`stepgraph.splice`).
    compile:
        ``True`` (inductor) or a torch.compile backend name: the step's target and draft forwards run
        compiled, with no CUDA graphs of their own, inside the step graph (:mod:`stepgraph.compile`);
        ``STEPGRAPH_COMPILE=0`` turns it off.
    """

    def __init__(
        self,
        target: Target,
        draft: Draft,
        *,
        num_draft_tokens: int,
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
    ) -> None:
        if num_draft_tokens < 1:
            raise ValueError(f"num_draft_tokens must be >= 1, got {num_draft_tokens}")
        self.config = config or RunnerConfig()
        self.toggles = self.config.toggles
        self.device = torch.device(device)
        backend = backend_name(compile)  # validated even when STEPGRAPH_COMPILE=0 turns it off
        backend = backend if self.toggles.compile_forwards else None
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
        self.K, self.V = num_draft_tokens, vocab_size
        self.relay = RelayState(
            num_slots, max_batch, draft_hidden_size, hidden_dtype, self.device, scratch_cache_row, self.toggles
        )
        workspace = torch.zeros(max_batch * (num_draft_tokens + 1), dtype=torch.int32, device=self.device)
        self.pieces = Pieces(self.toggles, num_draft_tokens, self.device, workspace)
        self._j = torch.arange(num_draft_tokens + 1, device=self.device)
        buffers = {"slots": Buffer((max_batch,), torch.int64, pad=-1)}
        self._stages: dict[tuple[int, Sampling], list[StageGraph]] = {}
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
            name="chain step",
        )

    # ------------------------------------------------------------------------------------------------
    def _step(self, buf: Mapping[str, torch.Tensor], batch: int, sampling: Sampling) -> dict[str, torch.Tensor]:
        slots = buf["slots"]
        state = self.relay.inputs(slots, batch)  # the step's input copies: one gather (or slot-0 views)
        stages = self._stages.get((batch, sampling))
        if stages is not None:  # splice the per-stage graphs; the glue around them is captured here
            for stage in stages:
                splice(stage)
            out = stages[-1].outputs
        else:
            out = self.extend_stage(self.verify_stage(self.draft_stage(state, batch), sampling))
        self.relay.commit(slots, batch)  # one relay store (nothing for a single request)
        return out

    # The three stages (draft / verify / draft-extend) are also usable one by one: the per-stage graphs
    # of the benchmark, and the child graphs of splice mode. Each returns what it made.
    def draft_stage(self, state: RelayFields, batch: int) -> Drafted:
        """K-1 topk-1 draft steps from the gathered relay ``state`` (fields ``[B, ...]``)."""
        s, rows = state["seq_len"], state["cache_row"]
        drafts, tok, feat = [state["draft"]], state["draft"], state["hidden"]
        for i in range(1, self.K):
            logits, hid = self.draft(tok[:, None], (s + i)[:, None], feat[:, None, :], rows)
            tok, feat = self.pieces.argmax(logits[:, 0]), hid[:, 0]
            drafts.append(tok)
        return Drafted(batch, state, torch.stack(drafts, 1))

    def verify_stage(self, d: Drafted, sampling: Sampling) -> Verified:
        """Target forward over ``[t, d_1..d_K]`` and acceptance (greedy or sampled); TP broadcast."""
        st = d.state
        positions = st["seq_len"][:, None] + self._j  # [B, K+1]
        logits, hidden = self.target(torch.cat([st["token"][:, None], d.drafts], 1), positions, st["cache_row"])
        out = self.relay.outputs(d.batch)
        if sampling is Sampling.GREEDY:
            v = self.pieces.greedy_verify(logits, d.drafts, st["seq_len"], out["token"], out["seq_len"])
        else:
            v = self.pieces.sampled_verify(logits, d.drafts, st, sampling, out["token"], out["seq_len"])
        if self.tp is not None:
            self.tp.broadcast([v.tokens, v.extend_tokens, v.num_accepted, v.select, out["token"], out["seq_len"]])
        return Verified(d, v, hidden, positions, out)

    def extend_stage(self, v: Verified) -> dict[str, torch.Tensor]:
        """Draft over the K+1 verified positions and the fused tail (the relay store follows in the step).
        Returns ``tokens [B, K+1]`` and ``num_accepted [B]``."""
        r, batch = v.result, v.drafted.batch
        rows = v.drafted.state["cache_row"]
        d_logits, d_hidden = self.draft(r.extend_tokens, v.positions + 1, v.hidden, rows)  # [B, K+1, V]
        flat = batch * (self.K + 1)
        self.pieces.tail(
            d_logits.reshape(flat, -1), d_hidden.reshape(flat, -1), r.select, v.out["draft"], v.out["hidden"]
        )
        return {"tokens": r.tokens, "num_accepted": r.num_accepted}

    def _capture_stages(self, key: GraphKey) -> list[StageGraph]:
        """Splice mode: capture draft, verify and draft-extend as child graphs for ``key`` (called by the
        runner after its memory check, on parked state), each primed with one replay for the next.
        Returns them: the key's graph holds them while alive."""
        batch, sampling = key.batch_size, key.sampling
        state = self.relay.inputs(self.runner.buffers.views(batch)["slots"], batch)
        backend = self.runner.backend
        opts = {"pool": backend.pool(), "stream": backend.stream}
        draft = StageGraph(lambda: self.draft_stage(state, batch), name=f"draft {key}", **opts)
        verify = StageGraph(lambda: self.verify_stage(draft.outputs, sampling), name=f"verify {key}", **opts)
        extend = StageGraph(lambda: self.extend_stage(verify.outputs), name=f"draft-extend {key}", **opts)
        stages = self._stages[(batch, sampling)] = [draft, verify, extend]
        return stages

    # ------------------------------------------------------------------------------------------------
    def run(
        self, slots: torch.Tensor | Sequence[int] | None, sampling: Sampling, *, batch_size: int | None = None
    ) -> StepOutputs:
        """One step for the requests in ``slots`` (``[B]``, a tensor or a list of ints, which goes into the
        copy-in's pinned buffer without becoming a tensor; ``None`` = the same slots as the last run).

        Returns ``tokens [B, K+1]`` (accepted drafts, then the bonus/correction, then -1) and
        ``num_accepted [B]``, valid until the next run.
        """
        if slots is None:
            return self.runner.run(None, sampling, batch_size=batch_size)
        return self.runner.run({"slots": slots}, sampling)

    def warmup(self, max_running_requests: int | None = None, sampling: Sampling | None = None) -> WarmupReport:
        with self.relay.parked():
            return self.runner.warmup(max_running_requests, sampling)

    def capture(self, keys: Iterable[GraphKey | tuple[int, Sampling | str]] | None = None) -> list[GraphKey]:
        return self.runner.capture(keys)

    def info(self) -> dict:
        compiled = {"compile": {n: f.info() for n, f in self.compiled.items()}} if self.compiled else {}
        return {**self.runner.info(), "num_draft_tokens": self.K, **compiled}

    def update_weights(self, apply: Callable[[], None]) -> None:
        """Apply a weight update that moves tensors (new addresses): refused while graphs are live
        (:class:`~stepgraph.errors.RecaptureRefused`); after :meth:`release` it applies, and the next run
        captures again with the new weights."""
        self.runner.request_recapture("weight update")
        apply()

    def release(self) -> None:
        """Release the step graphs, then the per-stage graphs they held (splice mode)."""
        self.runner.release()
        for stages in self._stages.values():
            for stage in stages:
                stage.release()
        self._stages.clear()
