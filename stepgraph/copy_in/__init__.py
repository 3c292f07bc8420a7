"""The copy-in: every input of a run, with its batch's padding, into the runner's static buffers in one launch.

:class:`InputCopyPlan` is the one entry: built once over a fixed set of destinations, it checks a run's
sources and stages their copy (:meth:`~InputCopyPlan.stage`), then launches it (:meth:`~InputCopyPlan.commit`),
optionally together with a key's graph (:meth:`~InputCopyPlan.fuse`). :func:`input_copy` is the same for a
one-off copy. The pieces behind it, one idea each:

* :mod:`~stepgraph.copy_in.plan`: the plan, everything known at declaration computed once;
* :mod:`~stepgraph.copy_in.ring`: the pinned staging ring that carries a call's table and host rows, and the
  captured launch that uploads and runs it;
* :mod:`~stepgraph.copy_in.driver`: graph launches and event records through the CUDA driver;
* :mod:`~stepgraph.copy_in.lists`: Python lists of ints packed straight into pinned memory;
* :mod:`~stepgraph.copy_in.address_space`: host rows copied by slicing one memoryview.

The kernel and its table layout are :mod:`stepgraph.kernels.copy_in`.
"""

from stepgraph.copy_in.lists import LIST_DTYPES
from stepgraph.copy_in.plan import InputCopyPlan, StagedCopy, input_copy
from stepgraph.copy_in.ring import STAGING_RING, FusedLaunch

__all__ = ["LIST_DTYPES", "STAGING_RING", "FusedLaunch", "InputCopyPlan", "StagedCopy", "input_copy"]
