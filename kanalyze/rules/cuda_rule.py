"""What a CUDA detector is.

Each clause keeps one catalog entry: its Rule class in `<code>_<name>.py`
(code, name, docs, gate, Triton detectors).  Its CUDA detectors live beside
it in `<code>_<name>_cuda.py`, in a `CudaRule` subclass with the same code:
  - `check_cuda(cuda)` reads one CUDA translation unit (a `.cu` file or an
    inline string) through the CudaModule of model.py;
  - `check_host(host, extensions)` reads the Python that builds and calls
    the extensions (load_inline flags, `forward`), once per Python file.
The registry lists the clause once; `kanalyze explain CODE` shows the CUDA
docs under the clause's own.  `VALID`/`INVALID` hold CUDA C++ examples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Iterator

from kanalyze.rules.base import Report, Rule

if TYPE_CHECKING:  # tree-sitter is only loaded when a CUDA unit is parsed
    from kanalyze.analyzer.cuda.entities import CudaFunction
    from kanalyze.analyzer.cuda.model import CudaModule
    from kanalyze.analyzer.cuda.sources import CudaUnit, Extension
    from kanalyze.analyzer.triton.model import TritonModule


@dataclass
class CudaReport(Report):
    """A report inside a CUDA unit: `node` is a tree-sitter node of `unit`."""

    unit: "CudaUnit | None" = None


class CudaRule(Rule):
    """`class FloatAtomicOrderCuda(CudaRule, clause=FloatAtomicOrder)`: the clause's
    code, name, summary, gate and severity come from its catalog entry."""

    detects_cuda: ClassVar[bool] = True
    has_detectors: ClassVar[bool] = True
    # False when `check_host` reads only the extensions (their flags), not the Python
    # model: then it also runs on plain files, which are read without LibCST.
    host_reads_python: ClassVar[bool] = True

    def __init_subclass__(cls, clause: type[Rule] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if clause is not None:
            for attribute in ("code", "name", "summary", "gate", "severity"):
                setattr(cls, attribute, getattr(clause, attribute))

    def check_cuda(self, cuda: "CudaModule") -> Iterator[Report]:
        return iter(())

    def check_host(self, host: "TritonModule", extensions: list["Extension"]) -> Iterator[Report]:
        return iter(())

    def report_at(self, cuda: "CudaModule", node: Any, message: str, *, kernel: str | None = None,
                  **evidence: Any) -> CudaReport:
        evidence.setdefault("gate", self.gate)
        evidence.setdefault("cuda_source", cuda.unit.origin)
        return CudaReport(self.code, node, message, kernel, evidence, cuda.unit)


def kernel_name(cuda: "CudaModule", function: "CudaFunction | None") -> str | None:
    """The kernel a finding belongs to: the enclosing kernel, or one that calls the helper."""
    if function is None:
        return None
    return cuda.callers_kernel(function) if function.is_device else function.name
