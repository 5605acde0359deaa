"""Solve + certify one LP and describe the optimum as a record (what the CLI prints)."""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

from .certify import refine_basis
from .program import LinearProgram
from .solve import solve


def optimum_record(lp: LinearProgram, backend: str = "highs", want_certificate: bool = True,
                   rational: bool = True) -> dict[str, Any]:
    """Solve `lp` and certify its optimum in exact arithmetic.

    Keys: value (float), exact (fraction string when certified and the instance is
    rational, else None), exact_value (Fraction or None, always set when certified),
    certified (bool), certificate (reason), status, seconds (solve), certify_seconds,
    backend, size (variables/rows/nonzeros), notes.
    """
    start = time.perf_counter()
    solution = solve(lp, backend=backend)
    record: dict[str, Any] = {
        "value": float(solution.value) if solution.value is not None else None,
        "exact": None,
        "exact_value": None,
        "certified": False,
        "certificate": "not requested",
        "status": solution.status,
        "seconds": round(solution.seconds, 6),
        "certify_seconds": None,
        "backend": backend,
        "size": lp.describe(),
        "notes": list(lp.notes) + list(solution.notes),
    }
    if want_certificate:
        # The certificate needs an optimal basis. HiGHS gives one (refined in exact
        # arithmetic when the float basis is slightly off); cvxpy gives none, so its
        # optimum is certified through a HiGHS basis of the same LP and the distance of
        # cvxpy's value from the exact optimum is recorded.
        basis_source = solution if solution.basis is not None else solve(lp, backend="highs")
        refined, cert = refine_basis(lp, basis_source)
        record["certify_seconds"] = round(cert.seconds, 6)
        record["certified"] = bool(cert.certified)
        record["certificate"] = cert.reason
        record["notes"] += [n for n in refined.notes if n.startswith("refinement")]
        if solution.basis is None:
            record["certificate"] += " (basis from HiGHS; the backend returns none)"
        if cert.certified and solution.value is not None:
            record["backend_error"] = abs(float(solution.value) - float(cert.value))
        if cert.certified and cert.value is not None:
            record["exact_value"] = Fraction(cert.value)
            if rational:
                record["exact"] = str(Fraction(cert.value))
    record["total_seconds"] = round(time.perf_counter() - start, 6)
    return record
