"""The driver's graph launches and event records fall back to torch's own calls."""

import torch

from stepgraph.copy_in import driver as _driver


class Recorder:
    def __init__(self):
        self.calls = 0

    def replay(self):
        self.calls += 1

    def record(self):
        self.calls += 1

    def raw_cuda_graph_exec(self):
        return 1234

    cuda_event = 99


class RefusingDriver:
    def __init__(self):
        self.seen = []

    def cuGraphLaunch(self, handle, stream):  # noqa: N802 - the driver's name
        self.seen.append(("launch", handle, stream))
        return 201  # CUDA_ERROR_INVALID_CONTEXT

    def cuEventRecord(self, handle, stream):  # noqa: N802
        self.seen.append(("record", handle, stream))
        return 0


def test_off_the_gpu_every_call_is_torchs():
    calls = _driver.DriverCalls(torch.device("cpu"))
    graph = Recorder()
    calls.launch(graph)
    calls.record(graph)
    assert graph.calls == 2 and calls.refusals == 0


def test_a_refused_launch_falls_back_and_repeated_refusals_turn_the_driver_off():
    calls = _driver.DriverCalls(torch.device("cpu"))
    driver = RefusingDriver()
    calls._on, calls._lib, calls._stream = True, driver, lambda index: 7
    graph = Recorder()
    calls.record(graph)  # taken by the driver: torch's record is not called
    assert graph.calls == 0 and driver.seen == [("record", 99, 7)]
    fresh = Recorder()
    fresh.cuda_event = 0  # not created yet: torch's record creates it
    calls.record(fresh)
    assert fresh.calls == 1 and len(driver.seen) == 1
    for _ in range(_driver.MAX_REFUSALS + 3):
        calls.launch(graph)
    assert graph.calls == _driver.MAX_REFUSALS + 3  # every refused launch replayed through torch
    assert calls.refusals == _driver.MAX_REFUSALS
    assert sum(1 for s in driver.seen if s[0] == "launch") == _driver.MAX_REFUSALS  # then no longer tried
