"""From a z3 counterexample (a MEM003/MEM004 flag's evidence) to the call that reproduces it.

The static pass's counterexample (analyzer/bounds/checks.py, `counterexample`)
names the sizes, the shape of the tensor behind every pointer, the grid, the
constexprs and the wrapper that launched the kernel.  `call_of` turns it into a
`Case.call` (see kernel_call.py):

* the file's own wrapper, called with tensors of the counterexample's shapes and
  its integer arguments, where the wrapper is a plain function whose parameters
  all have a value — the closest thing to what a user runs;
* otherwise the kernel itself, launched on the counterexample's grid with every
  parameter given (the failing autotune configuration's constexprs included).

Parent side: plain data, no torch.  `CounterexampleGate` is what the MEM003 and MEM004
gates share: one case per distinct call, one verdict per flag.
"""

from __future__ import annotations

import json
from typing import ClassVar

from kanalyze.dynamic.gates.base import UNCONFIRMED, Gate, Verdict

NOT_RUNNABLE = "the flag has no counterexample that can be run (no grid, or a launch the static pass could not read)"


def _wrapper_call(example: dict) -> dict | None:
    wrapper, params = example.get("wrapper"), example.get("wrapper_params")
    # An autotuned kernel runs from its wrapper with every configuration (the
    # interpreter would run them all); the failing one is launched directly.
    if not wrapper or "." in wrapper or params is None or example.get("config") is not None:
        return None
    inputs, symbols = example.get("inputs") or {}, example.get("symbols") or {}
    args = []
    for param in params:
        name = param["name"]
        if name in inputs:
            args.append({"name": name, "shape": inputs[name]})
        elif isinstance(symbols.get(name), int):
            args.append({"name": name, "value": symbols[name]})
        elif param["default"]:
            break  # this one and the rest keep their defaults
        else:
            return None
    return {"route": "wrapper", "function": wrapper, "args": args}


def _kernel_call(example: dict) -> dict | None:
    if example.get("grid") is None or not example.get("kernel") or any(g is None for g in example["grid"]):
        return None
    shapes = example.get("shapes") or {}
    pointers = example.get("pointers") or {}
    tensors = {param: shapes.get(label) or [1] for param, label in pointers.items()}
    # A pointer whose tensor the counterexample does not size gets a one-element stand-in:
    # an access through it that faults or leaves it says nothing about the flagged offset.
    placeholders = sorted(param for param, label in pointers.items() if not shapes.get(label))
    values = {**(example.get("sizes") or {}), **(example.get("constexprs") or {})}
    return {"route": "kernel", "function": example["kernel"], "grid": list(example["grid"]),
            "tensors": tensors, "values": values, "placeholders": placeholders}


def call_of(example: dict | None) -> dict | None:
    """The call that reruns a counterexample, or None where it cannot be built."""
    if not example:
        return None
    return _wrapper_call(example) or _kernel_call(example)


def sizes_of(example: dict) -> dict[str, int]:
    """The counterexample's sizes, for the witness's case (what `describe` shows)."""
    return {k: v for k, v in {**(example.get("sizes") or {}), **(example.get("constexprs") or {})}.items()
            if isinstance(v, int)}


def matches(violation: dict, example: dict) -> bool:
    """The interpreter's report is about the flagged access: same kernel, kind and pointer."""
    return (violation.get("kernel") == example.get("kernel")
            and violation.get("access", "").startswith(example.get("access", "?"))
            and violation.get("tensor") == example.get("parameter"))


def group_flags(flags: list[dict]) -> list[tuple[dict, list[dict]]]:
    """Flags with the same call share one run: [(call, [flag, ...])], in row order."""
    groups: dict[str, tuple[dict, list[dict]]] = {}
    for flag in sorted(flags, key=lambda f: f.get("row") or 0):
        call = call_of(flag.get("counterexample"))
        if call is None:
            continue
        key = json.dumps(call, sort_keys=True)
        groups.setdefault(key, (call, []))[1].append(flag)
    return list(groups.values())


class CounterexampleGate(Gate):
    """A gate that runs its flags' counterexamples through a kernel harness, one
    verdict per flag (`Verdict.rows`); subclasses judge one flag's run."""

    kernel_harness = True
    case_fields: ClassVar[dict] = {}

    def plan(self, ctx):
        return plan_cases(self, ctx, **self.case_fields)

    def judge(self, ctx, results) -> list[Verdict]:
        by_call = {repr(r.case.call): r for r in results}
        verdicts = []
        for call, flags in group_flags(ctx.flags):
            result = by_call.get(repr(call))
            for flag in flags:
                if result is None:
                    verdicts.append(Verdict(self.code, UNCONFIRMED, "the counterexample was not run", gate=self.name,
                                            rows=[flag["row"]]))
                else:
                    verdicts.append(self.judge_flag(flag, result))
        return verdicts + [Verdict(self.code, UNCONFIRMED, NOT_RUNNABLE, gate=self.name, rows=[flag["row"]])
                           for flag in unplanned(ctx)]

    def judge_flag(self, flag: dict, result) -> Verdict:
        raise NotImplementedError


def plan_cases(gate, ctx, **fields) -> list:
    """One case per distinct call among the gate's flags (`ctx.flags`), named by their rows."""
    cases = []
    for call, flags in group_flags(ctx.flags):
        rows = "-".join(str(f["row"]) for f in flags)
        cases.append(ctx.case(gate, f"row{rows}", sizes=sizes_of(flags[0]["counterexample"]), call=call, **fields))
    return cases


def unplanned(ctx) -> list[dict]:
    """The flags whose counterexample cannot be turned into a call."""
    planned = {f["row"] for _, flags in group_flags(ctx.flags) for f in flags}
    return [f for f in ctx.flags if f["row"] not in planned]
