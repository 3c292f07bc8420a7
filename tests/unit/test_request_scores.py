"""A request keeps each step's scores as the step loop hands them over and turns them into lists when
``logprobs`` or ``top_logprobs`` is read: reads between steps, the request's own number of alternatives,
the tokens past an EOS left out, and scores given as lists (a custom loop's) or arrays. Its prompt's
scores likewise: kept as the prefill's forwards give them, made lists when ``prompt_logprobs`` or
``prompt_top_logprobs`` is read."""

import numpy as np

from stepgraph import SamplingParams
from stepgraph.speculative.requests import Request


def step_scores(first: float, rows: int = 4, k: int = 3):
    """``(logprobs [rows], top_ids [rows, k], top_logprobs [rows, k])`` numbered from ``first``."""
    logprobs = np.arange(rows, dtype=np.float32) + first
    top_ids = np.arange(rows * k).reshape(rows, k) + int(first) * 100
    return logprobs, top_ids, -top_ids.astype(np.float32)


def test_scores_read_between_steps_and_cut_at_eos_and_to_the_requests_alternatives():
    r = Request(0, [1], 20, SamplingParams(logprobs=2), eos=(9,))
    r.append([1, 2], step_scores(10))
    assert r.logprobs == [10.0, 11.0]  # read after the first step
    r.append([3, 4, 5], step_scores(20))
    r.append([6], ([0.5], [[7, 8, 9]], [[-0.1, -0.2, -0.3]]))  # scores given as lists (a custom loop's)
    r.append([9, 7, 7], step_scores(30))  # EOS second: the tokens after it, and their scores, are not kept
    assert r.finished and r.output == [1, 2, 3, 4, 5, 6, 9]
    assert r.logprobs == [10.0, 11.0, 20.0, 21.0, 22.0, 0.5, 30.0]
    assert r.top_logprobs[:2] == [[(1000, -1000.0), (1001, -1001.0)], [(1003, -1003.0), (1004, -1004.0)]]
    assert r.top_logprobs[5] == [(7, -0.1), (8, -0.2)] and r.top_logprobs[6] == [(3000, -3000.0), (3001, -3001.0)]
    assert len(r.top_logprobs) == len(r.output) and r.logprobs == r.logprobs  # a second read changes nothing


def test_a_request_without_its_own_number_keeps_every_alternative():
    r = Request(0, [1], 20, SamplingParams())
    r.append([1], step_scores(0, rows=2, k=3))
    assert r.top_logprobs == [[(0, 0.0), (1, -1.0), (2, -2.0)]] and r.logprobs == [0.0]
    assert Request(1, [1], 20, SamplingParams()).logprobs == []  # none reported


class Forward:
    """A prefill forward's prompt scores as :class:`~stepgraph.speculative.prefill.PromptScores` hands them
    over: rows of ``step_scores(first + 10 * row, width, k)``."""

    def __init__(self, first: float, rows: int = 2, width: int = 4, k: int = 3) -> None:
        parts = [step_scores(first + 10 * i, width, k) for i in range(rows)]
        self.arrays = [np.stack(column) for column in zip(*parts)]

    def get(self, row: int, count: int) -> tuple:
        return tuple(a[row, :count] for a in self.arrays)


def test_prompt_scores_kept_as_arrays_until_read_chunk_after_chunk():
    r = Request(0, list(range(8)), 20, SamplingParams(prompt_logprobs=2))
    r.start_prompt_scores()
    r.prompt_pending.append((Forward(100), 1, 4))  # the first chunk: row 1 of its forward, 4 positions
    r.take_prompt_scores()
    assert r._prompt_parts and r.prompt_pending == []  # nothing made a list yet
    assert r.prompt_logprobs == [None, 110.0, 111.0, 112.0, 113.0]  # read between chunks
    r.prompt_pending.append((Forward(200), 0, 3))  # the last chunk: 3 positions scored (none after the last)
    r.take_prompt_scores()
    assert r.prompt_logprobs == [None, 110.0, 111.0, 112.0, 113.0, 200.0, 201.0, 202.0]
    assert r.prompt_top_logprobs[0] is None and len(r.prompt_top_logprobs) == len(r.prompt)
    assert r.prompt_top_logprobs[1] == [(11000, -11000.0), (11001, -11001.0)]
    assert r.prompt_top_logprobs[7] == [(20006, -20006.0), (20007, -20007.0)]
    assert r.prompt_logprobs == r.prompt_logprobs and not r._prompt_parts  # a second read changes nothing
    r.start_prompt_scores()  # empties what was kept
    assert r.prompt_logprobs == [None] and r.prompt_top_logprobs == [None]
