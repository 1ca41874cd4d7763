"""Finite checks for the Sparse MLA decode path, printed as `[DSV4_DIAG] key = value` lines the verdict reads.

Off by default and cheap to leave in: with neither DSV4_SPARSE_DEBUG nor DSV4_SPARSE_VALIDATE set, `check` returns
at once (no device sync). DSV4_SPARSE_DEBUG=1 prints; DSV4_SPARSE_VALIDATE=1 also raises NonFiniteError (§15.2).
`DiagOnce` fires on the real request rather than the engine warm-up (J14: the warm-up has 8 queries).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO


class NonFiniteError(AssertionError):
    """A checked tensor holds NaN or Inf (DSV4_SPARSE_VALIDATE=1)."""


def debug_on() -> bool:
    return os.environ.get("DSV4_SPARSE_DEBUG") == "1" or validate_on()


def validate_on() -> bool:
    return os.environ.get("DSV4_SPARSE_VALIDATE") == "1"


def diag(key: str, value: object, rank: int | None = None, out: TextIO | None = None) -> None:
    tag = f"[TP{rank}]" if rank is not None else ""
    print(f"[DSV4_DIAG]{tag} {key} = {value}", file=out or sys.stdout, flush=True)


def check(name: str, tensor, rank: int | None = None, out: TextIO | None = None) -> bool:
    """Report `<name>_finite` and `<name>_max` (largest finite magnitude); raise under validate. True if finite."""
    if not debug_on():
        return True
    import torch

    finite_mask = torch.isfinite(tensor)
    finite = bool(finite_mask.all())
    magnitude = tensor.detach().abs().float()
    largest = float(magnitude[finite_mask].max()) if bool(finite_mask.any()) else float("nan")
    diag(f"{name}_finite", finite, rank, out)
    diag(f"{name}_max", largest if finite else float("nan"), rank, out)
    if not finite and validate_on():
        raise NonFiniteError(f"{name} holds NaN or Inf (DSV4_SPARSE_VALIDATE=1)")
    return finite


class DiagOnce:
    """Emit diagnostics once, for a real decode (few queries), never for the warm-up's dummy batch."""

    def __init__(self, max_queries: int = 2) -> None:
        self.max_queries = max_queries
        self.fired = False

    def __call__(self, num_queries: int) -> bool:
        if self.fired or not debug_on() or num_queries > self.max_queries:
            return False
        self.fired = True
        return True
