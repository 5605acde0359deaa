"""Where the L = 2 bracket's width comes from: the lumped masses of the uniform top-M tree of
p + q per kept node on smollm2-135m (its own draft at 1.5 T). Run from the repository root:

    flock /tmp/heavy.lock nice -n 5 python benchmarks/results/realgap/bracket_smollm2/diagnose.py T M

Per kept node u: p(u), q(u), P_u = p(u) p(rest|u), Q_u, the overlap beta of the normalised
lumped rows (lp.coarsen.exit_overlap) and C1 = sum over lumped x of min(p(ux), q(ux)) next to
min(P_u, Q_u) (docs/theory.md section 13.6).
"""

import sys

import numpy as np
import torch
from speclp.decode.models import load_pair
from speclp.decode.tree_rows import prefill

torch.set_num_threads(1)
T = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
M = int(sys.argv[2]) if len(sys.argv) > 2 else 8
pair = load_pair("smollm2-135m", device="cpu")
PROMPTS = ["def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "def is_palindrome(text: str) -> bool:\n"]


def stats(p, q, pu, qu, keep):
    out = np.ones(len(p), bool)
    out[keep] = False
    big_p, big_q = p[out].sum(), q[out].sum()
    caps = {k: float(np.minimum(pu * p[out], k * qu * q[out]).sum()) for k in (1, 2, 4)}
    lump = {k: min(pu * big_p, k * qu * big_q) for k in (1, 2, 4)}
    beta = float(np.minimum(p[out] / big_p, q[out] / big_q).sum())
    return big_p, big_q, caps, lump, beta


for text in PROMPTS:
    ctx = pair.target.tokenizer.encode(text)
    ready = prefill(pair.target.model, pair.draft.model, ctx, T, 1.5 * T)
    p0, q0 = ready.target.root_row.numpy(), ready.draft.root_row.numpy()
    top = np.argsort(-(p0 + q0), kind="stable")[:M]
    toks = torch.tensor(top)
    with torch.no_grad():
        rows_p = ready.target.level(toks, torch.zeros(M, 0, dtype=torch.bool), 1).numpy()
        rows_q = ready.draft.level(toks, torch.zeros(M, 0, dtype=torch.bool), 1).numpy()
    print("prompt", repr(text[:20]), "T", T, "M", M)
    print(" sum min(p,q) root full", np.minimum(p0, q0).sum())
    big_p, big_q, caps, lump, beta = stats(p0, q0, 1.0, 1.0, top)
    print(f" root: P_r {big_p:.4f} Q_r {big_q:.4f} beta {beta:.3f} C {caps} lump {lump}")
    total_c = {k: 0.0 for k in (1, 2, 4)}
    total_l = {k: 0.0 for k in (1, 2, 4)}
    for i, t in enumerate(top):
        p, q = rows_p[i], rows_q[i]
        kept = np.argsort(-(p + q), kind="stable")[:M]
        big_p, big_q, caps, lump, beta = stats(p, q, p0[t], q0[t], kept)
        for k in caps:
            total_c[k] += caps[k]
            total_l[k] += lump[k]
        print(f"  d1 node {i}: p(u) {p0[t]:.4f} q(u) {q0[t]:.4f} P_u {p0[t] * big_p:.4f} "
              f"Q_u {q0[t] * big_q:.4f} beta {beta:.3f} C1 {caps[1]:.4f} lump1 {lump[1]:.4f}")
    print(" depth-1 totals C", total_c, "lump", total_l)
