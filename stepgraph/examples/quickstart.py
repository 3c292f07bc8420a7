"""Wrap a small decode step with StepGraphRunner (runs on a GPU with graphs, or eagerly on a CPU).

python -m stepgraph.examples.quickstart
"""

import torch

from stepgraph import Buffer, Sampling, StepGraphRunner


def main() -> dict:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    W = torch.randn(256, 256, device=device, dtype=dtype) / 16
    E = torch.randn(1000, 256, device=device, dtype=dtype)

    buffers = {  # declared once; the batch is the leading dimension (64 rows at most)
        "tokens": Buffer((64,), torch.int64, pad=0),  # padded rows hold token 0
        "hidden": Buffer((64, 256), dtype, pad=0.0),
    }

    def step(buf, batch_size, sampling):  # graph-safe: no .item(), no Python branch on tensor values
        h = torch.tanh(buf["hidden"] + E[buf["tokens"]]) @ W
        return {"next": torch.argmax(h @ E.T, -1), "hidden": h}

    runner = StepGraphRunner(step, buffers, device=device)
    runner.warmup(max_running_requests=8)  # captures keys 1..8 on a GPU
    tokens = torch.randint(0, 1000, (5,), device=device)
    hidden = torch.zeros(5, 256, device=device, dtype=dtype)
    for _ in range(4):  # a batch of 5 pads to bucket 5 and replays its graph
        out = runner.run({"tokens": tokens, "hidden": hidden}, Sampling.GREEDY)
        tokens, hidden = out["next"].clone(), out["hidden"].clone()  # keep them past the next run
    runner.print_report()
    return runner.info()


if __name__ == "__main__":
    main()
