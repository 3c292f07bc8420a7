"""Tensor parallelism: every rank runs the same step; rank 0's verify result wins.

Near-tied logits can make ranks accept different numbers of tokens, after which the next collective
deadlocks. The verify result (emitted tokens, draft-extend tokens, accepted count, select index, bonus,
new lengths: everything the rest of the step and the next step read) is packed into one int64 tensor and
broadcast once from ``src``, inside the captured graph. With the ``tp_broadcast`` piece off, each field
is broadcast on its own.

Capture decisions must agree too: :meth:`TensorParallel.agree` makes a key refused or failed on one rank
refused or failed on all (a graph launch is collective; mismatched keys would deadlock).

Shut down in this order: ``decoder.release()`` (or ``runner.release()``), then
``dist.destroy_process_group()``. NCCL's communicator teardown blocks while a captured graph that holds
its kernels is alive (pytorch/pytorch#115388).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class TensorParallel:
    """Broadcast helper over a ``torch.distributed`` group (NCCL on GPUs, gloo on CPU)."""

    def __init__(self, group: dist.ProcessGroup | None = None, *, src: int = 0, packed: bool | None = None) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("torch.distributed is not initialised; call dist.init_process_group first")
        self.group = group
        self.src = dist.get_global_rank(group, src) if group is not None else src
        self.packed = packed  # None: the step sets it from the tp_broadcast toggle
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.broadcasts = 0  # collective calls issued from the host (once per capture, or per eager step)

    def broadcast(self, tensors: list[torch.Tensor]) -> None:
        """Make every rank hold ``src``'s values of ``tensors`` (in place; each ``[B, ...]`` integer)."""
        if self.packed is not False:
            B = tensors[0].shape[0]
            flat = [t.reshape(B, -1).to(torch.int64) for t in tensors]
            packed = torch.cat(flat, dim=1)
            dist.broadcast(packed, self.src, group=self.group)
            self.broadcasts += 1
            start = 0
            for t, f in zip(tensors, flat, strict=True):
                width = f.shape[1]
                t.copy_(packed[:, start : start + width].reshape(t.shape))
                start += width
            return
        for t in tensors:
            dist.broadcast(t, self.src, group=self.group)
            self.broadcasts += 1

    def share(self, values: list[float]) -> list[float]:
        """``src``'s ``values`` on every rank (host numbers, such as measured step times, from which every rank
        must take the same decisions)."""
        dev = (
            torch.device("cuda", torch.cuda.current_device())
            if dist.get_backend(self.group) == "nccl"
            else torch.device("cpu")
        )
        t = torch.tensor(values, dtype=torch.float64, device=dev)
        dist.broadcast(t, self.src, group=self.group)
        return t.tolist()

    def agree(self, vote: int) -> int:
        """The lowest ``vote`` over all ranks (an all-reduce MIN): the runner's capture votes (2 capture,
        1 refused, 0 failed) so that a key is captured on every rank or on none."""
        dev = (
            torch.device("cuda", torch.cuda.current_device())
            if dist.get_backend(self.group) == "nccl"
            else torch.device("cpu")
        )
        flag = torch.tensor([int(vote)], dtype=torch.int32, device=dev)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
        return int(flag.item())
