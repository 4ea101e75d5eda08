"""Host functions of a candidate's file that nothing runs (analyzer/triton/unreached.py)."""

import textwrap

from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.unreached import unreached_functions

HEAD = """
import torch
import torch.nn as nn
"""


def unreached(body: str) -> set[str]:
    model = TritonModule.from_source("candidate.py", HEAD + textwrap.dedent(body))
    ids = unreached_functions(model)
    return {f.qualname for f in model.functions if id(f.node) in ids}


def test_a_method_nothing_names_and_the_helpers_only_it_calls():
    assert unreached("""
        def helper(x):
            return x * 2

        def inner(x):
            return helper(x)

        def api(x):
            return x + 1

        def demo(x):
            return x - 1

        class ModelNew(nn.Module):
            def forward(self, x):
                return x

            def backward(self, dout):
                return inner(dout)

            def debug(self, x):
                return demo(x)

        if __name__ == "__main__":
            ModelNew().debug(torch.ones(2))
            demo(torch.ones(2))
    """) == {"ModelNew.backward", "inner", "helper", "ModelNew.debug"}
    # `api`: nothing names it, it is the file's interface; `demo`: its `__main__` block calls it.


def test_what_may_run_without_being_named_stays_reached():
    assert unreached("""
        import atexit

        class ModelNew(nn.Module):
            def forward(self, x):
                return getattr(self, "scaled")(x)

            def scaled(self, x):
                return x * 2

            def extra_repr(self):
                return "model"

            @atexit.register
            def on_exit():
                pass

            def _fuse(self, x):
                return self._fuse(x)   # names itself only: still unreached
    """) == {"ModelNew._fuse"}


def test_a_model_over_another_module_class_is_not_judged():
    assert unreached("""
        class ModelNew(nn.Linear):
            def reset_parameters(self):
                pass

            def backward(self, dout):
                return dout
    """) == set()
    assert unreached("""
        class Model(nn.Module):
            def backward(self, dout):
                return dout
    """) == set()   # not a candidate's file
