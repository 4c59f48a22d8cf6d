"""Starting or joining Ray: an embedded local cluster by default, ``--ray-address`` to join one."""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import ray
from rechain.pipeline.runtime import placement
from rechain.workers import fault_injection

U = TypeVar("U")

#: Whether ``ensure_ray`` started the embedded cluster this process is connected to.
_started_here = False
#: Set by a process that runs many pipelines over one runtime (the test session).
_shared = False


def share_runtime() -> None:
    """Keeps the embedded cluster up across runs: ``release_ray`` becomes a no-op."""
    global _shared
    _shared = True


def ensure_ray(address: str | None, workers: int) -> float:
    """Initialises Ray once per process; returns the seconds start-up took (0 if already up)."""
    if ray.is_initialized():
        return 0.0
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    global _started_here
    t0 = time.perf_counter()
    _started_here = not address
    if address:
        ray.init(
            address=address,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=False,
        )
    else:
        # "local": always a new embedded cluster, never one `ray start` left running here.
        ray.init(
            address="local",
            num_cpus=workers,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=False,
        )
    _ray_notices_to_stderr()
    placement.set_coordinator(ray.get_runtime_context().get_node_id())
    return time.perf_counter() - t0


def release_ray() -> bool:
    """Stops the embedded cluster this process started, once a stage is done with Ray: its
    raylet, object store and idle workers, and this process's mapping of the store's shared
    memory, would otherwise stay resident through the stages after it (issue #7). A joined
    cluster (``--ray-address``) or a shared runtime stays up. Returns whether it stopped."""
    global _started_here
    if _shared or not _started_here or not ray.is_initialized():
        return False
    ray.shutdown()
    _started_here = False
    return True


def _ray_notices_to_stderr() -> None:
    """Ray's driver prints raylet notices (e.g. "A worker died ...") to stdout, which must hold
    only rechain's own output (``--json``): send them to stderr instead."""
    import ray._private.worker as ray_worker

    original = ray_worker.print_to_stdstream
    if getattr(original, "_rechain_stderr", False):
        return

    def to_stderr(data: dict, ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr._rechain_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


def _task_key(fn: Callable[..., Any], index: int) -> str:
    """A task's name for test-only fault injection: its function and submission index."""
    return f"{fn.__name__}/{index}"


def _placed(key: str, fn: Callable[..., Any], unit: Any, *args: Any) -> tuple[str, Any]:
    """A task's result with the node it ran on (Ray keeps no such record without its
    dashboard's state API, which a cluster need not run)."""
    fault_injection.maybe_inject(key)
    return ray.get_runtime_context().get_node_id(), fn(unit, *args)


_remote_placed = ray.remote(num_cpus=1, max_retries=3)(_placed)


def node_rotation() -> list[str]:
    """The live nodes that can run a one-CPU task, each as often as it has CPUs, interleaved
    (CPUs 3 and 1 give A B A A). Tasks read their input by path and gain nothing from Ray's
    locality, which packs them onto the nodes it used last; and SPREAD balances on a delayed
    view of each node's free CPUs, which on a cluster of small nodes sent most of a stage's
    tasks to one node while another sat idle."""
    cpus = {
        n["NodeID"]: int(n["Resources"].get("CPU", 0))
        for n in ray.nodes()
        if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1
    }
    return [
        node
        for turn in range(max(cpus.values(), default=0))
        for node, c in cpus.items()
        if c > turn
    ]


def _submit_rotating(stage_nodes: list[str]) -> Callable[..., Any]:
    """A submitter that pins each task to the next node of ``stage_nodes`` (soft: a node that
    died hands its tasks to Ray's choice; a busy one keeps them until a CPU frees)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    turn = itertools.count()
    pinned = [
        _remote_placed.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True))
        for node in stage_nodes
    ]

    def submit(fn: Callable[..., Any], *call: Any) -> Any:
        n = next(turn)
        key = _task_key(fn, n)
        if not pinned:
            return _remote_placed.remote(key, fn, *call)
        return pinned[n % len(pinned)].remote(key, fn, *call)

    return submit


def _placed_returns(key: str, fn: Callable[..., list[Any]], *args: Any) -> list[Any]:
    """A task's results (a list) with the node it ran on after them."""
    fault_injection.maybe_inject(key)
    return [*fn(*args), ray.get_runtime_context().get_node_id()]


_remote_placed_returns = ray.remote(num_cpus=1, max_retries=3)(_placed_returns)


def spread_tasks(
    fn: Callable[..., list[Any]], calls: list[tuple[Any, ...]], num_returns: int
) -> list[list[Any]]:
    """Submits ``fn(*call)`` for every call as a Ray task (one CPU, retried three times on
    lost workers) whose ``num_returns`` results become objects of their own, for tasks that
    exchange data through Ray's object store (an object reference passed in a call is its
    value in the task); calls are pinned to nodes in turn, as ``ordered_results`` does.
    Returns each call's result references; ``record_nodes`` counts where they ran."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = node_rotation()
    submitted = []
    for i, call in enumerate(calls):
        options: dict[str, Any] = {"num_returns": num_returns + 1}
        if nodes:
            node = nodes[i % len(nodes)]
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
        remote = _remote_placed_returns.options(**options)
        submitted.append(list(remote.remote(_task_key(fn, i), fn, *call)))
    return submitted


def record_nodes(submitted: list[list[Any]]) -> None:
    """Counts the node each of ``spread_tasks``'s calls ran on (waits for them)."""
    for node in ray.get([refs[-1] for refs in submitted]):
        placement.record(node)


def ordered_results(
    fn: Callable[..., Any], units: Iterable[U], window: int, stage: str, *args: Any
) -> Iterator[tuple[U, Any]]:
    """Runs ``fn`` on every unit (``args`` passed after it) as Ray tasks (one CPU each, retried
    three times on lost workers) through the ordered executor (``pipeline/runtime/ordered.py``): at
    most ``window`` in flight, (unit, result) in submission order, each task's node counted
    in ``pipeline/runtime/placement.py``. A task that failed for good yields its
    ``ray.exceptions.RayError`` as the result, for the caller's failure policy."""
    from rechain.pipeline import metrics
    from rechain.pipeline.runtime.ordered import ordered

    def wait(ref: Any) -> Any:
        try:
            node, result = ray.get(ref)
        except ray.exceptions.RayError as e:
            return e
        placement.record(node)
        return result

    submit = _submit_rotating(node_rotation())
    return ordered(
        lambda unit: submit(fn, unit, *args),
        wait,
        units,
        window,
        depth=metrics.QUEUE_DEPTH.labels(stage).set,
    )
