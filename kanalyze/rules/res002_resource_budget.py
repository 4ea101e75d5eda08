"""RES002 resource-budget: the compiled kernel exceeds the target's shared memory, registers, threads or tensor memory.

The detector reads compiled metadata that the IR stage hands in (`kanalyze
check --ir`): one `CompiledKernel` per kernel configuration and target, with
the numbers `ptxas -v`, the cubin and Triton's metadata give.  It compiles
nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from kanalyze.analyzer.ir.targets import MAX_THREADS_PER_BLOCK, REGISTERS_PER_BLOCK, TMEM_COLUMNS
from kanalyze.rules.base import Rule

if TYPE_CHECKING:  # the static path never loads the IR stage
    from kanalyze.analyzer.ir.stage import CompiledKernel


@dataclass
class BudgetReport:
    """A detector's output on compiled code: a row instead of a CST node."""

    code: str
    row: int
    message: str
    kernel: str
    evidence: dict[str, Any] = field(default_factory=dict)


def _kb(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    return f"{size / 1024:.1f} KB" if size % 1024 else f"{size // 1024} KB"


class ResourceBudget(Rule):
    code = "RES002"
    name = "resource-budget"
    summary = "The compiled kernel exceeds the target's shared memory, registers, threads or tensor memory"
    gate = "res002-largest-config"
    has_detectors = False  # no source detector: the IR stage's compiled metadata is the evidence
    docs = """
    ## What it does
    With `--ir`, compiles every kernel configuration (launch sites, autotune
    configs) for each target and compares what the compiler reports with the
    target's per-block budget:
    - shared memory per block (static plus the dynamic size Triton requests)
      against the opt-in maximum (sm_90 and sm_100: 227 KB; sm_80: 163 KB;
      sm_86/sm_89/sm_120: 99 KB);
    - threads per block against 1024, and registers per thread × threads
      against the 64 K registers a block may hold;
    - register spills (`ptxas -v`: bytes of spill stores and loads): the
      kernel runs, but from local memory;
    - Blackwell tensor-memory columns (sm_100) against 512.
    `--show-resources` reports the numbers of every compiled kernel, within
    budget or not, so that an editor shows them on the kernel.

    ## Why is this bad
    A configuration over a budget fails to launch (Triton raises
    `OutOfResources`, CUDA returns "too many resources requested for launch")
    on exactly the shapes or GPUs where the autotuner or a user picks it; a
    spilling kernel is many times slower than the benchmark showed.

    ## Example
    An autotune config with 256×256×64 fp32 tiles and 4 stages: about 512 KB
    of shared memory for its pipeline, more than twice what sm_90 allows.

    ## Use instead
    Smaller tiles or fewer stages; drop the configuration, or prune it at run
    time with `prune_configs_by`.  For spills: fewer registers per thread
    (smaller tiles, more warps) or `maxnreg`.
    """

    def check_ir(self, kernel: "CompiledKernel", *, show_resources: bool = False) -> Iterator[BudgetReport]:
        """Budget violations of one compiled kernel (and its numbers, when asked)."""
        if not kernel.ok:
            return
        r = kernel.resources
        target = kernel.target
        limit = target.max_shared_bytes
        where = f"on {target} [{kernel.config}]"
        problems: list[str] = []
        shared = r.shared
        if shared is not None and shared > limit:
            problems.append(f"needs {_kb(shared)} of shared memory per block; {target} allows at most "
                            f"{_kb(limit)} (opt-in), so the launch fails; shrink the tiles or `num_stages`, "
                            f"or prune this configuration")
        if r.threads is not None and r.threads > MAX_THREADS_PER_BLOCK:
            problems.append(f"runs {r.threads} threads per block; at most {MAX_THREADS_PER_BLOCK} can launch; "
                            f"use fewer warps")
        if r.registers is not None and r.threads is not None and r.registers * r.threads > REGISTERS_PER_BLOCK:
            problems.append(f"needs {r.registers} registers × {r.threads} threads = {r.registers * r.threads} "
                            f"registers per block; a block may hold {REGISTERS_PER_BLOCK}, so the launch fails; "
                            f"use fewer warps or `maxnreg`")
        if target.has_tensor_memory and r.tmem_columns is not None and r.tmem_columns > TMEM_COLUMNS:
            problems.append(f"allocates {r.tmem_columns} tensor-memory columns; {target} has {TMEM_COLUMNS}; "
                            f"use smaller accumulator tiles")
        spilled = (r.spill_stores or 0) + (r.spill_loads or 0)
        if spilled:
            problems.append(f"spills registers to local memory ({r.spill_stores} bytes stored, "
                            f"{r.spill_loads} bytes loaded per thread, {r.registers} registers); it runs far "
                            f"slower than it should; use smaller tiles, more warps or `maxnreg`")
        numbers = self._numbers(kernel)
        evidence = {
            "source": "ir", "target": target.name, "config": kernel.config, "resources": r.to_dict(),
            "limits": {"shared_bytes": limit, "threads": MAX_THREADS_PER_BLOCK,
                       "registers_per_block": REGISTERS_PER_BLOCK,
                       **({"tmem_columns": TMEM_COLUMNS} if target.has_tensor_memory else {})},
            "summary": numbers, "notes": kernel.notes,
        }
        if problems:
            yield BudgetReport(self.code, kernel.row, f"`{kernel.kernel}` {where} " + "; it also ".join(problems),
                               kernel.kernel, {**evidence, "gate": self.gate, "problems": problems})
        elif show_resources:
            yield BudgetReport(self.code, kernel.row, f"`{kernel.kernel}` {where}: {numbers} (within budget)",
                               kernel.kernel, {**evidence, "gate": self.gate, "informational": True})

    @staticmethod
    def _numbers(kernel: "CompiledKernel") -> str:
        r = kernel.resources
        parts = []
        if r.registers is not None:
            parts.append(f"{r.registers} registers/thread")
        if r.spill_stores is not None:
            parts.append(f"{(r.spill_stores or 0) + (r.spill_loads or 0)} bytes spilled")
        if r.shared is not None:
            parts.append(f"{_kb(r.shared)} shared of {_kb(kernel.target.max_shared_bytes)}")
        if r.threads is not None:
            parts.append(f"{r.threads} threads/block")
        if r.stack_frame is not None:
            parts.append(f"{r.stack_frame} bytes stack")
        if kernel.target.has_tensor_memory and r.tmem_columns is not None:
            parts.append(f"{r.tmem_columns} of {TMEM_COLUMNS} TMEM columns")
        return ", ".join(parts) or "no resource information"
