"""Where an injected special reaches the reference only through a product with zero
(kanalyze/dynamic/sandbox/dependence.py): the class the product itself has, from stand-in runs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kanalyze.dynamic import inputs  # noqa: E402
from kanalyze.dynamic.compare import NO_CLASS  # noqa: E402
from kanalyze.dynamic.sandbox.dependence import ThroughZero, stand_ins  # noqa: E402


def _other_classes(model, values: list, special: str) -> torch.Tensor | None:
    injected = inputs.apply(values, "given", special, seed=5)
    result: dict = {}
    arrays: dict = {}
    ThroughZero().mark(model, injected, model(*injected), {"sizes": {}, "seed": 1, "distribution": "given",
                                                            "special": special}, "cpu", None, result, arrays)
    return torch.as_tensor(arrays["zero_0"]) if "output_through_zero" in result else None


def _triangular(n: int = 48) -> list:
    generator = torch.Generator().manual_seed(0)
    return [torch.triu(torch.rand(n, n, generator=generator)) for _ in range(2)]


def _structural(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The product of two upper-triangular matrices summed over i <= k <= j only, in float64."""
    n = a.shape[0]
    out = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(i, n):
            out[i, j] = (a[i, i:j + 1].double() * b[i:j + 1, j].double()).sum()
    return out


@pytest.mark.parametrize("special", ["nan", "+inf", "-inf"])
def test_a_triangular_product_has_its_own_class_where_the_dense_reference_has_nan(special) -> None:
    def model(a, b):
        return torch.triu(a @ b)

    values = _triangular()
    injected = inputs.apply(values, "given", special, seed=5)
    dense, product = model(*injected), _structural(*injected)
    other = _other_classes(model, values, special)
    assert other is not None
    as_class = torch.where(torch.isnan(product), 1, torch.where(torch.isinf(product), torch.where(product > 0, 2, 3), 0))
    differ = as_class != torch.where(torch.isnan(dense), 1, torch.where(torch.isinf(dense), torch.where(dense > 0, 2, 3), 0))
    assert differ.any()
    # Wherever the product's class is not the dense reference's, the stand-ins found the product's.
    assert torch.equal(other.long()[differ], as_class[differ])


def test_a_softmax_and_a_relu_have_no_class_but_the_reference_s() -> None:
    """Their response to the stand-ins is no polynomial of degree two (exp, a kink): NaN stays
    the only class where the reference has it."""
    x = [torch.randn(8, 64, generator=torch.Generator().manual_seed(1))]
    for model in (lambda t: torch.softmax(t, dim=-1), torch.relu):
        for special in ("nan", "+inf", "-inf"):
            other = _other_classes(model, x, special)
            assert other is None or bool((other == NO_CLASS).all()), (model, special)


def test_stand_ins_replace_only_the_injected_elements_and_keep_strides() -> None:
    x = torch.randn(4, 6).t()
    x[1, 2], x[3, 0] = float("nan"), float("-inf")
    y = stand_ins([x], 1.0)[0]
    assert y.stride() == x.stride() and torch.isfinite(y).all()
    assert y[1, 2] == 1024.0 * (1 + 6 / 8) and y[3, 0] == 1024.0 * (1 + 5 / 8)   # row-major positions 6, 12
    kept = torch.isfinite(x)
    assert torch.equal(y[kept], x[kept])
