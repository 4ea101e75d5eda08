"""Input distributions and injected special values (reference worker side; imports torch).

The problem's `get_inputs()` gives shapes, dtypes and its own values
("given"); a distribution replaces the values of every floating input, keeping
shape and dtype, and the structure the problem built into them: an element
that is exactly zero stays zero (a `torch.tril` input stays lower-triangular,
a mask keeps its holes), and a square matrix equal to its transpose stays
symmetric.  Integer inputs (indices, labels) are never touched.

* normal        standard normal
* uniform       uniform on [0, 1), what most KernelBench `get_inputs` use
* heavy_tailed  Student t with 2 degrees of freedom (rare huge values)
* large         normal scaled near the top of the dtype's comfortable range
* mixed_sign    magnitudes spread over six decades, either sign
* common_mean   1 + 0.1·normal: long sums of these grow large (PRC002)
* subnormal     magnitudes below the dtype's smallest normal number (EXC002)

Specials ("nan", "+inf", "-inf") go into about one element in 64 of every
floating input, at positions drawn from the case's seed, and keep the same structure:
never where the problem's input is exactly zero (a NaN in the zero triangle of a
`torch.triu` input is no input the problem makes, and a kernel that skips that triangle
was confirmed for it), and at (j, i) too where it is symmetric.
"""

from __future__ import annotations

import torch

DISTRIBUTIONS = ("given", "normal", "uniform", "heavy_tailed", "large", "mixed_sign", "common_mean", "subnormal")
_LARGE = {torch.float16: 32.0, torch.bfloat16: 1e4, torch.float32: 1e4, torch.float64: 1e6}
SPECIALS = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf")}


def _draw(distribution: str, shape, dtype, generator: torch.Generator) -> torch.Tensor:
    device = generator.device

    def normal():
        return torch.randn(shape, generator=generator, dtype=torch.float64, device=device)

    if distribution == "normal":
        values = normal()
    elif distribution == "uniform":
        values = torch.rand(shape, generator=generator, dtype=torch.float64, device=device)
    elif distribution == "heavy_tailed":
        chi2 = (normal() ** 2 + normal() ** 2) / 2
        values = (normal() / chi2.sqrt()).clamp(-1e4, 1e4)
    elif distribution == "large":
        values = normal() * _LARGE.get(dtype, 1e4)
    elif distribution == "mixed_sign":
        magnitude = 10.0 ** (torch.rand(shape, generator=generator, dtype=torch.float64, device=device) * 6 - 3)
        sign = torch.where(torch.rand(shape, generator=generator, dtype=torch.float64, device=device) < 0.5, -1.0, 1.0)
        values = magnitude * sign
    elif distribution == "common_mean":
        values = 1.0 + 0.1 * normal()
    elif distribution == "subnormal":
        tiny = torch.finfo(dtype).tiny
        fraction = torch.rand(shape, generator=generator, dtype=torch.float64, device=device) * 0.9 + 0.05
        sign = torch.where(torch.rand(shape, generator=generator, dtype=torch.float64, device=device) < 0.5, -1.0, 1.0)
        values = sign * fraction * tiny
    else:
        raise ValueError(f"unknown input distribution {distribution!r}")
    return values.to(dtype)


def _symmetric(given: torch.Tensor) -> bool:
    return given.dim() >= 2 and given.shape[-1] == given.shape[-2] and given.shape[-1] > 1 \
        and torch.equal(given, given.transpose(-1, -2))


def keep_structure(given: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """`drawn` with the zeros of `given` and, where `given` is symmetric, made symmetric."""
    out = torch.where(given == 0, torch.zeros((), dtype=drawn.dtype, device=drawn.device), drawn)
    if _symmetric(given):
        out = torch.tril(out) + torch.tril(out, -1).transpose(-1, -2)
    return out


def inject(given: torch.Tensor, tensor: torch.Tensor, value: float, generator: torch.Generator) -> torch.Tensor:
    """`tensor` with `value` in about one in 64 of the elements `given` does not hold at zero
    (every element, where it holds all of them at zero), mirrored where `given` is symmetric."""
    free = (given.reshape(-1) != 0).nonzero().flatten()
    if free.numel() == 0:
        free = torch.arange(given.numel(), device=given.device)
    chosen = free[torch.randperm(free.numel(), generator=generator, device=given.device)[:max(1, free.numel() // 64)]]
    mask = torch.zeros(given.numel(), dtype=torch.bool, device=given.device)
    mask[chosen] = True
    mask = mask.view(given.shape)
    if _symmetric(given):
        mask = mask | mask.transpose(-1, -2)
    return tensor.masked_fill(mask, value)


def apply(inputs: list, distribution: str, special: str | None, seed: int) -> list:
    """The inputs with new values for every floating tensor; specials injected."""
    generators: dict = {}   # one per device: values are drawn where they are used

    def generator_for(device) -> torch.Generator:
        if device not in generators:
            generators[device] = torch.Generator(device=device).manual_seed(seed * 7919 + 17)
        return generators[device]

    out = []
    for value in inputs:
        if not (isinstance(value, torch.Tensor) and value.is_floating_point()):
            out.append(value)
            continue
        tensor = value
        generator = generator_for(value.device)
        if distribution != "given":
            drawn = _draw(distribution, tuple(value.shape), value.dtype, generator)
            tensor = keep_structure(value, drawn)
        if special is not None and tensor.numel() > 0:
            tensor = inject(value, tensor, SPECIALS[special], generator)
        out.append(tensor)
    return out
