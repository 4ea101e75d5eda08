"""What a launch unpacks from a params object: `kernel(*params.args())`.

A host function may gather a kernel's arguments in an object whose class declares them
as `__slots__`, and unpack them all at the launch:

    class FwdParams:
        __slots__ = ("q_ptr", "k_ptr", "scale")

        def __init__(self, q_ptr, k_ptr, scale):
            self.q_ptr = q_ptr
            self.k_ptr = k_ptr
            self.scale = scale

        def args(self):
            return tuple(getattr(self, k) for k in self.__slots__)

    params = FwdParams(q, k, 0.5)
    params.k_ptr = k.view(-1, d)                                 # a later store: one more value
    args = tuple(getattr(params, k) for k in params.__slots__)   # or `params.args()`
    kernel(*args)                                                # or `kernel(*params.args())`

`slot_values` reads the unpacked expression and gives, slot by slot in order, the values
the slot can hold: the constructor's argument for the `__init__` parameter of the slot's
name, and each value a plain store `params.k_ptr = v` gives it in the functions the object
passes through: the one that builds it (the functions nested in it included) and a nested
function it is handed to (`def dispatch(params): ... kernel(*params.args())`, called as
`dispatch(params)` in the function that builds it).  The caller asks the dtype of each value
where it is evaluated.

Only that shape is read: a class of the launching module, without a base class, whose
`__slots__` is a literal tuple of strings and whose `__init__` stores each slot from the
parameter of its name (a parameter it never rebinds), nothing else in the class storing
a slot.  Anything else gives None (nothing is known): another class, an object also
handed to some other call (which may change it), bound to another name or returned, a
constructor call that unpacks.  A slot that a store changes in another way
(`params.k_ptr += 1`, a tuple target) is unknown (None in its place).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.calls import bind_call_args, string_literal
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.host_callers import parameter_names
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.reaching import Reaching

Value = tuple[Function | None, cst.BaseExpression]  # a value, with the function it is evaluated in
Slot = list[Value] | None                           # the values one slot can hold; None: unknown
HANDED_STEPS = 2                                    # nested functions the object is handed through


@dataclass
class _Class:
    """A params class: its slots in order, and its `__init__`'s parameters past `self`."""

    slots: list[str]
    init_params: list[str]
    none_default: set[str]  # the `__init__` parameters whose default is None
    has_args: bool          # it defines `args()` as the tuple of its slots


def slot_values(model: TritonModule, function: Function | None, expr: cst.BaseExpression) -> list[Slot] | None:
    """What each slot of the params object `expr` unpacks can hold, in order (`expr`: what
    follows the `*` of a launch in `function`); None when `expr` is not such an object."""
    unpacked = _unpacked(model, function, expr) if function is not None else None
    if unpacked is None:
        return None
    obj, through_method = unpacked
    built = _built(model, function, obj, [], set(), HANDED_STEPS)
    if not built:
        return None
    found: list[Slot] | None = None
    for maker, call, chain, handed in built:
        made = _class(model, call)
        if made is None or (through_method and not made.has_args) or any(a.star for a in call.args) \
                or _escapes(model, chain, handed):
            return None
        slots = _one_object(model, made, maker, call, chain)
        if found is not None and len(found) != len(slots):
            return None  # objects of different classes
        found = slots if found is None else \
            [None if a is None or b is None else a + b for a, b in zip(found, slots)]
    return found


def _unpacked(model: TritonModule, function: Function, expr: cst.BaseExpression,
              steps: int = 2) -> tuple[cst.Name, bool] | None:
    """(the object's name where it is read, whether through `.args()`) for `p.args()`,
    `tuple(getattr(p, k) for k in p.__slots__)`, or a name assigned one of them once."""
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value == "args" and isinstance(func.value, cst.Name) \
                and not expr.args:
            return func.value, True
        obj = _slots_tuple(expr)
        return (obj, False) if obj is not None else None
    if isinstance(expr, cst.Name) and steps > 0:
        defs = Reaching.of(model, function).defs(expr.value, expr)
        if len(defs) == 1 and isinstance(defs[0].node, cst.Assign) and len(defs[0].node.targets) == 1 \
                and isinstance(defs[0].node.targets[0].target, cst.Name):
            return _unpacked(model, function, defs[0].node.value, steps - 1)
    return None


def _slots_tuple(expr: cst.BaseExpression) -> cst.Name | None:
    """The `p` of `tuple(getattr(p, k) for k in p.__slots__)`; None for anything else."""
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "tuple"
            and len(expr.args) == 1 and isinstance(expr.args[0].value, cst.GeneratorExp)):
        return None
    generator = expr.args[0].value
    loop, element = generator.for_in, generator.elt
    if loop.ifs or loop.inner_for_in is not None or not isinstance(loop.target, cst.Name) \
            or not (isinstance(loop.iter, cst.Attribute) and loop.iter.attr.value == "__slots__"
                    and isinstance(loop.iter.value, cst.Name)):
        return None
    obj = loop.iter.value
    if not (isinstance(element, cst.Call) and isinstance(element.func, cst.Name) and element.func.value == "getattr"
            and len(element.args) == 2 and isinstance(element.args[0].value, cst.Name)
            and element.args[0].value.value == obj.value and isinstance(element.args[1].value, cst.Name)
            and element.args[1].value.value == loop.target.value):
        return None
    return obj


def _built(model: TritonModule, function: Function, obj: cst.Name, chain: list, handed: set[int],
           steps: int) -> list | None:
    """(the function that builds it, the constructor call, the (function, name) pairs it passes
    through, the ids of the calls that hand it on) for each object `obj` can be where it is read;
    None when one of its definitions is something else."""
    chain = chain + [(function, obj.value)]
    defs = Reaching.of(model, function).defs(obj.value, obj)
    found: list = []
    for d in defs:
        if isinstance(d.node, cst.Assign) and len(d.node.targets) == 1 \
                and isinstance(d.node.targets[0].target, cst.Name) and isinstance(d.node.value, cst.Call):
            found.append((function, d.node.value, chain, handed))
            continue
        outer = model.function_of(function.node)
        if d.kind != "param" or outer is None or steps <= 0:
            return None
        sites = [s.node for s in model.calls if s.function is outer
                 and isinstance(s.node.func, cst.Name) and s.node.func.value == function.name]
        twins = [f for f in model.functions if f.name == function.name and model.function_of(f.node) is outer]
        if not sites or len(twins) != 1:
            return None
        for site in sites:  # `dispatch(params)` in the function around `dispatch`
            arg = bind_call_args(site, parameter_names(function)).get(d.name)
            more = _built(model, outer, arg, chain, handed | {id(site)}, steps - 1) \
                if isinstance(arg, cst.Name) else None
            if more is None:
                return None
            found.extend(more)
    return found or None


def _class(model: TritonModule, call: cst.Call) -> _Class | None:
    """The params class the constructor call `call` makes; None when it is not one."""
    if not isinstance(call.func, cst.Name):
        return None
    classes = [c for c in model.nodes(cst.ClassDef) if c.name.value == call.func.value
               and model.parent(c) is model.module]
    if len(classes) != 1 or classes[0].bases or not isinstance(classes[0].body, cst.IndentedBlock):
        return None
    body = classes[0].body.body
    methods = {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}
    slots = next((_literal_strings(small.value) for statement in body if isinstance(statement, cst.SimpleStatementLine)
                  for small in statement.body if isinstance(small, cst.Assign) and len(small.targets) == 1
                  and isinstance(small.targets[0].target, cst.Name)
                  and small.targets[0].target.value == "__slots__"), None)
    init = methods.get("__init__")
    if not slots or init is None or any(isinstance(n, cst.Name) and n.value == "setattr" for n in walk(classes[0])):
        return None
    every = (*init.params.posonly_params, *init.params.params, *init.params.kwonly_params)
    named = [p.name.value for p in every][1:]  # past `self`
    stores: dict[str, list[cst.BaseExpression | None]] = {}  # slot → what the class stores in it (None: not `=`)
    for node in walk(classes[0].body):
        if isinstance(node, cst.Attribute) and node.attr.value in slots and _stored(model, node):
            stores.setdefault(node.attr.value, []).append(None)
        elif isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Attribute) \
                and node.target.attr.value in slots:
            stores.setdefault(node.target.attr.value, []).append(model.parent(node).value)
    init_reads = {id(n) for n in walk(init.body)}
    init_flow = model.flow(next(f for f in model.functions if f.node is init))
    for slot in slots:  # each slot stored once, in `__init__`, from the parameter of its name, never rebound
        values = stores.get(slot, [])
        if len(values) != 1 or not (isinstance(values[0], cst.Name) and values[0].value == slot) \
                or slot not in named or id(values[0]) not in init_reads \
                or any(d.kind != "param" for d in init_flow.defs_of(slot)):
            return None
    none = {p.name.value for p in every if isinstance(p.default, cst.Name) and p.default.value == "None"}
    return _Class(slots, named, none, _returns_its_slots(methods.get("args")))


def _literal_strings(expr: cst.BaseExpression) -> list[str] | None:
    """The strings of a literal tuple or list of strings; None for anything else."""
    if not isinstance(expr, (cst.Tuple, cst.List)):
        return None
    names = [string_literal(e.value) for e in expr.elements]
    return names if all(names) else None


def _returns_its_slots(method: cst.FunctionDef | None) -> bool:
    """Whether `method` is `def args(self): return tuple(getattr(self, k) for k in self.__slots__)`."""
    if method is None or not isinstance(method.body, cst.IndentedBlock) or len(method.body.body) != 1 \
            or not method.params.params:
        return False
    statement = method.body.body[0]
    returned = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
    obj = _slots_tuple(returned.value) if isinstance(returned, cst.Return) and returned.value is not None else None
    return obj is not None and obj.value == method.params.params[0].name.value


def _escapes(model: TritonModule, chain: list, handed: set[int]) -> bool:
    """Whether the object goes anywhere the slots are not followed along `chain`: handed to a
    call other than those that hand it on (`update(params)`, `setattr(params, ...)`), bound to
    another name, returned, stored.  Reading an attribute (`params.k_ptr`, `params.args()`),
    `getattr(params, k)` and assigning the name itself are not."""
    for function, name in chain:
        for node in walk(function.node.body):
            if not (isinstance(node, cst.Name) and node.value == name):
                continue
            holder = model.parent(node)
            if isinstance(holder, cst.Attribute) or isinstance(holder, (cst.Param, cst.AssignTarget)) \
                    or (isinstance(holder, cst.Arg) and holder.keyword is node):
                continue  # `params.x` (or `x.params`), a parameter of that name, `params = ...`, `f(params=...)`
            call = model.parent(holder) if isinstance(holder, cst.Arg) and not holder.star else None
            if isinstance(call, cst.Call) and (id(call) in handed or (
                    isinstance(call.func, cst.Name) and call.func.value == "getattr" and call.args[0] is holder)):
                continue
            return True
    return False


def _one_object(model: TritonModule, made: _Class, maker: Function, call: cst.Call, chain: list) -> list[Slot]:
    """What each slot of the object `call` builds can hold: its constructor argument, and the
    plain stores in the functions along `chain`."""
    bound = bind_call_args(call, made.init_params)
    slots: dict[str, Slot] = {}
    for slot in made.slots:
        arg = bound.get(slot)
        slots[slot] = [(maker, arg)] if arg is not None else [] if slot in made.none_default else None
    for function, name in chain:
        for node in walk(function.node.body):
            if not (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == name
                    and node.attr.value in slots):
                continue
            holder, values = model.parent(node), slots[node.attr.value]
            if _stored(model, node):
                slots[node.attr.value] = None
            elif isinstance(holder, cst.AssignTarget) and values is not None:  # `params.k_ptr = v`
                assign = model.parent(holder)
                values.append((model.function_of(assign), assign.value))
    return [slots[slot] for slot in made.slots]


def _stored(model: TritonModule, node: cst.Attribute) -> bool:
    """Whether `node` is written other than as the whole target of a plain `=`: `p.x += 1`,
    `p.x, y = ...`, `for p.x in ...`, `del p.x`, `with ... as p.x`."""
    holder = model.parent(node)
    if isinstance(holder, cst.AssignTarget) and holder.target is node:
        return False
    child: cst.CSTNode = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.AssignTarget, cst.Del, cst.AsName)):
            return True
        if isinstance(ancestor, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)) \
                and child is ancestor.target:
            return True
        if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False
        child = ancestor
    return False
