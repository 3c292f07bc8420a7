"""CPU probe: which views make inductor guard on a size of one when stepgraph's forwards compile with their
batch and token dimensions dynamic. Prints every reshape/view inductor lowers on a strided input (the
_compute_stride path, which adds the guard), then whether greedy output matched and the compile counts.

    python probe_compile_views.py inductor [eagle|twin:0.9]   # with compile_size_one.patch applied
"""

import torch, sys, time
import stepgraph.compile as C
from torch._inductor import ir
from torch._inductor.virtualized import V
import torch._subclasses.fake_impls as FI
orig=FI._compute_stride
def cs(old_shape, old_stride, new_shape, size_oblivious=False):
    try:
        node=V.graph.current_node
        print("VIEW", node.format_node()[:200] if node is not None else None, list(old_shape), list(old_stride), list(new_shape), flush=True)
    except Exception as e:
        pass
    return orig(old_shape, old_stride, new_shape, size_oblivious)
FI._compute_stride=cs
from stepgraph import RunnerConfig, Toggles
from stepgraph.examples.model import build, greedy_reference
from stepgraph.speculative.decoder import SpecDecoder
PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12], [1, 2, 3, 4]]
target, draft = build("tiny", num_layers=1, draft=sys.argv[2] if len(sys.argv)>2 else "eagle")
cfg = RunnerConfig(toggles=Toggles.all(False).with_piece("compile_forwards", True), progress=False)
dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=4, config=cfg, compile=sys.argv[1])
lengths=[16,4,8]
out=dec.generate(PROMPTS, max_new_tokens=lengths)
print(out == [greedy_reference(target, p, n) for p, n in zip(PROMPTS, lengths)])
print(dec.info()["compile"])
