"""The in-process runner of the guided reindex: results in submission order with bounded
look-ahead, a failing unit handed to the failure policy, and that policy's two outcomes."""

from __future__ import annotations

import threading
import time

import pytest
from rechain.pipeline.bitcoin.faults import local_failure_reason
from rechain.pipeline.errors import RechainError
from rechain.pipeline.runtime.local_runner import ordered_local
from rechain.workers.btc_scan import WorkUnit


def test_results_come_in_submission_order_with_bounded_look_ahead() -> None:
    running = 0
    most = 0
    started = 0
    lock = threading.Lock()

    def work(n: int) -> int:
        nonlocal running, most, started
        with lock:
            started += 1
            running += 1
            most = max(most, running)
        # Early units finish last, so completion order differs from submission order.
        time.sleep(0.002 * (10 - n))
        with lock:
            running -= 1
        if n == 4:
            raise ValueError("bad bytes\nsecond line")
        return n * n

    got = []
    for unit, result in ordered_local(work, range(10), threads=3, window=4):
        # Units started but not yet handed back never exceed the window.
        assert started - len(got) <= 4
        got.append((unit, result))
    assert [u for u, _ in got] == list(range(10))
    assert [r for u, r in got if u != 4] == [n * n for n in range(10) if n != 4]
    assert isinstance(got[4][1], ValueError)
    assert most <= 3


def test_local_failures_skip_on_bad_bytes_and_stop_on_unreadable_files() -> None:
    unit = WorkUnit(0, "/x/blk00003.dat", 3, 4096, 8192, "regtest", bytes(8))
    assert local_failure_reason(unit, ValueError("bad bytes\nmore")) == "ValueError: bad bytes"
    with pytest.raises(RechainError, match=r"blk00003.dat at 4096: .*gone"):
        local_failure_reason(unit, FileNotFoundError(2, "gone"))


def test_the_ordered_executor_cancels_what_is_in_flight_when_the_consumer_stops() -> None:
    from rechain.pipeline.runtime.ordered import ordered

    submitted: list[int] = []
    cancelled: list[int] = []
    depths: list[int] = []

    def submit(n: int) -> int:
        submitted.append(n)
        return n

    results = ordered(
        submit, lambda h: h * 10, range(100), 3, depth=depths.append, cancel=cancelled.append
    )
    for unit, result in results:
        assert result == unit * 10
        # The next unit goes in only once a result was handed over: never more than 3 out.
        assert len(submitted) - unit <= 3
        if unit == 5:
            break
    results.close()
    assert submitted == list(range(8)) and cancelled == [6, 7]
    assert max(depths) == 3 and depths[-1] == 0
