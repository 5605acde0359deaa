import sys, time
import numpy as np, torch
from speclp.decode.models import load_pair
from speclp.decode.tree_rows import prefill
torch.set_num_threads(1)
T = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
M = int(sys.argv[2]) if len(sys.argv) > 2 else 8
pair = load_pair("smollm2-135m", device="cpu")
PROMPTS = ["def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "def is_palindrome(text: str) -> bool:\n"]
for text in PROMPTS:
    ctx = pair.target.tokenizer.encode(text)
    ready = prefill(pair.target.model, pair.draft.model, ctx, T, 1.5 * T)
    p0 = ready.target.root_row.numpy(); q0 = ready.draft.root_row.numpy()
    top = np.argsort(-(p0 + q0), kind="stable")[:M]
    toks = torch.tensor(top)
    with torch.no_grad():
        P1 = ready.target.level(toks, torch.zeros(M, 0, dtype=torch.bool), 1).numpy()
        Q1 = ready.draft.level(toks, torch.zeros(M, 0, dtype=torch.bool), 1).numpy()
    def stats(p, q, pu, qu, keep):
        out = np.ones(len(p), bool); out[keep] = False
        Pr, Qr = p[out].sum(), q[out].sum()
        C = {K: float(np.minimum(pu * p[out], K * qu * q[out]).sum()) for K in (1, 2, 4)}
        lump = {K: min(pu * Pr, K * qu * Qr) for K in (1, 2, 4)}
        beta = float(np.minimum(p[out] / Pr, q[out] / Qr).sum())
        return Pr, Qr, C, lump, beta
    print("prompt", repr(text[:20]), "T", T, "M", M)
    print(" sum min(p,q) root full", np.minimum(p0, q0).sum())
    Pr, Qr, C, lump, beta = stats(p0, q0, 1.0, 1.0, top)
    print(f" root: P_r {Pr:.4f} Q_r {Qr:.4f} beta {beta:.3f} C {C} lump {lump}")
    totC = {K: 0.0 for K in (1, 2, 4)}; totL = {K: 0.0 for K in (1, 2, 4)}
    for i, t in enumerate(top):
        p, q = P1[i], Q1[i]
        kt = np.argsort(-(p + q), kind="stable")[:M]
        Pr, Qr, C, lump, beta = stats(p, q, p0[t], q0[t], kt)
        for K in C: totC[K] += C[K]; totL[K] += lump[K]
        print(f"  d1 node {i}: p(u) {p0[t]:.4f} q(u) {q0[t]:.4f} P_u {p0[t]*Pr:.4f} Q_u {q0[t]*Qr:.4f} "
              f"beta {beta:.3f} C1 {C[1]:.4f} lump1 {lump[1]:.4f}")
    print(" depth-1 totals C", totC, "lump", totL)
