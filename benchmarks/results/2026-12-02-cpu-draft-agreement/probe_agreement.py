"""Probe (issue 34): how often the 2-layer draft of bench_hf.py picks the target's greedy token when the
target's layers past the second have their output projections scaled (float32, on the 2-core CPU; the
bench's full Qwen2.5-0.5B shape, random weights, a 32-token prompt, the target's 48 greedy tokens).
Run from benchmarks/."""
import sys, torch, time
sys.path.insert(0, '.')
import bench_hf as bh
t0=time.time()
target = bh.target_model()
draft = bh.cheap_draft(target)
print("built", time.time()-t0)
g = torch.Generator().manual_seed(1)
ids = torch.randint(0, 151936, (1, 32), generator=g)
orig = {i: (l.self_attn.o_proj.weight.clone(), l.mlp.down_proj.weight.clone()) for i, l in enumerate(target.model.layers) if i >= 2}
torch.set_grad_enabled(False)
for scale in (1.0, 0.3, 0.1, 0.05, 0.02):
    for i, l in enumerate(target.model.layers):
        if i >= 2:
            l.self_attn.o_proj.weight.copy_(orig[i][0] * scale); l.mlp.down_proj.weight.copy_(orig[i][1] * scale)
    with torch.no_grad():
        out = target.generate(ids, max_new_tokens=48, do_sample=False)
        seq = out
        a = target(seq).logits.argmax(-1)[0, 31:-1]
        b = draft(seq).logits.argmax(-1)[0, 31:-1]
    print(scale, "agreement", (a == b).float().mean().item(), time.time()-t0, flush=True)
