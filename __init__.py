"""speclp: speculative decoding theory turned into checked numbers.

Subpackages (dependencies point one way: proofs -> lp -> verifiers):
    speclp.verifiers  exact verifier laws (torch, batched), enumeration, engine, models
    speclp.lp         instances, linear programs, solvers, exact certificates
    speclp.proofs     theorem checks built on lp + verifiers
"""

__version__ = "0.1.0"
