import pytest
import torch

from stepgraph import RunnerConfig, Toggles
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from stepgraph.splice import SpliceError, StageGraph, support


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU answer")
def test_support_detection_names_the_reason():
    ok, why = support()
    assert not ok and "CUDA is not available" in why
    with pytest.raises(SpliceError, match="cannot splice"):
        StageGraph(lambda: None)


def test_splice_mode_without_cuda_runs_the_same_step_eagerly():
    def run(splice_stages):
        target, draft = build("tiny")
        dec = SpecDecoder.for_example(
            target, draft, config=RunnerConfig(toggles=Toggles.all(True)), splice_stages=splice_stages
        )
        return dec.generate([[1, 2, 3], [4, 5, 6, 7]], max_new_tokens=10)

    assert run(True) == run(False)
