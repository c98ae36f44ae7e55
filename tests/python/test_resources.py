"""Resources of the extension: no memory growth across thousands of calls
(successes and failures), the GIL released during the library work, and
correct results when threads call it at the same time."""

from __future__ import annotations

import gc
import os
import threading
import time

import onnx
from onnx import TensorProto, helper

import tpfuse
from conftest import undefined_input_model

ROUNDS = 3000  # each round makes 6 calls: 18,000 calls in all
GROWTH_LIMIT = 2 << 20  # bytes of resident memory: about 110 bytes a call


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leaks_across_thousands_of_calls(dense_rank0):
    with open(dense_rank0, "rb") as f:
        raw = f.read()
    truncated = raw[: len(raw) // 2]
    invalid = undefined_input_model().SerializeToString()

    def one_round():
        r = tpfuse.optimize(raw, explain=True)
        assert r.stats["fuse-allreduce-rmsnorm"]["allreduce-residual-rmsnorm"] > 0
        tpfuse.optimize(dense_rank0, passes="cleanup")
        assert tpfuse.check(raw) == []
        assert tpfuse.dump(raw, "dot")
        try:
            tpfuse.optimize(truncated)
        except tpfuse.ModelError as e:
            assert e.diagnostics
        else:
            raise AssertionError("a truncated model was accepted")
        assert tpfuse.check(invalid)[0].node == "bad"

    for _ in range(200):  # warm up: allocator pools, onnx's caches
        one_round()
    gc.collect()
    rss0, objects0 = _rss(), len(gc.get_objects())
    for _ in range(ROUNDS):
        one_round()
    gc.collect()
    growth, objects = _rss() - rss0, len(gc.get_objects()) - objects0
    assert growth < GROWTH_LIMIT, "resident memory grew by %d bytes over %d calls" % (
        growth,
        6 * ROUNDS,
    )
    assert objects < 100, "%d Python objects more after %d calls" % (objects, 6 * ROUNDS)


def _chain_model(path: str, n: int = 60000) -> None:
    """A chain of n unary nodes: the library spends a good fraction of a
    second on it (load, verify, infer shapes, passes, save)."""
    nodes = [
        helper.make_node("Relu" if i % 2 else "Neg", ["v%d" % i], ["v%d" % (i + 1)], name="n%d" % i)
        for i in range(n)
    ]
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("v%d" % n, TensorProto.FLOAT, [8])],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)


def test_gil_is_released_during_library_work(tmp_path):
    """Another Python thread keeps running while the library works: with the
    GIL held it could not run at all during a call.  Each call is repeated
    until 0.3 s have passed (a fast machine finishes one in a tenth of a
    second); within every call the other thread's longest pause must stay
    under a third of the shortest call."""
    path = str(tmp_path / "chain.onnx")
    _chain_model(path)
    calls = {
        "optimize": lambda: tpfuse.optimize(path, output=str(tmp_path / "out.onnx")),
        "check": lambda: tpfuse.check(path),
        "dump": lambda: tpfuse.dump(path),
    }
    for name, call in calls.items():
        ticks = []
        stop = threading.Event()

        def ticker():
            while not stop.is_set():
                ticks.append(time.perf_counter())
                time.sleep(0.001)

        th = threading.Thread(target=ticker)
        th.start()
        time.sleep(0.05)
        spans = []
        start = time.perf_counter()
        while not spans or time.perf_counter() - start < 0.3:
            t0 = time.perf_counter()
            call()
            spans.append((t0, time.perf_counter()))
        stop.set()
        th.join()
        shortest = min(t1 - t0 for t0, t1 in spans)
        assert shortest > 0.03, "%s took %.3f s: too short to tell" % (name, shortest)
        for t0, t1 in spans:
            inside = [t for t in ticks if t0 < t < t1]
            points = [t0] + inside + [t1]
            longest = max(q - p for p, q in zip(points, points[1:]))
            assert longest < shortest / 3, (
                "%s: the other thread stalled for %.3f s of a %.3f s call (%d ticks): "
                "the GIL was held" % (name, longest, t1 - t0, len(inside))
            )


def test_threads_calling_at_once_get_correct_results(dense_rank0):
    with open(dense_rank0, "rb") as f:
        raw = f.read()
    want = tpfuse.optimize(raw, explain=True)
    want_bytes = want.model.SerializeToString()
    want_dump = tpfuse.dump(raw)
    errors = []

    def worker():
        try:
            for _ in range(15):
                r = tpfuse.optimize(raw, explain=True)
                assert r.model.SerializeToString() == want_bytes
                assert r.stats == want.stats and r.near_misses == want.near_misses
                assert tpfuse.dump(raw) == want_dump
                assert tpfuse.check(raw) == []
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_sessions_do_not_leak():
    """Sessions opened, run (and refused), generating, closed or dropped."""
    import numpy as np

    from conftest import ROOT, tiny_model

    raw = tiny_model().SerializeToString()
    llama = os.path.join(ROOT, "tests", "corpus", "kv", "llama-dynamo-kv-fp32-w1", "model.onnx")
    x = np.ones((2, 4), np.float32)

    def one_round():
        with tpfuse.Session(raw) as s:
            assert s.run(None, {"x": x})[0].shape == (2, 3)
            try:
                s.run(None, {"x": x.astype(np.float64)})
            except tpfuse.InputError as e:
                assert e.diagnostics
            else:
                raise AssertionError("a float64 input was accepted")
        tpfuse.Session(raw, optimize=False).run(["y"], {"x": x})  # dropped, not closed
        assert len(tpfuse.generate(llama, [[1, 2, 3], [4, 5]], max_new_tokens=2)) == 2

    for _ in range(50):
        one_round()
    gc.collect()
    rss0, objects0 = _rss(), len(gc.get_objects())
    for _ in range(400):
        one_round()
    gc.collect()
    growth, objects = _rss() - rss0, len(gc.get_objects()) - objects0
    assert growth < GROWTH_LIMIT, "resident memory grew by %d bytes over 400 rounds" % growth
    assert objects < 100, "%d Python objects more after 400 rounds" % objects
