"""A tiny array namespace so that one law function serves two number systems.

Every verifier law is written once against these functions. They run on
  * torch tensors (float64 on CPU for exact-float enumeration, float32/bf16 on CUDA
    in the engine),
  * numpy float64 arrays (the structure-aware exact laws of float instances,
    verifiers.structure through host_rows: `speclp gap` never imports torch),
  * numpy object arrays of exact rationals (``fractions.Fraction`` or ``flint.fmpq``),
    which gives the *exact* law of a rational instance from the same code, and
  * numpy object arrays of symbolic rational functions of the rows
    (speclp.proofs.symbolic.cells.CellExpr), which gives the law on a whole cell of
    instances: their comparisons are decided by the cell, and min / max / (.)_+ call the
    values' own ``minimum`` / ``maximum`` (the two choices agree where a = b, so a cell
    is split only where they differ).

Only what the laws need is here; nothing loops over the batch or the vocabulary.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np

Array = Any  # torch.Tensor or numpy.ndarray (dtype float64 or object)


class _LazyTorch:
    """torch, imported on first use: importing this module does not import torch, so the
    torch-free callers (speclp.lp, through verifiers.single_step's threshold optimum) stay
    torch-free. Every torch call here sits behind is_torch(), which is False for every
    array while torch has not been imported (no tensor can exist then)."""

    def __getattr__(self, name: str) -> Any:
        import torch as module  # lazy: keeps torch out of the theory side until a tensor exists

        globals()["torch"] = module  # from now on this module calls torch directly
        return getattr(module, name)


torch = _LazyTorch()


_tensor_type: type | None = None  # torch.Tensor once torch has been imported


def is_torch(a: Array) -> bool:
    global _tensor_type
    if _tensor_type is None:
        module = sys.modules.get("torch")
        if module is None:
            return False  # no tensor can exist before torch is imported
        _tensor_type = module.Tensor
    return isinstance(a, _tensor_type)


# --- the arrays of the float64 exact laws (verifiers.structure) ---

_FLOAT_TENSORS = contextvars.ContextVar("speclp_float_tensors", default=False)


@contextlib.contextmanager
def torch_float64() -> Iterator[None]:
    """Within this block host_rows / host_index give CPU torch tensors (float64 rows, the
    engine's batched arrays) instead of numpy arrays: the tests compare the two. Outside it
    the float64 exact laws run on numpy and never import torch."""
    token = _FLOAT_TENSORS.set(True)
    try:
        yield
    finally:
        _FLOAT_TENSORS.reset(token)


def host_rows(rows: Any) -> Array:
    """Float rows for a float64 exact law on the CPU: a numpy float64 array (torch is not
    imported), or a CPU torch float64 tensor within torch_float64()."""
    if _FLOAT_TENSORS.get():
        return torch.as_tensor(as_float64(rows), dtype=torch.float64)
    return as_float64(rows)


def host_index(values: Any) -> Array:
    """Integer or bool arrays (tokens, masks) beside host_rows: numpy as they are, or CPU
    torch tensors of the same values within torch_float64()."""
    if _FLOAT_TENSORS.get():
        return torch.as_tensor(np.asarray(values))
    return np.asarray(values)


def is_exact(a: Array) -> bool:
    """True for numpy object arrays (exact rationals)."""
    return isinstance(a, np.ndarray) and a.dtype == object


def _like(value: Any, ref: Array) -> Array:
    if is_torch(ref):
        return torch.as_tensor(value, dtype=ref.dtype, device=ref.device)
    return value


def _pick(x: Any, y: Any, method: str, fallback: bool) -> Any:
    """min (method "minimum") or max of two exact scalars. Values that define the method
    themselves (the symbolic rational functions of speclp.proofs.symbolic, whose order is
    decided by a cell of instances) choose; otherwise x if (x <= y) == fallback else y."""
    own = getattr(x, method, None)
    if callable(own):
        return own(y)
    other = getattr(y, method, None)
    if callable(other):
        return other(x)
    return x if (x <= y) == fallback else y


def _elementwise_extremum(method: str, fallback: bool) -> Callable[[Array, Array | float], Array]:
    """The ops function `method`(a, b) ("minimum" or "maximum", elementwise): torch.<method>
    on tensors, _pick(x, y, method, fallback) on exact object arrays, numpy.<method>
    otherwise."""
    exact_op = np.frompyfunc(lambda x, y: _pick(x, y, method, fallback), 2, 1)
    numpy_op = getattr(np, method)

    def op(a: Array, b: Array | float) -> Array:
        if is_torch(a):
            return getattr(torch, method)(a, _like(b, a))
        if is_exact(a):
            return exact_op(a, b)
        return numpy_op(a, b)

    op.__name__ = op.__qualname__ = method
    return op


minimum = _elementwise_extremum("minimum", True)
maximum = _elementwise_extremum("maximum", False)


def positive_part(a: Array) -> Array:
    """(a)_+ elementwise."""
    if is_torch(a):
        return torch.clamp_min(a, 0)
    return maximum(a, 0)


def total(a: Array, dim: int, keepdim: bool = False) -> Array:
    """Sum over one axis."""
    if is_torch(a):
        return a.sum(dim=dim, keepdim=keepdim)
    return a.sum(axis=dim, keepdims=keepdim)


def where(cond: Array, a: Array, b: Array) -> Array:
    if is_torch(cond):
        ref = a if is_torch(a) else b
        return torch.where(cond, _like(a, ref), _like(b, ref))
    return np.where(cond, a, b)


def safe_div(num: Array, den: Array) -> Array:
    """num / den where den != 0, else 0 (no division by zero is ever evaluated)."""
    nonzero = den != 0
    if is_torch(den):
        return torch.where(nonzero, num / torch.where(nonzero, den, torch.ones_like(den)),
                           torch.zeros_like(num * den))
    ones = np.ones_like(den)
    safe = np.where(nonzero, den, ones)
    zero = np.zeros_like(num * safe)
    quotient = _exact_divide(num, safe) if is_exact(num) or is_exact(safe) else num / safe
    return np.where(nonzero, quotient, zero)


def _exact_quotient(x: Any, y: Any) -> Any:
    """x / y for exact scalars; two integers give a Fraction (Python's int / int is a float,
    which would silently turn an exact law into floats, e.g. an integer 0 weight over 1)."""
    if isinstance(x, (int, np.integer)) and isinstance(y, (int, np.integer)):
        return Fraction(int(x), int(y))
    return x / y


_exact_divide = np.frompyfunc(_exact_quotient, 2, 1)


def gather(a: Array, dim: int, index: Array) -> Array:
    """torch.gather semantics (numpy: take_along_axis)."""
    if is_torch(a):
        return torch.gather(a, dim, index)
    return np.take_along_axis(a, np.asarray(index), axis=dim)


def stack(items: list[Array], dim: int) -> Array:
    if is_torch(items[0]):
        return torch.stack(items, dim=dim)
    return np.stack(items, axis=dim)


def zeros(shape: tuple[int, ...], like: Array) -> Array:
    if is_torch(like):
        return torch.zeros(shape, dtype=like.dtype, device=like.device)
    if is_exact(like):
        out = np.empty(shape, dtype=object)
        out[...] = _exact_zero(like)
        return out
    return np.zeros(shape, dtype=like.dtype)


def ones(shape: tuple[int, ...], like: Array) -> Array:
    if is_torch(like):
        return torch.ones(shape, dtype=like.dtype, device=like.device)
    if is_exact(like):
        out = np.empty(shape, dtype=object)
        out[...] = _exact_zero(like) + 1
        return out
    return np.ones(shape, dtype=like.dtype)


def _exact_zero(like: np.ndarray) -> Any:
    flat = like.reshape(-1)
    return flat[0] * 0 if flat.size else 0


def _along_axis(name: str, doc: str) -> Callable[[Array, int], Array]:
    """The ops function `name`(a, dim): torch.<name>(a, dim=dim) on tensors, numpy.<name>(a,
    axis=dim) otherwise (the operations both libraries spell alike)."""
    numpy_op = getattr(np, name)

    def op(a: Array, dim: int) -> Array:
        if is_torch(a):
            return getattr(torch, name)(a, dim=dim)
        return numpy_op(a, axis=dim)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


cumprod = _along_axis("cumprod", "Running product along one axis.")


def flip(a: Array, dim: int) -> Array:
    if is_torch(a):
        return torch.flip(a, dims=(dim,))
    return np.flip(a, axis=dim)


def concat(items: list[Array], dim: int) -> Array:
    if is_torch(items[0]):
        return torch.cat(items, dim=dim)
    return np.concatenate(items, axis=dim)


def eq(a: Array, b: Array) -> Array:
    return a == b


def index_like(a: Array, index: Array) -> Array:
    """Integer index array in the same framework as ``a``."""
    if is_torch(a):
        return torch.as_tensor(index, device=a.device, dtype=torch.long)
    return np.asarray(index.cpu().numpy() if is_torch(index) else index, dtype=np.int64)


def as_float64(a: Array) -> np.ndarray:
    """Float64 numpy copy (exact rationals are rounded)."""
    if is_torch(a):
        return a.detach().to(torch.float64).cpu().numpy()
    if is_exact(a):
        return np.vectorize(float, otypes=[np.float64])(a) if a.size else a.astype(np.float64)
    return np.asarray(a, dtype=np.float64)


# --- additions for the multi-path laws (sorting, prefix sums, index arithmetic) ---


cumsum = _along_axis("cumsum", "Inclusive prefix sum along one axis.")


def argsort(a: Array, dim: int = -1) -> Array:
    """Stable ascending argsort (equal values keep their index order).

    torch: torch.sort(stable=True); numpy (float or exact object arrays): kind="stable".
    """
    if is_torch(a):
        return torch.sort(a, dim=dim, stable=True).indices
    return np.argsort(a, axis=dim, kind="stable")


def inverse_permutation(order: Array, dim: int = -1) -> Array:
    """rank with rank[..., order[..., j]] = j along `dim` (the inverse of an argsort)."""
    size = order.shape[dim]
    if is_torch(order):
        shape = [1] * order.ndim
        shape[dim] = size
        positions = torch.arange(size, device=order.device).reshape(shape).expand_as(order)
        return torch.empty_like(order).scatter_(dim, order, positions)
    shape = [1] * order.ndim
    shape[dim] = size
    positions = np.broadcast_to(np.arange(size).reshape(shape), order.shape)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, positions, axis=dim)
    return rank


def arange(n: int, like: Array) -> Array:
    """Integer range 0..n-1 in the framework (and on the device) of `like`."""
    if is_torch(like):
        return torch.arange(n, device=like.device)
    return np.arange(n)


argmin = _along_axis("argmin", "Index of the FIRST minimum along `dim`.")
_argmax = _along_axis("argmax", "Index of the FIRST maximum along `dim` (no torch bools).")


def argmax(a: Array, dim: int) -> Array:
    """Index of the FIRST maximum along `dim` (ints or bools; torch and numpy agree)."""
    if is_torch(a) and a.dtype == torch.bool:
        a = a.to(torch.int8)  # torch.argmax refuses bool input
    return _argmax(a, dim)


# --- additions for the single-step optimum (running extrema, scatter sums, rank search) ---


def cummax(a: Array, dim: int) -> Array:
    """Running maximum along one axis (ints, floats or exact rationals)."""
    if is_torch(a):
        return torch.cummax(a, dim=dim).values
    return np.maximum.accumulate(a, axis=dim)


def cummin(a: Array, dim: int) -> Array:
    """Running minimum along one axis."""
    if is_torch(a):
        return torch.cummin(a, dim=dim).values
    return np.minimum.accumulate(a, axis=dim)


def amin(a: Array, dim: int) -> Array:
    """Minimum along one axis (values only)."""
    if is_torch(a):
        return a.amin(dim=dim)
    return a.min(axis=dim)


def amax(a: Array, dim: int) -> Array:
    """Maximum along one axis (values only)."""
    if is_torch(a):
        return a.amax(dim=dim)
    return a.max(axis=dim)


def take_rows(values: Array, index: Array) -> Array:
    """values [R, N], index [R, ...] -> [R, ...] with out[r, ...] = values[r, index[r, ...]]."""
    rows = values.shape[0]
    flat = index.reshape(rows, -1)
    return gather(values, -1, flat).reshape(index.shape)


def scatter_sum(values: Array, index: Array, size: int) -> Array:
    """values [R, N], index [R, N] in 0..size-1 -> [R, size] sums of the values per index."""
    out = zeros((values.shape[0], size), like=values)
    if is_torch(values):
        return out.scatter_add_(-1, index, values)
    rows = np.broadcast_to(np.arange(values.shape[0])[:, None], index.shape)
    np.add.at(out, (rows, np.asarray(index)), values)
    return out


def count_above(sorted_descending: Array, values: Array) -> Array:
    """[R, N] number of entries of each row of sorted_descending [R, M] that are >= values [R, N]."""
    if is_torch(values):
        ascending = torch.flip(sorted_descending, dims=(-1,)).contiguous()
        below = torch.searchsorted(ascending, values.contiguous(), right=False)
        return ascending.shape[-1] - below
    return (sorted_descending[:, None, :] >= values[:, :, None]).sum(axis=-1)


def distinct_rows(x: Array) -> tuple[Array, Array]:
    """(distinct rows [U, N], inverse [R]) with x = distinct[inverse] for x [R, N] (bitwise
    equality for floats).

    torch on the CPU and numpy numbers: numpy's unique over the rows viewed as raw bytes
    (torch.unique(dim=0) is about 10x slower there); torch elsewhere: torch.unique(dim=0);
    exact rationals: a dictionary, rows in first-occurrence order."""
    if is_torch(x) and x.device.type != "cpu":
        unique, inverse = torch.unique(x, dim=0, return_inverse=True)
        return unique, inverse
    if is_torch(x) or not is_exact(x):
        values = np.ascontiguousarray(x.numpy() if is_torch(x) else x)
        raw = values.view(np.dtype((np.void, values.dtype.itemsize * values.shape[1])))[:, 0]
        _, firsts, inverse = np.unique(raw, return_index=True, return_inverse=True)
        if is_torch(x):
            return x[torch.from_numpy(firsts)], torch.from_numpy(inverse.reshape(-1))
        return x[firsts], inverse.reshape(-1)
    seen: dict[tuple, int] = {}
    inverse = np.empty(x.shape[0], dtype=np.int64)
    firsts_list = []
    for r, row in enumerate(map(tuple, x)):
        index = seen.get(row)
        if index is None:
            index = seen[row] = len(firsts_list)
            firsts_list.append(r)
        inverse[r] = index
    return x[np.asarray(firsts_list, dtype=np.int64)], inverse
