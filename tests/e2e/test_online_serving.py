"""Online serving: requests put in a RequestQueue from another thread while serve() runs decode as a list of
them does; Request.abort() ends a request (waiting, being prefilled or decoding) before its next step and
gives its slot back, the others decoding on; on_finish comes once per request."""

import threading
import time

import pytest

from stepgraph import RequestQueue, SamplingParams
from stepgraph.examples.model import build, greedy_reference
from stepgraph.speculative.decoder import SpecDecoder

# a serving thread that raises fails the test, not only warns
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

PROMPTS = [[5, 17, 99, 3], [42, 7, 7, 8, 200, 31], [1, 2], [9, 9, 30]]
LENGTHS = [10, 6, 12, 8]


@pytest.fixture(autouse=True)
def _torch_paths(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")


@pytest.fixture(scope="module")
def models():
    return build("tiny")


def produce(dec, queue, pause=0.02):
    """Put each prompt's request from another thread, one at a time, then close the queue."""

    def run():
        for prompt, n in zip(PROMPTS, LENGTHS):
            queue.put(dec.make_requests([prompt], n))
            time.sleep(pause)
        queue.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("chunk", [None, 3], ids=["whole", "chunked"])
def test_requests_put_while_serving_decode_as_a_list_does(models, overlap, chunk):
    target, draft = models
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=3, prefill_chunk=chunk)
    free = dec.slots.free()
    queue = RequestQueue()
    thread = produce(dec, queue)
    served = dec.serve(queue, overlap=overlap)
    thread.join()
    assert [r.prompt for r in served] == PROMPTS  # in the order put
    for r, n in zip(served, LENGTHS):
        assert r.output == greedy_reference(target, r.prompt, n) and r.finish_reason == "length"
    assert dec.slots.free() == free
    with pytest.raises(RuntimeError, match="closed"):
        queue.put(dec.make_requests([PROMPTS[0]], 2))


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_abort_ends_a_request_before_its_next_step(models, overlap):
    """Request 1 is aborted from its own stream after three tokens, request 3 while request 0's first
    tokens come (its long prompt still in chunks), request 2 before it is taken: each ends with reason
    "abort" and the tokens it had; the others decode as without them; every slot comes back."""
    target, draft = models
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=2, max_batch=4, prefill_chunk=4)
    free = dec.slots.free()
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[2], list(range(1, 40))]
    requests = dec.make_requests(prompts, 12, SamplingParams())

    def on_tokens_1(tokens):
        if len(requests[1].output) >= 3:
            requests[1].abort()

    requests[0].on_tokens = lambda tokens: requests[3].abort()
    requests[1].on_tokens = on_tokens_1
    requests[2].abort()
    finished = []
    for r in requests:
        r.on_finish = lambda r: finished.append((r.id, r.finish_reason, len(r.output)))
    queue = RequestQueue()
    queue.put(requests)
    queue.close()
    served = dec.serve(queue, overlap=overlap)
    assert served == requests
    assert requests[0].output == greedy_reference(target, prompts[0], 12) and requests[0].finish_reason == "length"
    one = requests[1]
    assert one.finish_reason == "abort" and 3 <= len(one.output) < 12
    assert one.output == greedy_reference(target, prompts[1], 12)[: len(one.output)]
    assert requests[2].finish_reason == "abort" and requests[2].output == []
    assert requests[3].finish_reason == "abort" and requests[3].output == [] and requests[3].prefilled < 39
    assert all(r.slot == -1 and r.cache_row == -1 for r in requests) and dec.slots.free() == free
    requests[0].abort()  # after it finished: nothing changes
    assert requests[0].finish_reason == "length"
    # on_finish once each, after its last tokens, whatever ended it
    assert sorted(finished) == sorted((r.id, r.finish_reason, len(r.output)) for r in requests)


def test_abort_works_in_a_list_too_and_a_closed_empty_queue_returns_at_once(models):
    target, draft = models
    dec = SpecDecoder.for_example(target, draft, max_batch=2)
    requests = dec.make_requests(PROMPTS[:2], 8)
    requests[0].on_tokens = lambda tokens: requests[0].abort()  # after its first token
    dec.serve(requests)
    assert requests[0].finish_reason == "abort" and len(requests[0].output) == 1
    assert requests[1].output == greedy_reference(target, PROMPTS[1], 8)
    queue = RequestQueue()
    queue.close()
    assert dec.serve(queue) == []


def test_bad_use_of_a_queue_is_refused(models):
    target, draft = models
    dec = SpecDecoder.for_example(target, draft)
    queue = RequestQueue()
    with pytest.raises(TypeError, match="put takes requests from decoder.make_requests"):
        queue.put([[1, 2, 3]])
    with pytest.raises(ValueError, match="arrivals are for a list of requests"):
        dec.serve(queue, arrivals=[0.0])
    dec.step.tp = object()  # stands for a tensor-parallel decoder: the check reads no more of it
    with pytest.raises(ValueError, match="cannot run under tensor parallelism"):
        dec.serve(queue)


def test_make_requests_from_threads_gives_each_request_its_own_id(models):
    target, draft = models
    dec = SpecDecoder.for_example(target, draft)
    made = []
    threads = [threading.Thread(target=lambda: made.extend(dec.make_requests(PROMPTS, 4))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.id for r in made) == list(range(16))
    with pytest.raises(ValueError):
        dec.make_requests([[]], 4)  # a refusal takes no id
    assert dec.make_requests([PROMPTS[0]], 4)[0].id == 16


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_a_callback_that_raises_ends_serve_with_every_slot_back(models, overlap):
    target, draft = models
    dec = SpecDecoder.for_example(target, draft, max_batch=3, prefill_chunk=3)
    free = dec.slots.free()
    requests = dec.make_requests(PROMPTS, 10)

    def fail(tokens):
        raise KeyError("the client's handler failed")

    requests[1].on_tokens = fail
    queue = RequestQueue()
    queue.put(requests)
    with pytest.raises(KeyError, match="handler failed"):
        dec.serve(queue, overlap=overlap)
    assert all(r.slot == -1 and r.cache_row == -1 for r in requests) and dec.slots.free() == free
    queue.close()
    assert dec.serve(queue) == []  # the decoder serves again
    assert dec.generate([PROMPTS[0]], max_new_tokens=4) == [greedy_reference(target, PROMPTS[0], 4)]


def test_asyncio_clients_stream_and_leaving_early_aborts(models):
    """Three asyncio clients stream their requests' tokens through queue.stream(): one leaves after three
    tokens (its request aborted), one is cancelled while it waits (aborted too), the third decodes to its
    length; the decodes equal the greedy reference, and every slot comes back."""
    import asyncio
    import contextlib

    target, draft = models
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=2, max_batch=3)
    free = dec.slots.free()
    queue = RequestQueue()
    server = threading.Thread(target=dec.serve, args=(queue,))
    server.start()

    made = []

    async def client(prompt, n, give_up=None):
        (request,) = dec.make_requests([prompt], n)
        made.append(request)
        received = []
        async with contextlib.aclosing(queue.stream(request)) as tokens:
            async for new in tokens:
                received += new
                if give_up is not None and len(received) >= give_up:
                    break
        return request, received

    async def main():
        waiting = asyncio.ensure_future(client(PROMPTS[3], 200))
        done = await asyncio.gather(client(PROMPTS[0], 10), client(PROMPTS[1], 12, give_up=3))
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return done

    try:
        (full, got_full), (left, got_left) = asyncio.run(main())
    finally:
        queue.close()
        server.join()
    assert got_full == full.output == greedy_reference(target, PROMPTS[0], 10) and full.finish_reason == "length"
    assert left.finish_reason == "abort" and got_left == left.output[: len(got_left)] and len(got_left) >= 3
    assert left.output == greedy_reference(target, PROMPTS[1], 12)[: len(left.output)]
    cancelled = next(r for r in made if r.prompt == PROMPTS[3])
    assert cancelled.finish_reason == "abort" and len(cancelled.output) < 200
    assert dec.slots.free() == free
