"""Driving Triton's interpreter: permuted program order, bounds checks, TF32 emulation.

Worker-side only, imported after `TRITON_INTERPRET=1` is set and triton is
imported.  The interpreter runs a launch's grid in nested loops and announces
each program through `interpreter_builder.set_grid_idx(x, y, z)`; every memory
access goes through `create_masked_load`, `create_masked_store`,
`create_atomic_rmw` or `create_atomic_cas` with raw addresses; `tl.dot` goes
through `create_dot`.  Wrapping those calls on the builder instance (never
copying Triton code) gives:

* program order permuted by a seeded bijection over the grid (ORD001 on the CPU);
* every address checked against the argument tensors of the launch, so that an
  out-of-bounds access stops the run with the program id and element offset,
  instead of reading garbage or crashing the process (CMP003); or, where a case
  asks (`collect`, MEM003), is recorded and masked off so that the run goes on
  and every access that leaves its tensor is reported, not only the first;
* TF32 emulated in `tl.dot` where the kernel asks for TF32 (the default): the
  fp32 operands are rounded to TF32's 10-bit mantissa, as the tensor cores do.
  The interpreter otherwise ignores `input_precision` and computes in full fp32;
* float atomics counted: how many programs of one launch add to the same
  address (ORD001's power: with two, 0+a+b equals 0+b+a and order cannot show).

The hooks take the arguments they read by position and pass the rest on as they
came, since Triton's versions differ in the trailing ones (3.2 to 3.6 give
`create_masked_load` six, `(ptrs, mask, other, cache_modifier, eviction_policy,
is_volatile)`; 3.9 gives five).  The hook points were checked on the Triton
versions in `CHECKED_TRITON`; `check_hooks()` fails loudly when a version lacks
one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import triton
import triton.language as tl
from triton.runtime import interpreter as _interp

CHECKED_TRITON = ("3.6", "3.9")
_BUILDER_HOOKS = ("set_grid_idx", "set_grid_dim", "create_masked_load", "create_masked_store",
                  "create_atomic_rmw", "create_atomic_cas", "create_dot")


class OutOfBounds(Exception):
    """A load or store outside every argument tensor of the launch."""


def check_hooks() -> None:
    builder = getattr(_interp, "interpreter_builder", None)
    missing = [h for h in _BUILDER_HOOKS if not hasattr(builder, h)]
    if not hasattr(getattr(_interp, "GridExecutor", None), "_init_args_hst"):
        missing.append("GridExecutor._init_args_hst")
    if missing:
        raise RuntimeError(f"triton {triton.__version__}: the interpreter lacks {', '.join(missing)}; "
                           f"kanalyze's interpreter hooks were checked on triton {', '.join(CHECKED_TRITON)}")


@dataclass
class _Range:
    name: str
    start: int        # the tensor's data_ptr
    lo: int           # lowest byte its view covers
    hi: int           # one past the highest byte
    itemsize: int
    numel: int


def _tensor_range(name: str, tensor) -> _Range | None:
    t = getattr(tensor, "base", tensor) if type(tensor).__name__ == "TensorWrapper" else tensor
    if not hasattr(t, "data_ptr") or not hasattr(t, "stride"):
        return None
    itemsize = t.element_size()
    start = t.data_ptr()
    low = sum(st * (sz - 1) for st, sz in zip(t.stride(), t.shape) if st < 0 and sz > 0)
    high = sum(st * (sz - 1) for st, sz in zip(t.stride(), t.shape) if st > 0 and sz > 0)
    if t.numel() == 0:
        return _Range(name, start, start, start, itemsize, 0)
    return _Range(name, start, start + low * itemsize, start + (high + 1) * itemsize, itemsize, t.numel())


def round_to_tf32(values: np.ndarray) -> np.ndarray:
    """fp32 → TF32 (1+8+10 bits), round to nearest, ties away from zero (cvt.rna.tf32.f32)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(values), rounded, values).astype(np.float32)


def boolean_mask(mask):
    """The mask as the compiled kernel takes it: booleans.  The interpreter gives a scalar
    comparison the handle type of its operand (Triton 3.9: `m = (base + i) < M` holds int32),
    so `offs_mask & m` reaches the load as int32 data, which the interpreter's own load
    refuses ("mask has unsupported dtype") where the compiled kernel runs; the language
    typed it `int1` all along."""
    if mask is None or np.asarray(mask.data).dtype == np.bool_:
        return mask
    return _interp.TensorHandle(np.asarray(mask.data).astype(bool), tl.int1)


def _helpers() -> dict:
    """The functions the hooks call by name, as they are now (the seal compares them with
    those at install: a candidate that swaps one changes what every hook does)."""
    return {"boolean_mask": globals()["boolean_mask"], "round_to_tf32": globals()["round_to_tf32"],
            "InterpreterDriver._check": InterpreterDriver.__dict__.get("_check"),
            "AtomicCount.add": AtomicCount.__dict__.get("add")}


def element_type(ptrs):
    """The pointee type of a pointer handle (`get_element_ty()` from Triton 3.7, `dtype.element_ty` before)."""
    getter = getattr(ptrs, "get_element_ty", None)
    return getter() if getter is not None else ptrs.dtype.element_ty


class AtomicCount:
    """How many programs of one launch add floats to the same address.

    Programs run one after another, so a program's atomics on an address are
    counted once: the count rises when the address's last contributor changes."""

    def __init__(self) -> None:
        self.most = 0                                   # the largest count over every address
        self._last: dict[tuple[int, int], tuple] = {}   # (launch, address) → last program
        self._count: dict[tuple[int, int], int] = {}

    def add(self, launch: int, program: tuple, ptrs, mask) -> None:
        if not element_type(ptrs).is_floating():
            return
        addresses = np.asarray(ptrs.data)
        if mask is not None:
            addresses = addresses[np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)]
        for address in np.unique(addresses).tolist():
            key = (launch, address)
            if self._last.get(key) != program:
                self._last[key] = program
                self._count[key] = count = self._count.get(key, 0) + 1
                self.most = max(self.most, count)


class InterpreterDriver:
    """Installs the hooks once per process; the worker sets the knobs before each run."""

    def __init__(self, builder=None) -> None:
        """Hooks on Triton's interpreter builder (`builder`: another object of its shape, for tests)."""
        if builder is None:
            check_hooks()
        self.order_seed: int | None = None
        self.emulate_tf32 = False
        self.tf32_dots = 0              # dots whose operands were rounded to TF32
        self.out_of_bounds: dict | None = None
        self.collect = False
        self.violations: list[dict] = []    # collect mode: the first violation of each access
        self._ranges: list[_Range] = []
        self._permutation: np.ndarray | None = None
        self._launch = 0
        self._kernel = ""
        self._program = (0, 0, 0)
        self.atomics = AtomicCount()
        self._install(builder)
        self._codes = {name: hook.__code__ for name, hook in self._hooks.items()}   # (a swapped code object shows)
        self._helpers = {name: (function, function.__code__) for name, function in _helpers().items()}

    def reset(self, order_seed: int | None, emulate_tf32: bool, collect: bool = False) -> None:
        self.order_seed, self.emulate_tf32, self.collect = order_seed, emulate_tf32, collect
        self.tf32_dots, self.out_of_bounds, self._launch, self.violations = 0, None, 0, []
        self.atomics = AtomicCount()

    # -------------------------------------------------------------- hooks

    def _install(self, given=None) -> None:
        builder = given if given is not None else _interp.interpreter_builder
        driver = self
        set_grid_dim, set_grid_idx = builder.set_grid_dim, builder.set_grid_idx
        masked_load, masked_store = builder.create_masked_load, builder.create_masked_store
        atomic_rmw, atomic_cas, create_dot = builder.create_atomic_rmw, builder.create_atomic_cas, builder.create_dot

        def grid_dim(nx, ny, nz):
            driver._launch += 1
            if driver.order_seed is None:
                driver._permutation = None
            else:
                rng = np.random.default_rng([driver.order_seed, driver._launch])
                driver._permutation = rng.permutation(nx * ny * nz)
            return set_grid_dim(nx, ny, nz)

        def grid_idx(x, y, z):
            if driver._permutation is not None:
                _, ny, nz = builder.grid_dim
                p = int(driver._permutation[(x * ny + y) * nz + z])
                x, y, z = p // (ny * nz), (p // nz) % ny, p % nz
            driver._program = (x, y, z)
            return set_grid_idx(x, y, z)

        def load(ptrs, mask, *rest, **options):
            mask = driver._check(ptrs, boolean_mask(mask), "load")
            return masked_load(ptrs, mask, *rest, **options)

        def store(ptrs, value, mask, *rest, **options):
            mask = driver._check(ptrs, boolean_mask(mask), "store")
            return masked_store(ptrs, value, mask, *rest, **options)

        def rmw(op, ptr, val, mask, *rest, **options):
            mask = driver._check(ptr, boolean_mask(mask), "atomic")
            driver.atomics.add(driver._launch, driver._program, ptr, mask)
            return atomic_rmw(op, ptr, val, mask, *rest, **options)

        def cas(ptr, cmp, val, *rest, **options):
            driver._check(ptr, None, "atomic_cas", can_mask=False)
            return atomic_cas(ptr, cmp, val, *rest, **options)

        def dot(a, b, d, input_precision, *rest, **options):
            if driver.emulate_tf32 and input_precision == _interp._ir.INPUT_PRECISION.TF32 \
                    and a.dtype.scalar == tl.float32 and b.dtype.scalar == tl.float32:
                driver.tf32_dots += 1
                a = _interp.TensorHandle(round_to_tf32(a.data), a.dtype.scalar)
                b = _interp.TensorHandle(round_to_tf32(b.data), b.dtype.scalar)
            return create_dot(a, b, d, input_precision, *rest, **options)

        builder.set_grid_dim, builder.set_grid_idx = grid_dim, grid_idx
        builder.create_masked_load, builder.create_masked_store = load, store
        builder.create_atomic_rmw, builder.create_atomic_cas, builder.create_dot = rmw, cas, dot
        self._builder = builder
        self._hooks = {"set_grid_dim": grid_dim, "set_grid_idx": grid_idx, "create_masked_load": load,
                       "create_masked_store": store, "create_atomic_rmw": rmw, "create_atomic_cas": cas,
                       "create_dot": dot}
        if given is not None:
            return

        init_args = _interp.GridExecutor._init_args_hst

        def init_args_hst(executor, args_dev, kwargs):
            args_hst, kwargs_hst = init_args(executor, args_dev, kwargs)
            names = list(executor.arg_names)
            ranges = [_tensor_range(names[i] if i < len(names) else f"arg{i}", a) for i, a in enumerate(args_hst)]
            ranges += [_tensor_range(k, v) for k, v in kwargs_hst.items()]
            driver._ranges = [r for r in ranges if r is not None]
            driver._kernel = getattr(executor.fn, "__name__", "kernel")
            return args_hst, kwargs_hst

        _interp.GridExecutor._init_args_hst = init_args_hst
        self._hooks["_init_args_hst"] = init_args_hst

    def tampered(self) -> list[str]:
        """The hooks no longer in place (empty: intact).  A candidate that takes them off gets
        the interpreter's own behaviour: programs in launch order, no bounds checks, no TF32
        (ORD001, MEM003, PRC001 would refute what they never tested)."""
        builder = getattr(_interp, "interpreter_builder", None)
        if self._builder is not builder and "_init_args_hst" in self._hooks:
            return ["Triton's interpreter builder was replaced (kanalyze's hooks on it are gone)"]
        found = []
        for name, hook in self._hooks.items():
            now = (_interp.GridExecutor.__dict__.get(name) if name == "_init_args_hst"
                   else vars(self._builder).get(name))
            if now is not hook or getattr(now, "__code__", None) is not self._codes[name]:
                found.append(f"kanalyze's hook on Triton's interpreter `{name}` was taken off or changed")
        for name, function in _helpers().items():      # what the hooks call: their bounds check, masks, TF32
            if (function, getattr(function, "__code__", None)) != self._helpers[name]:
                found.append(f"`{name}`, which kanalyze's hooks on Triton's interpreter call, was replaced")
        return found

    # -------------------------------------------------------------- bounds

    def _check(self, ptrs, mask, what: str, can_mask: bool = True):
        """The mask to run the access with: the given one, or in collect mode one
        that drops the lanes outside every tensor.  Otherwise an access outside
        raises OutOfBounds."""
        addresses = np.asarray(ptrs.data)
        if addresses.dtype.kind not in "iu" or addresses.size == 0:
            return mask
        if mask is not None:
            active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
            selected = addresses[active]
        else:
            active, selected = None, addresses.ravel()
        if selected.size == 0:
            return mask
        itemsize = max(1, element_type(ptrs).primitive_bitwidth // 8)
        low, high = int(selected.min()), int(selected.max()) + itemsize
        if any(r.lo <= low and high <= r.hi for r in self._ranges):
            return mask
        inside = np.zeros(selected.shape, dtype=bool)
        for r in self._ranges:
            inside |= (selected >= r.lo) & (selected + itemsize <= r.hi)
        if inside.all():
            return mask
        record = self._record(addresses, active, selected, inside, what)
        if not (self.collect and can_mask and mask is not None):
            self.out_of_bounds = record
            raise OutOfBounds(record["message"])
        self.out_of_bounds = self.out_of_bounds or record
        if not any(v["kernel"] == record["kernel"] and v["access"] == what and v.get("tensor") == record.get("tensor")
                   for v in self.violations):
            self.violations.append(record)
        allowed = np.zeros(addresses.shape, dtype=bool)
        allowed[active] = inside
        return _interp.TensorHandle(allowed, mask.dtype.scalar)

    def _record(self, addresses, active, selected, inside, what: str) -> dict:
        """The first offending lane: program, lane, tensor and element offset, in words too."""
        bad = int(selected[~inside][0])
        flat = np.flatnonzero(active.ravel()) if active is not None else np.arange(addresses.size)
        lane = int(flat[np.flatnonzero(~inside)[0]])
        nearest = min(self._ranges, key=lambda r: 0 if r.lo <= bad < r.hi else min(abs(bad - r.lo), abs(bad - r.hi)),
                      default=None)
        record = {"kernel": self._kernel, "program_id": list(self._program), "access": what,
                  "lane": lane, "address": hex(bad)}
        if nearest is not None:
            offset = (bad - nearest.start) // nearest.itemsize
            record.update(tensor=nearest.name, element_offset=offset, numel=nearest.numel)
            plural = "" if nearest.numel == 1 else "s"
            where = f"element offset {offset} of `{nearest.name}`, which has {nearest.numel} element{plural}"
        else:
            where = f"address {hex(bad)}, outside every argument"
        record["message"] = (f"out-of-bounds {what} in `{self._kernel}`, program {tuple(self._program)}, "
                             f"lane {lane}: {where}")
        return record
