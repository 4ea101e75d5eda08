"""How many terms the reference sums into one value: the calibrated bound's allowance for long reductions.

Worker side (the reference worker; imports torch).  The calibrated bound
(compare.py) lets a candidate err by a few times the reference's own error in
its dtype.  For a short computation that is fair; for a long reduction it is
not: torch sums in trees, so its fp32 norm of 58.7M elements is off by a
fraction of an ulp, while an honest kernel that sums blocks and then combines
the blocks' partial sums one after another (a loop, float atomics) errs by
several ulps, about √(terms / block) times more.  `ReductionRecorder` watches
the reference's torch calls (a TorchFunctionMode: the calls as the problem
wrote them) and keeps the longest reduction among them: matmul and linear
inner dimensions, convolution windows, sums, means, norms, softmax rows,
normalisation groups, pooling windows and losses.  An operation it does not
know counts as no reduction, so the allowance only ever grows where a known
reduction is long.
"""

from __future__ import annotations

import math
import re

from torch.overrides import TorchFunctionMode

from kanalyze.dynamic.recording import own_mode


def _arg(args, kwargs, index: int, name: str, default=None):
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else default


def _shape(value) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    return tuple(int(d) for d in shape) if shape is not None else None


def _over_dims(shape: tuple[int, ...], dim) -> int:
    """Terms per value when `shape` is reduced over `dim` (None: everything)."""
    if dim is None or dim == () or dim == []:
        return math.prod(shape)
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    try:
        return math.prod(shape[int(d)] for d in dims)
    except (IndexError, TypeError, ValueError):
        return math.prod(shape)


def _inner(args, kwargs) -> int:        # matmul, mm, bmm, linear, @
    shape = _shape(_arg(args, kwargs, 0, "input"))
    return shape[-1] if shape else 1


def _addmm(args, kwargs) -> int:        # addmm, baddbmm, addbmm: the product's left operand is the second
    shape = _shape(_arg(args, kwargs, 1, "mat1", _arg(args, kwargs, 1, "batch1")))
    return shape[-1] if shape else 1


def _rmatmul(args, kwargs) -> int:      # other @ self
    shape = _shape(_arg(args, kwargs, 1, "other"))
    return shape[-1] if shape else 1


def _convolution(args, kwargs) -> int:  # each output sums channels-per-group × the kernel window
    weight = _shape(_arg(args, kwargs, 1, "weight"))
    return math.prod(weight[1:]) if weight and len(weight) > 1 else 1


def _transposed_convolution(args, kwargs) -> int:
    weight = _shape(_arg(args, kwargs, 1, "weight"))
    groups = int(_arg(args, kwargs, 6, "groups", 1) or 1)
    return (weight[0] // groups) * math.prod(weight[2:]) if weight and len(weight) > 2 else 1


def _reduce(args, kwargs, position: int = 1) -> int:
    """sum, mean, softmax, cumsum …: terms over `dim` (the `position`-th argument), else over everything."""
    shape = _shape(_arg(args, kwargs, 0, "input"))
    if not shape:
        return 1
    dim = _arg(args, kwargs, position, "dim")
    if isinstance(dim, bool) or not isinstance(dim, (int, tuple, list, type(None))):
        dim = None
    return _over_dims(shape, dim)


def _norm(args, kwargs) -> int:         # norm(input, p, dim): the order comes first
    return _reduce(args, kwargs, position=2)


def _whole(args, kwargs) -> int:        # losses with a mean over every element
    shape = _shape(_arg(args, kwargs, 0, "input"))
    return math.prod(shape) if shape else 1


def _layer_norm(args, kwargs) -> int:
    normalized = _arg(args, kwargs, 1, "normalized_shape", ())
    return math.prod(int(d) for d in normalized) if normalized else 1


def _per_channel(args, kwargs) -> int:  # batch norm (training: statistics over every element of a channel)
    shape = _shape(_arg(args, kwargs, 0, "input"))
    return math.prod(shape) // shape[1] if shape and len(shape) > 1 and shape[1] else 1


def _group_norm(args, kwargs) -> int:
    shape = _shape(_arg(args, kwargs, 0, "input"))
    groups = int(_arg(args, kwargs, 1, "num_groups", 1) or 1)
    return math.prod(shape[1:]) // groups if shape and len(shape) > 1 else 1


def _instance_norm(args, kwargs) -> int:
    shape = _shape(_arg(args, kwargs, 0, "input"))
    return math.prod(shape[2:]) if shape and len(shape) > 2 else 1


def _along_dim(args, kwargs) -> int:    # normalize, cosine_similarity: one dim, default 1
    shape = _shape(_arg(args, kwargs, 0, "input", _arg(args, kwargs, 0, "x1")))
    dim = kwargs.get("dim", 1)
    try:
        return shape[int(dim)] if shape else 1
    except (IndexError, TypeError, ValueError):
        return 1


def _pool(args, kwargs) -> int:
    kernel = _arg(args, kwargs, 1, "kernel_size", 1)
    return math.prod(kernel) if isinstance(kernel, (tuple, list)) else int(kernel)


def _adaptive_pool(dims: int):
    def terms(args, kwargs) -> int:  # each output averages the input window it covers
        shape = _shape(_arg(args, kwargs, 0, "input"))
        size = _arg(args, kwargs, 1, "output_size", 1)
        sizes = tuple(size) if isinstance(size, (tuple, list)) else (size,) * dims
        if not shape or len(shape) < dims:
            return 1
        spatial = shape[-dims:]
        return max(1, math.prod(spatial) // max(1, math.prod(int(s or d) for s, d in zip(sizes, spatial))))
    return terms


def _einsum(args, kwargs) -> int:       # the product of the sizes of the summed indices
    equation = args[0] if args and isinstance(args[0], str) else ""
    operands = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else args[1:]
    inputs, _, output = equation.replace(" ", "").partition("->")
    sizes: dict[str, int] = {}
    for spec, operand in zip(inputs.split(","), operands):
        for letter, size in zip(re.sub(r"\.\.\.", "", spec), _shape(operand) or ()):
            sizes.setdefault(letter, size)
    summed = set(sizes) - set(output) if "->" in equation else {k for k in sizes if inputs.count(k) > 1}
    return math.prod(sizes[k] for k in summed) if summed else 1


TERMS = {
    **dict.fromkeys(("matmul", "mm", "bmm", "linear", "__matmul__", "bilinear", "inner", "dot", "vdot", "mv"),
                    _inner),
    **dict.fromkeys(("addmm", "baddbmm", "addbmm", "addmv"), _addmm),
    "__rmatmul__": _rmatmul,
    **dict.fromkeys(("conv1d", "conv2d", "conv3d"), _convolution),
    **dict.fromkeys(("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"), _transposed_convolution),
    **dict.fromkeys(("sum", "nansum", "mean", "nanmean", "std", "var", "std_mean", "var_mean", "logsumexp",
                     "prod", "cumsum", "cumprod", "logcumsumexp", "softmax", "log_softmax", "softmin"), _reduce),
    **dict.fromkeys(("norm", "vector_norm", "frobenius_norm"), _norm),
    **dict.fromkeys(("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "nll_loss",
                     "kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits", "hinge_embedding_loss",
                     "margin_ranking_loss", "triplet_margin_loss", "cosine_embedding_loss", "soft_margin_loss",
                     "multi_margin_loss", "poisson_nll_loss", "gaussian_nll_loss"), _whole),
    "layer_norm": _layer_norm, "rms_norm": _layer_norm, "batch_norm": _per_channel,
    "group_norm": _group_norm, "instance_norm": _instance_norm,
    **dict.fromkeys(("normalize", "cosine_similarity", "pairwise_distance", "cdist"), _along_dim),
    **dict.fromkeys(("avg_pool1d", "avg_pool2d", "avg_pool3d", "lp_pool1d", "lp_pool2d"), _pool),
    **{f"adaptive_avg_pool{dims}d": _adaptive_pool(dims) for dims in (1, 2, 3)},
    "einsum": _einsum,
}


@own_mode
class ReductionRecorder(TorchFunctionMode):
    """The longest reduction among the torch calls made while it is on (`longest`, ≥ 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.longest = 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        terms = TERMS.get(getattr(func, "__name__", ""))
        if terms is not None:
            try:
                self.longest = max(self.longest, int(terms(args, kwargs)))
            except Exception:   # an unusual signature: no allowance from this call
                pass
        return func(*args, **kwargs)
