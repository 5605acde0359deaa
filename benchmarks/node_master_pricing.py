"""Node-budget master convergence (issue 30 part 4: the (8, 3, 4) optimum is the bottleneck): master solves
and CPU seconds of lp.colgen.solve_node_master on one sweep-grid instance, as shipped ("base") or with the
greedy priorities of three more stabilised dual points added per solve ("more": Wentges points at weights
0.25, 0.75, 0.9 on the duals of the best bound), solved by HiGHS's primal simplex instead of its default
dual simplex ("primal": after columns are added the last basis stays primal feasible), and with another
smoothing weight (env SM, default 0.5).
An exploration: it patches the pricing step in this process only.

    OMP_NUM_THREADS=1 SM=0.5 python benchmarks/node_master_pricing.py V L K ALPHA SEED base|more|primal

Recorded results: benchmarks/results/gap_speed/node_master_pricing.md.
"""
import os
import sys
import time

import numpy as np
from speclp.experiments.sweep import SweepSpec, plan
from speclp.lp import colgen
from speclp.lp.colgen import _expected_max, master_data, priority_law, solve_node_master
from speclp.lp.engine import _model_and_rational

V, L, K, A, S = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
variant = sys.argv[6]
spec = SweepSpec(vocab=(V,), depth=(L,), paths=(K,), alpha=(A,), trials=S + 1, seed=0)
task = [t for t in plan(spec)[0] if t.seed == S][0]
model, _ = _model_and_rational(task.instance(), True)
master = master_data(model, K, "iid", exact=True)

orig_price = colgen._NodePricing.price
def price(self, iteration, started):
    stop = orig_price(self, iteration, started)
    if stop or variant != "more" or self.center is None:
        return stop
    row_dual = np.asarray(self.h.getSolution().row_dual, dtype=np.float64)
    mu, sigma = np.abs(row_dual[:self.count]), abs(row_dual[-1])
    theta = mu[self.leaf_paths].sum(axis=1)
    for a in (0.25, 0.75, 0.9):
        point = (a * self.center + (1 - a) * mu)[self.leaf_paths].sum(axis=1)
        cand, _ = _expected_max(self.master, point)
        if (not any(np.array_equal(cand, p) for p in self.priorities[-6:])
                and float(priority_law(self.master, cand) @ theta) - sigma > self.tolerance):
            self.add(cand)
    return False
colgen._NodePricing.price = price
if variant == "primal":  # the same master solved by HiGHS's primal simplex (simplex_strategy 4)
    build = colgen._node_master_highs

    def primal_highs(model):
        h = build(model)
        h.setOptionValue("simplex_strategy", 4)
        return h
    colgen._node_master_highs = primal_highs
t0 = time.process_time()
r = solve_node_master(master, time_limit=1800, smoothing=float(os.environ.get("SM", "0.5")))
print(variant, (V, L, K, A, S), r.status, r.iterations, f"cpu {time.process_time() - t0:.1f}",
      f"value {r.value:.13f}", flush=True)
