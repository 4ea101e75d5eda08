"""CUDA inside Python: the strings a file hands to `load_inline`, cupy's
`RawKernel`/`RawModule` and `cpp_extension.load`, read without running anything.

`find_extensions(host)` finds each builder call, folds its source arguments
from constants (fold.py) into CudaUnits that map every character back to
the Python file, and records what Python can call on the result, the names it
is bound to and the compiler flags it is built with.  Arguments that are not
constant become `Skipped` notes; the pipeline reports those as one KAN000 per
unit, so a partly read kernel never passes for a fully checked one.
"""

from __future__ import annotations

import libcst as cst

from kanalyze.analyzer.cuda.fold import Folder, concat, int_folded
from kanalyze.analyzer.cuda.sources import (
    LOAD_INLINE_CPP_PRELUDE, LOAD_INLINE_CUDA_PRELUDE, CudaUnit, Extension, Flag, Skipped, SourceMap,
)
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.calls import keyword
from kanalyze.analyzer.triton.model import TritonModule

BUILDERS = {
    "torch.utils.cpp_extension.load_inline": "load_inline",
    "torch.utils.cpp_extension.load": "load",
    "cupy.RawKernel": "RawKernel",
    "cupy.RawModule": "RawModule",
}
FLAG_KEYWORDS = ("extra_cuda_cflags", "extra_cflags", "options")


# --- builders -------------------------------------------------------------------


def builder_of(host: TritonModule, call: cst.Call, qualname: str | None) -> str | None:
    if qualname in BUILDERS:
        return BUILDERS[qualname]
    name = dotted(call.func) or ""
    last = name.rsplit(".", 1)[-1]
    if last in ("load_inline", "RawKernel", "RawModule") and (qualname is None or qualname == name):
        return last  # an unresolved import (`from somewhere import load_inline`) still builds CUDA
    return None


def find_extensions(host: TritonModule) -> list[Extension]:
    """Every builder call in the file, with its units folded from constants."""
    folder = Folder(host)
    extensions: list[Extension] = []
    for site in host.calls:
        builder = builder_of(host, site.node, site.qualname)
        if builder is None:
            continue
        ext = Extension(builder, site.node)
        _bind(host, ext)
        call = site.node
        name = keyword(call, "name", 0 if builder in ("load_inline", "load") else 1 if builder == "RawKernel" else None)
        folded_name = folder.fold(name) if name is not None else None
        ext.name = folded_name.text if folded_name is not None else None
        if builder == "load_inline":
            _functions(folder, keyword(call, "functions"), ext)
            _unit(folder, host, ext, keyword(call, "cpp_sources", 1), "cpp_sources", "c++", LOAD_INLINE_CPP_PRELUDE)
            _unit(folder, host, ext, keyword(call, "cuda_sources", 2), "cuda_sources", "cuda", LOAD_INLINE_CUDA_PRELUDE)
        elif builder == "load":
            sources = keyword(call, "sources", 1)
            items = folder.fold_list(sources) if sources is not None else None
            ext.source_files = [i.text for i in items or () if not i.holes]
        elif builder == "RawKernel":
            ext.functions = [ext.name] if ext.name else []
            _unit(folder, host, ext, keyword(call, "code", 0), "code", "cuda", "")
        else:
            _unit(folder, host, ext, keyword(call, "code"), "code", "cuda", "")
        ext.flags_folded = not any(arg.star == "**" for arg in call.args)
        for kw in FLAG_KEYWORDS:
            value = keyword(call, kw, 2 if builder == "RawKernel" and kw == "options" else None)
            items = folder.fold_list(value) if value is not None else []
            if items is None or any(item.holes for item in items):
                ext.flags_folded = False
            for item in items or []:
                node = item.spans[0].node if item.spans else value
                ext.flags.extend(Flag(kw, flag, node) for flag in item.text.split())
        extensions.append(ext)
    return extensions


def _bind(host: TritonModule, ext: Extension) -> None:
    """The names the built module is stored under, following `self.ext = ext`."""
    parent = host.parent(ext.call)
    if isinstance(parent, cst.Assign):
        ext.bindings.update(filter(None, (dotted(t.target) for t in parent.targets)))
    elif isinstance(parent, (cst.AnnAssign, cst.AugAssign)):
        ext.bindings.update(filter(None, [dotted(parent.target)]))
    changed = True
    while changed:
        changed = False
        for node in host.nodes(cst.Assign):
            source = dotted(node.value)
            if source is None or source not in ext.bindings:
                continue
            for target in node.targets:
                name = dotted(target.target)
                if name and name not in ext.bindings:
                    ext.bindings.add(name)
                    changed = True


def _functions(folder: Folder, value: cst.BaseExpression | None, ext: Extension) -> None:
    if value is None:
        return
    if isinstance(value, cst.Dict):
        keys = [e.key for e in value.elements if isinstance(e, cst.DictElement)]
        items = [folder.fold(k) for k in keys]
    else:
        items = folder.fold_list(value) or []
    ext.functions = [i.text for i in items if i is not None and not i.holes and i.text]


def _unit(folder: Folder, host: TritonModule, ext: Extension, value: cst.BaseExpression | None,
          keyword_name: str, language: str, prelude: str) -> None:
    if value is None or (isinstance(value, cst.Name) and value.value == "None"):
        return
    items = folder.fold_list(value)
    if items is None:
        ext.skipped.append(Skipped(f"`{folder._text(value)}` passed as `{keyword_name}` is not a constant "
                                   f"expression; its source was not read", value))
        return
    folded = concat(items, "\n")
    if not folded.text.strip():
        return
    unit = CudaUnit(host.path, folded.text, f"{ext.builder}:{keyword_name}", language,
                    SourceMap(folded.spans), ext, list(folded.holes), prelude)
    ext.units.append(unit)


def module_int_constants(host: TritonModule) -> dict[str, int]:
    """`N = 4096` at module level: the sizes a KernelBench problem (or a candidate
    that copied them) fixes; CUDA literals equal to one are shape-specialised."""
    sizes: dict[str, int] = {}
    for statement in host.module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Assign) and isinstance(small.value, cst.Integer):
                for target in small.targets:
                    if isinstance(target.target, cst.Name):
                        folded = int_folded(small.value)
                        if folded is not None:
                            sizes[target.target.value] = int(folded.text)
    return sizes
