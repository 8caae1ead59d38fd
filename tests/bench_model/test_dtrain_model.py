"""Unit tests of the cost model (bench/model): fits, overlap simulation, pipeline bubble.

    python3 -m unittest discover -s tests/bench_model
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "model"))

import dtrain_model as m  # noqa: E402
import gpu_cluster as gc  # noqa: E402


class FitTest(unittest.TestCase):
    def test_ring_fit_recovers_alpha_beta(self):
        alpha, beta, p = 7.0, 1.0 / 5000.0, 4  # 7 us per message, 5 GB/s
        sizes = [4096 * 4 ** k for k in range(8)]
        points = [{"impl": "ring", "link": "10gbit_50us", "ranks": p, "bytes": n, "hosts": p, "ranks_per_host": 1,
                   "time_us": m.ring_allreduce_us(n, p, alpha, beta)} for n in sizes]
        fit = m.fit_allreduce(points)[("ring", "10gbit_50us", p, p)]
        self.assertEqual(len(fit.regimes), 1)  # an exact line needs one regime
        a, b = fit.alpha_beta(1 << 20)
        self.assertAlmostEqual(a, alpha, places=6)
        self.assertAlmostEqual(b, beta, places=12)
        self.assertAlmostEqual(fit.p2p_us(1000.0), alpha + 1000.0 * beta, places=6)

    def test_fit_splits_regimes_when_one_line_cannot_hold(self):
        xs = [1e3, 1e4, 1e5, 1e6, 1e7, 1e8]
        ys = [1 + x / 1e4 for x in xs[:3]] + [x / 1e3 for x in xs[3:]]  # slope x10 past 1e5
        regimes = m.fit_regimes(xs, ys)
        self.assertEqual(len(regimes), 2)
        for x, y in zip(xs, ys):
            self.assertLess(abs(m.eval_regimes(regimes, x) - y) / y, 1e-9)

    def test_fit_never_returns_negative_terms(self):
        a, b = m.fit_line_relative([1.0, 2.0, 3.0], [5.0, 9.0, 14.0])  # intercept would be < 0
        self.assertGreaterEqual(a, 0.0)
        self.assertGreater(b, 0.0)

    def test_rescaled_fit_follows_ring_formula(self):
        alpha, beta = 3.0, 1e-4
        points = [{"impl": "ring", "link": "shm", "ranks": 2, "hosts": 1, "ranks_per_host": 2, "bytes": n,
                   "time_us": m.ring_allreduce_us(n, 2, alpha, beta)} for n in (1e3, 1e5, 1e7)]
        fit = m.find_fit(m.fit_allreduce(points), ("ring",), "shm", 8)
        self.assertAlmostEqual(fit.time_us(1e6), m.ring_allreduce_us(1e6, 8, alpha, beta), places=6)


class OverlapTest(unittest.TestCase):
    def test_hand_made_buckets(self):
        # backward 10 ms; buckets ready at 2, 6, 10 ms; each all-reduce 3 ms on one channel:
        # 2-5, 6-9, 10-13 -> 3 ms exposed. With 5 ms each: 2-7, 7-12, 12-17 -> 7 ms.
        buckets = [{"bytes": 1, "ready_ms": 2.0}, {"bytes": 1, "ready_ms": 6.0}, {"bytes": 1, "ready_ms": 10.0}]
        self.assertEqual(m.dp_overlap(10.0, buckets, lambda n: 3.0), (13.0, 3.0))
        self.assertEqual(m.dp_overlap(10.0, buckets, lambda n: 5.0), (17.0, 7.0))
        self.assertEqual(m.dp_step_ms(15.0, 10.0, buckets, lambda n: 5.0), (22.0, 7.0))

    def test_communication_hidden_under_backward(self):
        buckets = [{"bytes": 4, "ready_ms": 1.0}, {"bytes": 4, "ready_ms": 3.0}]
        self.assertEqual(m.dp_overlap(10.0, buckets, lambda n: n / 4.0)[1], 0.0)

    def test_resnet50_buckets(self):
        layers = gc.resnet50_layers()
        self.assertAlmostEqual(sum(l[1] for l in layers) / 1e6, 25.557, places=2)  # torchvision's count
        buckets = gc.backward_buckets(layers, 60.0, 25e6)
        self.assertEqual(sum(b["bytes"] for b in buckets), 4 * sum(l[1] for l in layers))
        self.assertAlmostEqual(buckets[-1]["ready_ms"], 60.0)
        self.assertEqual(sorted(b["ready_ms"] for b in buckets), [b["ready_ms"] for b in buckets])


class PipelineAndPsTest(unittest.TestCase):
    def test_bubble(self):
        self.assertAlmostEqual(m.bubble_fraction(4, 16), 3.0 / 19.0)
        self.assertEqual(m.bubble_fraction(1, 8), 0.0)
        # no sends: step = compute / (1 - bubble)
        self.assertAlmostEqual(m.pipeline_step_ms(16.0, 4, 16, 0.0), 16.0 / (1 - 3.0 / 19.0))
        self.assertAlmostEqual(m.pipeline_step_ms(8.0, 2, 4, 0.5), 5 * (2.0 + 1.0))

    def test_unbalanced_pipeline(self):
        # Balanced stages: the same as the bubble formula.
        self.assertAlmostEqual(m.pipeline_step_unbalanced_ms([16.0] * 4, 16, 0.0), m.pipeline_step_ms(16.0, 4, 16, 0.0))
        # A slow stage (8 ms per micro-batch) and a fast one (1 ms), M = 4: 3 x 8 + 8 + 1.
        self.assertAlmostEqual(m.pipeline_step_unbalanced_ms([32.0, 4.0], 4, 0.0), 33.0)
        # A send each way per boundary for the fill/drain micro-batch.
        self.assertAlmostEqual(m.pipeline_step_unbalanced_ms([32.0, 4.0], 4, 0.5), 34.0)

    def test_ps_bound(self):
        # 8 workers x 2 x 100 MB over 2 servers at 10 GB/s: 80 ms; a worker alone 20 ms
        self.assertAlmostEqual(m.ps_comm_ms(100e6, 8, 2, 10e9, 10e9, 0.0, 2), 80.0)
        self.assertAlmostEqual(m.ps_comm_ms(100e6, 1, 2, 10e9, 10e9, 0.0, 2), 20.0)
        self.assertAlmostEqual(m.ps_async_step_ms(10.0, 100e6, 8, 2, 10e9, 10e9, 0.0, 2), 80.0)


class CollectiveTableTest(unittest.TestCase):
    TABLE = {"format": "dtrain-allreduce-table/1", "cases": [
        {"hosts": 1, "ranks": 2, "choices": [{"up_to_bytes": 4096, "algorithm": "recursive_doubling"},
                                             {"algorithm": "shm"}]},
        {"hosts": 2, "ranks": 4, "choices": [{"up_to_bytes": 65536, "algorithm": "mpi"},
                                             {"algorithm": "shm+rabenseifner"}]}]}

    def test_choice_follows_the_library_rules(self):
        # The same cases as tests/dist/test_collective_table.cpp checks in the library.
        t = self.TABLE
        self.assertEqual(m.table_choice(t, 4096, 2, 1), "recursive_doubling")  # inclusive bound
        self.assertEqual(m.table_choice(t, 4097, 2, 1), "shm")
        self.assertEqual(m.table_choice(t, 65537, 4, 2), "shm+rabenseifner")
        self.assertEqual(m.table_choice(t, 100, 8, 1), "recursive_doubling")  # nearest one-host case
        self.assertEqual(m.table_choice(t, 100, 2, 2), "mpi")  # several hosts: never the one-host case
        one_host = {"format": "dtrain-allreduce-table/1", "cases": [t["cases"][0]]}
        self.assertEqual(m.table_choice(one_host, 1000, 4, 2), "mpi")  # built in, below 256 KB
        self.assertEqual(m.table_choice(one_host, 256 << 10, 4, 2), "shm")

    def test_the_shipped_table_names_measured_algorithms(self):
        table = m.read_table()
        for case in table["cases"]:
            for step in case["choices"]:
                self.assertIn(step["algorithm"], m.TABLE_IMPLS)

    def test_dp_prediction_costs_the_table_choice(self):
        # Two fits on one link: the model charges each bucket the chosen algorithm's line.
        pts = []
        for impl, a, b in (("dtrain_mpi", 10.0, 1e-3), ("shm_rab", 100.0, 1e-4), ("auto", 1.0, 1.0)):
            pts += [{"impl": impl, "link": "10gbit_50us", "ranks": 4, "hosts": 2, "bytes": n,
                     "time_us": a + b * n} for n in (1 << 10, 1 << 14, 1 << 18, 1 << 22)]
        fits = m.fit_allreduce(pts)
        time_us = m._dp_allreduce_us(fits, "10gbit_50us", 4, 2, self.TABLE)
        self.assertAlmostEqual(time_us(1000), 10.0 + 1.0, places=3)  # mpi below 64 KB
        self.assertAlmostEqual(time_us(1 << 20), 100.0 + 1e-4 * (1 << 20), places=3)


if __name__ == "__main__":
    unittest.main()
