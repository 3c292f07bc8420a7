"""Every Python block in the README runs as written (on this machine's device), so none can go stale."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 3  # wrap a step, speculative decoding, Hugging Face


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs_as_written(index, monkeypatch):
    """As a reader runs it: on a CPU without Triton's interpreter the kernels' torch references run (the
    interpreter would only make the blocks slow; the kernel tests cover it)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    code = BLOCKS[index]
    if "transformers" in code:
        pytest.importorskip("transformers")
    namespace: dict = {"__name__": f"readme_block_{index}"}
    exec(compile(code, f"README.md python block {index}", "exec"), namespace)  # noqa: S102
    if "tokens = dec.generate" in code:  # the decoding snippets: one list of new ids per prompt
        assert all(len(t) == 16 for t in namespace["tokens"])
