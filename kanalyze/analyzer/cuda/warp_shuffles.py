"""Values combined across a warp by shuffles: `__shfl_xor_sync(mask, v, o)` of a value `v`,
and the device helpers that do nothing else with their one parameter:

    __device__ float warp_sum(float v) {
        for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);
        return v;
    }

`reducer_kind(bounds, "warp_sum")` is "sum" (`v += shuffle of v`), "max" for
`v = fmaxf(v, shuffle of v)`, None for any other helper.
"""

from __future__ import annotations

import tree_sitter as ts

from kanalyze.analyzer.cuda.values import walk

SHUFFLES = frozenset({"__shfl_xor_sync", "__shfl_down_sync", "__shfl_up_sync", "__shfl_sync"})
MAXIMA = frozenset({"fmaxf", "fmax", "max", "std::max", "::max"})


def shuffle_of(bounds, node: ts.Node | None, own: str) -> bool:
    """Is `node` a shuffle of `own` (`__shfl_down_sync(mask, own, ...)`)?  `bounds` reads calls
    (lower_bounds' `call`: the unit's own `max` is not the math library's)."""
    node = bare(node)
    if node is None or node.type != "call_expression":
        return False
    callee, args = bounds.call(node)
    return callee in SHUFFLES and len(args) >= 2 and bounds.cuda.text(args[1]) == own


def reducer_kind(bounds, name: str) -> str | None:
    """"sum" or "max" for a device helper of one by-value parameter that only combines it
    with warp shuffles of itself and returns it; None for anything else."""
    cuda = bounds.cuda
    helpers = [f for f in cuda.functions if f.name == name and f.is_device and f.body is not None]
    if len(helpers) != 1 or len(helpers[0].params) != 1:
        return None
    helper, parameter = helpers[0], helpers[0].params[0]
    if parameter.ctype.pointers or "&" in cuda.text(parameter.node.parent or parameter.node):
        return None
    own = parameter.name
    kinds = set()
    for node in walk(helper.body):
        if node.type == "return_statement":
            value = bare(node.named_children[0]) if node.named_children else None
            if value is None or cuda.text(value) != own:
                return None
        elif node.type in ("assignment_expression", "update_expression"):
            target = bare(node.child_by_field_name("left") or node.child_by_field_name("argument"))
            if target is None or target.type != "identifier":
                return None
            if cuda.text(target) != own:
                if not _loop_counter(node):
                    return None
                continue
            kind = _step(bounds, node, own)
            if kind is None:
                return None
            kinds.add(kind)
    return kinds.pop() if len(kinds) == 1 else None


def _step(bounds, node: ts.Node, own: str) -> str | None:
    """`own += shuffle of own` → "sum"; `own = max(own, shuffle of own)` → "max"."""
    if node.type != "assignment_expression":
        return None
    cuda = bounds.cuda
    op, right = cuda.text(node.child_by_field_name("operator")), bare(node.child_by_field_name("right"))
    if op == "+=" and shuffle_of(bounds, right, own):
        return "sum"
    if op == "=" and right is not None and right.type == "call_expression":
        callee, args = bounds.call(right)
        others = [a for a in args if cuda.text(a) != own]
        if callee in MAXIMA and len(args) == 2 and len(others) == 1 and shuffle_of(bounds, others[0], own):
            return "max"
    return None


def _loop_counter(node: ts.Node) -> bool:
    """The update of a `for` header (`offset /= 2`)."""
    parent = node.parent
    update = parent.child_by_field_name("update") if parent is not None and parent.type == "for_statement" else None
    return update is not None and update.id == node.id


def bare(node: ts.Node | None) -> ts.Node | None:
    """The expression inside parentheses."""
    while node is not None and node.type == "parenthesized_expression":
        node = node.named_children[0] if node.named_children else None
    return node
