"""Resolving local names to the dotted names of what they were imported as.

`tl.dot` becomes `triton.language.dot` after `import triton.language as tl`;
`F.relu` becomes `torch.nn.functional.relu` after `import torch.nn.functional as F`.
Rules compare qualified names, so aliases never hide a pattern.
"""

from __future__ import annotations

import libcst as cst

# Names a kernel file uses without importing them the usual way.  `tl` in
# particular is so universal that a helper file that forgot the import is
# still read as Triton.
_IMPLICIT = {"tl": "triton.language", "triton": "triton", "torch": "torch"}

# Modules that re-export one another: normalise to one spelling.
_CANONICAL_PREFIXES = (
    ("triton.language.core.", "triton.language."),
    ("triton.language.math.", "triton.language."),
    ("triton.language.standard.", "triton.language."),
    ("triton.runtime.jit.", "triton."),
    ("triton.runtime.", "triton."),
    ("torch.nn.functional.", "torch.nn.functional."),
)


def dotted(expr: cst.BaseExpression) -> str | None:
    """`a.b.c` as a string, or None for anything that is not a plain name chain."""
    parts: list[str] = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if isinstance(expr, cst.Name):
        parts.append(expr.value)
        return ".".join(reversed(parts))
    return None


class ImportMap:
    """Local name → fully qualified name, collected from import statements."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}

    def add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.aliases[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.aliases[head] = head

    def add_import_from(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted(node.module)
        if module is None:
            return
        for alias in node.names:
            name = dotted(alias.name)
            if name is None:
                continue
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.aliases[local] = f"{module}.{name}"

    def qualify(self, expr: cst.BaseExpression) -> str | None:
        """The qualified name of a name chain, or None when it is not one."""
        name = dotted(expr)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        base = self.aliases.get(head) or _IMPLICIT.get(head)
        if base is None:
            return name
        full = f"{base}.{rest}" if rest else base
        for prefix, canonical in _CANONICAL_PREFIXES:
            if full.startswith(prefix):
                full = canonical + full[len(prefix):]
                break
        return full

    def refers_to_triton(self) -> bool:
        return any(v == "triton" or v.startswith("triton.") for v in self.aliases.values())
