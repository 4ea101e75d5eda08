"""The dtype facts rules read, in one import.

  dtype_names.py      which dtype an expression names (`tl.float16`, a constexpr's
                      launch values, a cast's target); UNKNOWN; `describe`
  dtype_promotion.py  which dtype a Triton operation produces from its operands' dtypes
  dtype_flow.py       DtypeFlow: the dtype of a kernel value, of the elements a
                      pointer points into, of a host tensor (host_dtypes.py)
"""

from __future__ import annotations

from kanalyze.analyzer.triton.dtype_flow import DtypeFlow
from kanalyze.analyzer.triton.dtype_names import (INTEGERS, LOW_PRECISION_FLOATS, UNKNOWN, cast_operand, cast_target,
                                                  describe, literal_dtype, resolve_dtypes)
from kanalyze.analyzer.triton.dtype_promotion import SCALAR

__all__ = ["DtypeFlow", "INTEGERS", "LOW_PRECISION_FLOATS", "SCALAR", "UNKNOWN", "cast_operand", "cast_target",
           "describe", "literal_dtype", "resolve_dtypes"]
