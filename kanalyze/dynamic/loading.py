"""Loading a problem at given sizes and a candidate, inside a worker (imports torch).

A problem's size knobs are its module-level integers: the module is executed
with those assignments replaced (`NAME = 4096` → `NAME = 64`), so that values
derived from them at import time follow.  The candidate is imported from its
file (Triton needs the source file for `inspect`), once per worker; one that
builds CUDA C++ (`load_inline`) builds through the shared cache of extensions.py.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import sys
import time
import types

import torch

from kanalyze.dynamic.knobs import built_from_init_inputs, read_knobs, set_knobs
from kanalyze.dynamic.sandbox import extensions

_counter = 0


def _fresh_name(stem: str) -> str:
    global _counter
    _counter += 1
    return f"kanalyze_{stem}_{_counter}"


def load_problem(path: str, sizes: dict[str, int]) -> tuple[types.ModuleType, bool]:
    """The problem's module run with `sizes` for its knobs, and whether its `Model` reads a size
    other than through its init inputs (knobs.built_from_init_inputs)."""
    source = open(path, encoding="utf-8").read()
    tree = ast.parse(source, filename=path)
    sized_model = not built_from_init_inputs(tree, read_knobs(tree))
    set_knobs(tree, sizes)
    name = _fresh_name("problem")
    module = types.ModuleType(name)
    module.__file__ = os.path.abspath(path)
    sys.modules[name] = module
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.append(directory)
    exec(compile(tree, module.__file__, "exec"), module.__dict__)
    return module, sized_model


def load_candidate(path: str) -> types.ModuleType:
    extensions.keep_root()
    if extensions.builds_at_import(path):
        extensions.install()
    name = _fresh_name("candidate")
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.append(directory)
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _accepts(fn, parameter: str) -> bool:
    try:
        return parameter in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class Problem:
    """The reference side of a harness at one set of sizes."""

    def __init__(self, harness: dict, sizes: dict[str, int], dtype: str | None) -> None:
        self.kind = harness["kind"]
        self.module, sized_model = load_problem(harness["problem"], sizes)
        # Whether its model depends on the sizes other than through its init inputs: then a model
        # is kept per sizes, else per init inputs (cases.model_key).
        self.sized_model = self.kind == "contract" or sized_model
        self.dtype = getattr(torch, dtype) if dtype else None

    def init_inputs(self) -> list:
        if self.kind == "contract":
            return []
        return list(self.module.get_init_inputs())

    def inputs(self) -> list:
        get_inputs = self.module.get_inputs
        if self.dtype is not None and _accepts(get_inputs, "dtype"):
            return list(get_inputs(dtype=self.dtype))
        return list(get_inputs())

    def model(self, init_inputs: list):
        if self.kind == "contract":
            return self.module.reference
        return self.module.Model(*init_inputs)


def build_candidate(module: types.ModuleType, harness: dict, init_inputs: list):
    if harness["kind"] == "contract":
        return getattr(module, harness["callable"])
    cls = getattr(module, "ModelNew", None)
    if cls is None:
        raise LookupError("the candidate defines no `ModelNew`")
    return cls(*init_inputs)


def built_on(device: str, build, reseed, seconds: dict | None = None):
    """What `build()` makes, its tensors made on `device` where they can be (a GPU draws a model's
    gigabytes of weights in milliseconds, where the CPU took seconds per model); where building
    there fails (a constructor that needs the CPU: `.numpy()`, a CPU-only op), built again after
    `reseed()`, on the CPU, and moved.  The failed attempt's time goes to `seconds`, as
    `model_build_refused` (the build's account: a model built twice shows)."""
    if device != "cpu":
        started = time.perf_counter()
        try:
            with torch.device(device):
                return move(build(), device)
        except Exception:
            if seconds is not None:
                seconds["model_build_refused"] = round(time.perf_counter() - started, 3)
            reseed()
    return move(build(), device)


def move(model, device: str):
    if isinstance(model, torch.nn.Module):
        return model.to(device)
    return model


def load_matching_state(model, state: dict[str, torch.Tensor]) -> bool:
    """Give the candidate the reference's parameters where both have the same ones."""
    if not isinstance(model, torch.nn.Module) or not state:
        return False
    own = model.state_dict()
    if set(own) != set(state) or any(own[k].shape != state[k].shape for k in own):
        return False
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})
    return True
