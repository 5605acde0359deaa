"""The linear programs of speculative decoding, and ONE certified optimum engine.

    from speclp import lp
    record = lp.optimum(instance, paths=3)            # column generation, certified
    record.value, record.exact, record.certified, record.mixture

Modules (dependencies point down the list; nothing here imports torch):
    instance    instances: JSON format, validation, generators, built-ins
    program     a linear program as inspectable data (float64 and exact rationals)
    solve       HiGHS / cvxpy solves of a LinearProgram
    certify     exact optimality certificates from a basis (python-flint), refinement
    rows        row families shared by the LPs: target matching, chain rows, objective
    full        the enumerated full K-path LP and the LP of one fixed draft tree
    node        the single-path node LP and its closed form (block verification)
    colgen      column generation: selection master, pricing, exact certificate, mixture
    engine      THE entry point optimum(...) and its record Optimum; program_optimum(lp)
    class_lp    the selection-class LP by cutting planes (object of study of the claims)
    node_form   the node-level relaxation (object of study of the claims)
"""

from .engine import Optimum, Status, optimum, program_optimum

__all__ = ["Optimum", "Status", "optimum", "program_optimum"]
