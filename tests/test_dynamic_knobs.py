"""A problem's size knobs: module-level integers, constant expressions included (dynamic/knobs.py)."""

from __future__ import annotations

import ast
import textwrap

from kanalyze.dynamic.cases import keeping_whole, scaled_knobs
from kanalyze.dynamic.knobs import built_from_init_inputs, constant_int, read_knobs, set_knobs

PROBLEM = textwrap.dedent("""
    batch_size = 8192 * 2
    dim = 2 ** 20
    M: int = 1024 * 16 - 1
    dim2 = dim * 2          # follows `dim`: not a knob of its own
    scale = 0.5
    _private = 7
    huge = 10 ** 400
    shift = 1 << 100
""")


def test_constant_expressions_are_knobs() -> None:
    assert read_knobs(ast.parse(PROBLEM)) == {"batch_size": 16384, "dim": 1048576, "M": 16383}


def test_no_expression_is_evaluated_beyond_sizes() -> None:
    for text in ("2 ** 10000", "1 << 10000", "1 // 0", "4 % 0", "x + 1", "len('abc')", "2.0 * 3", "-(2 ** 64)"):
        assert constant_int(ast.parse(text, mode="eval").body) is None, text
    assert constant_int(ast.parse("-(3 - 5) * 4", mode="eval").body) == 8


def test_set_knobs_rewrites_expressions_and_the_module_runs_with_them() -> None:
    tree = ast.parse(PROBLEM)
    set_knobs(tree, {"batch_size": 16, "dim": 32})
    namespace: dict = {}
    exec(compile(tree, "problem.py", "exec"), namespace)
    assert (namespace["batch_size"], namespace["dim"], namespace["dim2"], namespace["M"]) == (16, 32, 64, 16383)


def test_keeping_one_knob_whole_shrinks_the_others() -> None:
    original = {"batch_size": 128, "dim": 8192}
    base = {"batch_size": 128, "dim": 512}
    assert scaled_knobs(base, original) == ["dim"]
    whole = keeping_whole(base, original, "dim", 2 ** 16)
    assert whole == {"batch_size": 8, "dim": 8192}


def test_new_values_keep_the_structure_the_problem_built() -> None:
    import torch

    from kanalyze.dynamic.inputs import apply

    torch.manual_seed(0)
    lower = torch.tril(torch.randn(6, 6))
    symmetric = torch.randn(5, 5)
    symmetric = symmetric + symmetric.T
    masked = torch.randn(4, 8) * (torch.rand(4, 8) > 0.5)
    for distribution in ("normal", "large", "mixed_sign", "common_mean", "subnormal"):
        new_lower, new_symmetric, new_masked = apply([lower, symmetric, masked], distribution, None, seed=3)
        assert torch.equal(new_lower, torch.tril(new_lower)) and not torch.equal(new_lower, lower)
        assert torch.equal(new_symmetric, new_symmetric.T) and not torch.equal(new_symmetric, symmetric)
        assert torch.equal(new_masked == 0, masked == 0)
    # Injected specials keep it too: QwQ's level1_14, a matmul of upper-triangular inputs that
    # skips their zero triangle, was confirmed EXC001 for a NaN put where the problem has a zero.
    upper = torch.triu(torch.randn(64, 64))
    for distribution in ("given", "normal"):
        new_upper, new_symmetric, new_masked = apply([upper, symmetric, masked], distribution, "nan", seed=3)
        assert new_upper.isnan().sum() == (64 * 65 // 2) // 64 and not new_upper.tril(-1).isnan().any()
        assert new_symmetric.isnan().any() and torch.equal(new_symmetric.isnan(), new_symmetric.isnan().T)
        assert new_masked.isnan().any() and not new_masked[masked == 0].isnan().any()
    zeros = torch.zeros(3, 64)   # held at zero everywhere (an initial state): the special goes anywhere
    assert apply([zeros], "given", "+inf", seed=3)[0].isinf().sum() == 3


# --- which sizes a problem's model is built from ---------------------------------------

HEADER = "import torch\nimport torch.nn as nn\nbatch_size = 128\ndim = 4096\nhidden = dim * 4\n"
TAIL = "\ndef get_inputs():\n    return [torch.rand(batch_size, dim)]\n\ndef get_init_inputs():\n    return [dim]\n"


def _built_from_init_inputs(model: str) -> bool:
    tree = ast.parse(HEADER + textwrap.dedent(model) + TAIL)
    return built_from_init_inputs(tree, read_knobs(tree))


def test_a_model_built_from_its_init_inputs_alone_serves_every_batch_size() -> None:
    # `dim` here is __init__'s parameter, not the module's size: one model for every batch size
    assert _built_from_init_inputs("""
        class Model(nn.Module):
            def __init__(self, dim: int = 1):
                super().__init__()
                self.linear = nn.Linear(dim, dim)
                self.batch_size = [batch_size for batch_size in (1, 2)]   # a comprehension's own name

            def forward(self, x):
                dim = x.shape[-1]
                return self.linear(x).view(-1, dim)
    """)


def test_a_model_that_reads_a_size_of_the_module_is_kept_per_sizes() -> None:
    reads = {
        "in __init__": "def __init__(self, d):\n        super().__init__()\n        self.h = torch.zeros(batch_size, d)\n",
        "in forward": "def forward(self, x):\n        return x.view(batch_size, -1)\n",
        "a name computed from a size": "def __init__(self, d):\n        super().__init__()\n        self.n = hidden\n",
        "in the class body": "width = dim\n",
        "a default argument": "def __init__(self, d=dim):\n        super().__init__()\n",
    }
    for where, body in reads.items():
        assert not _built_from_init_inputs("class Model(nn.Module):\n    " + body.replace("\n", "\n    ")), where
    helper = """
        def make(d):
            return nn.Linear(d, batch_size)

        class Block(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.net = make(d)

        class Model(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.block = Block(d)
    """
    assert not _built_from_init_inputs(helper), "through a class and a function it names"
    assert not _built_from_init_inputs("Model = None\n"), "no Model class: kept per sizes"


def test_a_tuple_of_sizes_is_a_knob_per_element() -> None:
    """`input_shape = (32768,)` sizes an input as `batch_size` does: scaled on the CPU and perturbed
    like any knob (measured: left whole, a case at the problem's batch size asked for 32768²)."""
    problem = textwrap.dedent("""
        batch_size = 32768
        input_shape = (32768,)
        kernel_size = (3, 5 * 2)
        mixed = (3, dim)            # a name inside: not a size tuple
        _hidden = (7,)

        class Model:
            def __init__(self):
                self.shape = input_shape
    """)
    tree = ast.parse(problem)
    assert read_knobs(tree) == {"batch_size": 32768, "input_shape[0]": 32768, "kernel_size[0]": 3,
                                "kernel_size[1]": 10}
    set_knobs(tree, {"input_shape[0]": 64, "kernel_size[1]": 9})
    namespace: dict = {"dim": 1}
    exec(compile(tree, "problem.py", "exec"), namespace)
    assert (namespace["input_shape"], namespace["kernel_size"], namespace["batch_size"]) == ((64,), (3, 9), 32768)
    # a Model that reads a tuple size is built per sizes, as one reading an integer size is
    assert not built_from_init_inputs(ast.parse(problem), read_knobs(ast.parse(problem)))


def test_sizes_unpacked_from_a_tuple_are_a_knob_each() -> None:
    """KernelBench writes `height, width = 128, 128` in 24 of the development corpus's 146 problems:
    each name is a size the harness scales and CMP003 perturbs (on an H100, level2_92's "every
    size 1" left its 128 × 128 images whole).  A starred target or lengths that differ are not
    read; a name inside is no knob of its own."""
    problem = textwrap.dedent("""
        depth, height, width = 16, 32 * 2, 32
        first, *rest = 1, 2, 3
        channels, groups = 64, depth // 4
        _private, public = 5, 6
    """)
    tree = ast.parse(problem)
    assert read_knobs(tree) == {"depth": 16, "height": 64, "width": 32, "channels": 64, "public": 6}
    assert read_knobs(ast.parse("a, b = 1, 2, 3")) == {}
    set_knobs(tree, {"height": 9, "width": 7})
    namespace: dict = {}
    exec(compile(tree, "problem.py", "exec"), namespace)
    assert (namespace["depth"], namespace["height"], namespace["width"]) == (16, 9, 7)
