"""Which blocks of a document must be analyzed together (layout.py cuts, blocks.py reads).

The blocks that are `def`s and `class`es are *units*; a group of units analyzed
together is a *component*; the other blocks are the *context*, which every piece
holds, and units can join the context too.  Two units are joined when:
  - one mentions a name of the other (a wrapper names its kernel, a class the
    wrappers it calls, a function the module global another one writes);
  - they share a key (a class name, a jit function's name, their own name:
    the model keeps facts per name, and a second definition replaces the first);
  - one pins the shape of a tensor that the other passes bare to a launch
    (CMP003 matches the two by name, wherever they are).
A unit joins the context when the context mentions one of its names, when it
mentions a name of the context's (a `def` or class the context holds, a name a
context statement binds to something that mentions a unit: `k = triton.jit(_k)`,
`apply = Fn.apply`), when it shares a key with the context, and when it is pinned:
  - a unit that defines `class ModelNew`: PRC001 reads "does the file define
    ModelNew" wherever it asks whether a kernel runs;
  - the unit that holds the first launch on the candidate path, and every unit
    before it with a call the model may record as a launch: RES001 names that
    launch in its messages, and reports only when the candidate path is not empty.
So every piece holds what the whole file says about its units.  What cannot be
placed this way leaves the text whole (`file_wide` says why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import libcst as cst

from kanalyze.analyzer.names import ImportMap
from kanalyze.analyzer.triton.entities import JIT_DECORATORS
from kanalyze.lsp.blocks import BlockFacts

# An Ascend module (analyzer/triton/backends.py) is one whose kernels default to IEEE dots: a word
# that says Ascend or NPU in a unit (`torch.npu.synchronize()`, `import torch_npu`) is file-wide,
# unless the module's own imports already say it.
_ASCEND_WORD = re.compile(r"(^|_)(ascend|npu)(_|$)", re.IGNORECASE)


@dataclass
class Joined:
    """The context (its own blocks and the units that joined it) and the components, in document order."""

    context: list
    components: list[list]


def file_wide(blocks: list, units: list, jit_names: set[str], aliases: dict[str, str]) -> str | None:
    """Why the text cannot be cut: a fact that every piece would need and no unit can carry."""
    module_imports = [full for b in blocks if b.facts.name is None for _, full in b.facts.imports]
    ascend = any(_ASCEND_WORD.search(part) for full in module_imports for part in full.split("."))
    if not ascend and any(_ASCEND_WORD.search(word) for unit in units for word in unit.facts.tokens):
        return "a word naming Ascend or an NPU in a function or class (the backend is file-wide)"
    launches = possible_launches(blocks, aliases)
    if launches and not any(launch.sure and launch.name in jit_names for _, launch in launches):
        return "calls that may be launches, and none surely a launch on the candidate path"
    if not launches and any(block.facts.defines_forward for block in blocks):
        return "a `forward` or `__call__` that launches no kernel (the forward path is file-wide)"
    return None


def possible_launches(blocks: list, aliases: dict[str, str]) -> list[tuple]:
    """(block, call) for every call the model may record as a launch: of a name that
    `@triton.jit` or `X = triton.jit(f)` binds somewhere in the file, in document order."""
    jit_like = set().union(*(jit_bound(b.facts, aliases) for b in blocks))
    return [(block, launch) for block in sorted(blocks, key=lambda b: b.start)
            for launch in block.facts.launches if launch.possible and launch.name in jit_like]


def join(blocks: list, units: list, aliases: dict[str, str], jit_names: set[str]) -> Joined:
    """The context and the components of `blocks` (`units` among them)."""
    context_blocks = [b for b in blocks if b.facts.name is None]
    context_map = ImportMap()
    context_map.aliases = {local: full for b in context_blocks for local, full in b.facts.imports}
    names = {id(u): _unit_names(u, context_map, aliases) for u in units}
    keys = {id(u): u.facts.keys | jit_bound(u.facts, aliases) for u in units}
    by_name: dict[str, list[int]] = {}
    by_key: dict[str, list[int]] = {}
    by_argument: dict[str, list[int]] = {}
    for index, unit in enumerate(units):
        for name in names[id(unit)] | unit.facts.writes:
            by_name.setdefault(name, []).append(index)
        for key in keys[id(unit)]:
            by_key.setdefault(key, []).append(index)
        for argument in unit.facts.launch_args:
            by_argument.setdefault(argument, []).append(index)

    context = len(units)  # the context's node in the union-find
    parent = list(range(len(units) + 1))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def link(a: int, b: int) -> None:
        parent[root(a)] = root(b)

    for index, unit in enumerate(units):
        facts = unit.facts
        for word in facts.mentions & by_name.keys():
            for other in by_name[word]:
                link(index, other)
        for key in keys[id(unit)] & by_key.keys():
            for other in by_key[key]:
                link(index, other)
        for tensor in facts.pinned_tensors & by_argument.keys():
            for other in by_argument[tensor]:
                link(index, other)
    for index in _pinned(blocks, units, jit_names, aliases):
        link(index, context)
    # The context: what its blocks mention, what they bind from there, and what mentions that.
    context_names = set().union(*(b.facts.names | b.facts.writes | jit_bound(b.facts, aliases)
                                  for b in context_blocks))
    context_keys = set().union(*(b.facts.keys for b in context_blocks)) | context_names
    context_arguments = set().union(*(b.facts.launch_args for b in context_blocks))
    context_pins = set().union(*(b.facts.pinned_tensors for b in context_blocks))
    unit_names = set(by_name)
    growing = True
    while growing:  # a statement that mentions a unit, or one that does, binds names the context holds
        before = len(context_names)
        for block in context_blocks:
            if (block.facts.mentions - block.facts.bound) & (unit_names | context_names):
                context_names |= block.facts.bound
        growing = len(context_names) != before
    mentioned = set().union(*(b.facts.mentions for b in context_blocks))
    # `_CACHE = {}` mentions the global a function writes, but says nothing that depends on it.
    mentioned_apart = set().union(*(b.facts.mentions - b.facts.bound for b in context_blocks))
    for index, unit in enumerate(units):
        facts = unit.facts
        if (mentioned & names[id(unit)] or mentioned_apart & facts.writes or facts.mentions & context_names
                or keys[id(unit)] & context_keys
                or names[id(unit)] & context_keys or facts.pinned_tensors & context_arguments
                or facts.launch_args & context_pins):
            link(index, context)

    groups: dict[int, list] = {}
    for index, unit in enumerate(units):
        groups.setdefault(root(index), []).append(unit)
    joined_context = context_blocks + groups.pop(root(context), [])
    joined_context.sort(key=lambda b: b.start)
    return Joined(joined_context, sorted(groups.values(), key=lambda group: group[0].start))


def _pinned(blocks: list, units: list, jit_names: set[str], aliases: dict[str, str]) -> list[int]:
    """The units every piece must hold: those defining ModelNew, and the units up to the one
    holding the first launch on the candidate path (file_wide has made sure there is one
    when the model may record any launch)."""
    index_of = {id(u): i for i, u in enumerate(units)}
    pinned = [index_of[id(u)] for u in units if u.facts.defines_model_new]
    for block, launch in possible_launches(blocks, aliases):
        if id(block) in index_of:
            pinned.append(index_of[id(block)])
        if launch.sure and launch.name in jit_names:
            break
    return pinned


def _unit_names(unit, context_map: ImportMap, aliases: dict[str, str]) -> frozenset[str]:
    """A unit's names, with the names it imports inside itself to something the module's own
    imports (or the names every kernel file is read with) do not already name: the import
    map is the file's, so a unit that reads such a name needs the unit that imports it."""
    extra = set()
    for local, full in unit.facts.imports:
        alone = ImportMap()
        alone.aliases = {local: full}
        if context_map.qualify(cst.Name(local)) != alone.qualify(cst.Name(local)):
            extra.add(local)
    return unit.facts.names | extra | jit_bound(unit.facts, aliases)


def jit_bound(facts: BlockFacts, aliases: dict[str, str]) -> frozenset[str]:
    """The names `@triton.jit` and `X = triton.jit(f)` bind anywhere in the block, as the
    model's collector qualifies them with the file's imports (its jit table is the file's)."""
    found = set()
    for alias, callee in facts.jit_bindings:
        head, _, last = callee.rpartition(".")
        if last != "jit" and not (not head and aliases.get(last, "").endswith("jit")):
            continue  # qualifies to nothing ending in `jit`
        imports = ImportMap()
        imports.aliases = aliases
        if imports.qualify(expression(callee)) in JIT_DECORATORS:
            found.add(alias)
    return frozenset(found)


@lru_cache(maxsize=256)
def expression(dotted: str) -> cst.BaseExpression:
    """A dotted name as LibCST reads it, for ImportMap.qualify."""
    return cst.parse_expression(dotted)
