"""The interpreter hooks, pinned: program order, out-of-bounds reports, TF32 emulation.

Each check runs in a subprocess with TRITON_INTERPRET=1 set before triton is
imported, as in a worker (the test process may have imported triton already).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import torch
import triton
import triton.language as tl
from kanalyze.dynamic.interpreter import CHECKED_TRITON, InterpreterDriver, OutOfBounds, check_hooks

check_hooks()
driver = InterpreterDriver()
out = {"version": triton.__version__, "checked": list(CHECKED_TRITON)}

@triton.jit
def order_kernel(counter_ptr, order_ptr):
    ticket = tl.atomic_add(counter_ptr, 1)
    tl.store(order_ptr + ticket, tl.program_id(0) * 3 + tl.program_id(1))

def order(seed):
    driver.reset(seed, False)
    counter = torch.zeros(1, dtype=torch.int32)
    seen = torch.full((12,), -1, dtype=torch.int32)
    order_kernel[(4, 3)](counter, seen)
    return seen.tolist()
out["orders"] = [order(None), order(None), order(1), order(1), order(2)]

@triton.jit
def copy_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))

driver.reset(None, False)
x = torch.arange(100, dtype=torch.float32)
y = torch.empty(128)
try:
    copy_kernel[(4,)](x, y, BLOCK=32)
    out["oob"] = None
except Exception:
    out["oob"] = driver.out_of_bounds

@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, IEEE: tl.constexpr):
    offs = tl.arange(0, 16)
    a = tl.load(a_ptr + offs[:, None] * 16 + offs[None, :])
    b = tl.load(b_ptr + offs[:, None] * 16 + offs[None, :])
    if IEEE:
        c = tl.dot(a, b, input_precision="ieee")
    else:
        c = tl.dot(a, b)
    tl.store(c_ptr + offs[:, None] * 16 + offs[None, :], c)

a, b = torch.randn(16, 16), torch.randn(16, 16)
exact = (a.double() @ b.double())
errors = {}
for emulate in (False, True):
    for ieee in (False, True):
        driver.reset(None, emulate)
        c = torch.empty(16, 16)
        dot_kernel[(1,)](a, b, c, IEEE=ieee)
        errors[f"{emulate}-{ieee}"] = [float((c.double() - exact).abs().max()), driver.tf32_dots]
out["dot"] = errors

@triton.jit
def rows_kernel(x_ptr, o_ptr, M, K, G: tl.constexpr, B: tl.constexpr):
    offs = tl.arange(0, B)
    in_row = offs < K
    acc = tl.zeros((B,), dtype=tl.float32)
    for i in range(G):
        row = tl.program_id(0) * G + i
        acc += tl.load(x_ptr + row * K + offs, mask=in_row & (row < M), other=0.0)
    tl.store(o_ptr + offs, acc, mask=in_row)

driver.reset(None, False)
x, o = torch.rand(10, 15), torch.zeros(15)
try:
    rows_kernel[(1,)](x, o, 10, 15, G=16, B=16)
    out["scalar_mask"] = float((o - x.sum(0)).abs().max())
except Exception as error:
    out["scalar_mask"] = repr(error)
print(json.dumps(out))
'''


def _run() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_interpreter_hooks() -> None:
    out = _run()
    assert ".".join(out["version"].split(".")[:2]) in out["checked"]

    plain, again, seeded, seeded_again, other = out["orders"]
    assert plain == list(range(12)) == again                    # launch order: x outer, y inner
    assert sorted(seeded) == list(range(12)) and seeded != plain  # a permutation of the grid
    assert seeded == seeded_again and other != seeded            # reproducible per seed

    oob = out["oob"]
    assert oob is not None, "an unmasked load past the end must be reported"
    assert oob["program_id"] == [3, 0, 0] and oob["tensor"] == "x_ptr" and oob["element_offset"] == 100
    assert oob["numel"] == 100 and "out-of-bounds load" in oob["message"]

    dot = out["dot"]
    assert dot["False-False"][1] == 0 and dot["False-False"][0] < 1e-4      # the interpreter alone: full fp32
    assert dot["True-False"][1] == 1 and dot["True-False"][0] > 1e-3        # default precision, emulated TF32
    assert dot["True-True"][1] == 0 and dot["True-True"][0] < 1e-4          # input_precision="ieee" untouched

    # A row mask ANDed with a scalar comparison: the compiled kernel takes it; the interpreter's
    # own load refuses its int32 handle ("mask has unsupported dtype"), which must not become
    # the candidate's failure.
    assert out["scalar_mask"] == pytest.approx(0.0, abs=1e-5), out["scalar_mask"]


# What each Triton's interpreter builder passes to the hooked methods, by position.  The hooks
# read the leading arguments (pointers, mask; the dot's precision) and pass the rest on as they
# came: Triton 3.2 to 3.6 give `create_masked_load` six arguments, 3.9 gives five.
BUILDER_SHAPES = {
    "3.2-3.6": {
        "create_masked_load": ("ptrs", "mask", "other", "cache_modifier", "eviction_policy", "is_volatile"),
        "create_masked_store": ("ptrs", "value", "mask", "cache_modifier", "eviction_policy"),
        "create_atomic_rmw": ("op", "ptr", "val", "mask", "sem", "scope"),
        "create_atomic_cas": ("ptr", "cmp", "val", "sem", "scope"),
        "create_dot": ("a", "b", "d", "input_precision", "max_num_imprecise_acc"),
    },
    "3.9": {
        "create_masked_load": ("ptrs", "mask", "other", "cache_policy", "is_volatile"),
        "create_masked_store": ("ptrs", "value", "mask", "cache_policy"),
        "create_atomic_rmw": ("op", "ptr", "val", "mask", "sem", "scope"),
        "create_atomic_cas": ("ptr", "cmp", "val", "sem", "scope"),
        "create_dot": ("a", "b", "d", "input_precision", "max_num_imprecise_acc"),
    },
}


@pytest.mark.parametrize("version", sorted(BUILDER_SHAPES))
def test_hooks_pass_every_version_s_arguments_through(version) -> None:
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as _interp

    from kanalyze.dynamic import interpreter

    received: dict[str, tuple] = {}

    class Builder:  # a builder of this version's shape that records what reaches it
        grid_dim = (1, 1, 1)

        def set_grid_dim(self, nx, ny, nz):
            received["set_grid_dim"] = (nx, ny, nz)

        def set_grid_idx(self, x, y, z):
            received["set_grid_idx"] = (x, y, z)

    for method, params in BUILDER_SHAPES[version].items():
        def record(*args, _method=method, _count=len(params)):
            assert len(args) == _count, f"{_method} got {len(args)} arguments"
            received[_method] = args
        setattr(Builder, method, staticmethod(record))

    builder = Builder()
    driver = interpreter.InterpreterDriver(builder=builder)
    driver._ranges = [interpreter._Range("x", 4096, 4096, 4096 + 64, 4, 16)]
    pointers = _interp.TensorHandle(np.array([4096, 4100], dtype=np.uint64), tl.pointer_type(tl.float32))
    mask = _interp.TensorHandle(np.array([True, True]), tl.int1)
    value = _interp.TensorHandle(np.zeros(2, dtype=np.float32), tl.float32)
    fills = {"ptrs": pointers, "ptr": pointers, "mask": mask, "value": value, "val": value, "cmp": value,
             "a": value, "b": value, "d": value, "input_precision": None}
    for method, params in BUILDER_SHAPES[version].items():
        args = tuple(fills.get(p, f"<{p}>") for p in params)
        getattr(builder, method)(*args)
        assert received[method] == args, (method, received[method])
    builder.set_grid_dim(2, 1, 1)
    builder.set_grid_idx(1, 0, 0)
    assert received["set_grid_dim"] == (2, 1, 1) and received["set_grid_idx"] == (1, 0, 0)
    assert driver.atomics.most == 1            # the float atomic was counted on its way through


def test_a_replaced_helper_of_the_hooks_breaks_the_seal(monkeypatch) -> None:
    """The hooks call their bounds check, mask conversion and TF32 rounding by name: a
    candidate that swaps one (the module is reachable through the hooks' globals) changes
    what every hook does without touching the hooks themselves."""
    pytest.importorskip("triton")
    from kanalyze.dynamic import interpreter

    class Builder:   # any object of the builder's shape: the hooks go on it
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    driver = interpreter.InterpreterDriver(builder=Builder())
    assert driver.tampered() == []
    monkeypatch.setattr(interpreter, "boolean_mask", lambda mask: None)
    assert any("boolean_mask" in line for line in driver.tampered()), driver.tampered()
    monkeypatch.undo()
    assert driver.tampered() == []
    monkeypatch.setattr(interpreter.InterpreterDriver._check, "__code__", (lambda self, *a, **k: None).__code__)
    assert any("_check" in line for line in driver.tampered()), driver.tampered()
