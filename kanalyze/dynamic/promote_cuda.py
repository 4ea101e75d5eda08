"""The PRC002 promotion differential for CUDA C++ candidates (the strings given to `load_inline`).

The counterpart of promote.py's LibCST rewrite, on the text of the Python file
(nothing is parsed or run): a variable declared with one of PyTorch's
half-precision types (`at::Half`, `c10::Half`, `at::BFloat16`,
`c10::BFloat16`) that a `+=` accumulates into (`sum += row[j]`,
`partial[t] += partial[t + s]`) is declared `float` instead.  Those types
convert to and from float implicitly, so the loads and the final store compile
unchanged and only the accumulation is widened.  Only the accumulators of the
flagged lines are promoted (all of them when no line is given).

CUDA's own `__half` / `__nv_bfloat16` are left alone: torch builds extensions
with their implicit conversions switched off (`-D__CUDA_NO_HALF_CONVERSIONS__`),
so a float accumulator would not compile without rewriting the arithmetic too.
"""

from __future__ import annotations

import re

HALF_TYPE = r"\b(?:at|c10)::(?:Half|BFloat16)\b"
_DECLARATION = re.compile(rf"(?P<type>{HALF_TYPE})(?P<rest>\s+(?P<name>[A-Za-z_]\w*)\s*(?:\[[^\]\n]*\]\s*)?[=;{{])")
_ACCUMULATION = re.compile(r"\b([A-Za-z_]\w*)\s*(?:\[[^\]\n]*\])?\s*\+=")


def promote_cuda_accumulators(source: str, rows: list[int] | None = None) -> tuple[str, list[dict]]:
    """(promoted source, the rewrites made); the source unchanged and [] when nothing applies."""
    lines = source.splitlines(keepends=True)
    wanted = set(rows) if rows else None
    accumulated = {name for row, line in enumerate(lines, start=1)
                   if wanted is None or row in wanted for name in _ACCUMULATION.findall(line)}
    changes: list[dict] = []
    for row, line in enumerate(lines, start=1):
        def widen(match: re.Match, row=row) -> str:
            if match["name"] not in accumulated:
                return match[0]
            changes.append({"row": row, "from": match["type"], "to": "float",
                            "why": f"`{match['name']}` accumulates with `+=`"})
            return "float" + match["rest"]

        lines[row - 1] = _DECLARATION.sub(widen, line)
    if not changes:
        return source, []
    return "".join(lines), changes
