"""RES001 residency: the work runs in the submitted kernel, on the input's device.

While the candidate runs, the worker records the aten ops its Python code
dispatches, the Triton launches, and host transfers (`.cpu()`, `.item()`,
`.numpy()`, `.tolist()`).  The candidate fails when no kernel of its own ran,
when it moved data to the host, or when a library op that does the
reference's main computation (a matmul, a convolution, a softmax, a norm …)
ran in PyTorch instead of in the kernel.
"""

from __future__ import annotations

from kanalyze.dynamic.gates.base import REFUTED, UNCONFIRMED, Gate, GateContext, run_problem

# aten ops that do a problem's main computation (not glue: views, copies, fills, adds).
HEAVY_OPS = {
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "mv", "addmv", "dot", "linear", "einsum",
    "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "mkldnn_convolution", "cudnn_convolution", "_softmax", "_log_softmax", "softmax",
    "log_softmax", "native_layer_norm", "native_batch_norm", "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training", "native_group_norm", "_fused_rms_norm", "rms_norm",
    "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool2d", "avg_pool3d", "_adaptive_avg_pool2d",
    "cumsum", "cumprod", "sort", "topk", "_cdist_forward", "upsample_bilinear2d", "upsample_nearest2d",
    "embedding_bag", "_embedding_bag", "nll_loss_forward", "mse_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "kl_div", "_fft_r2c", "_fft_c2c",
}
HOST_OPS = {"_local_scalar_dense"}


class DispatchTrace(Gate):
    code = "RES001"
    name = "res001-dispatch-trace"
    summary = "aten ops, kernel launches and host transfers recorded while the candidate runs"

    def plan(self, ctx: GateContext):
        return [ctx.case(self, "trace", record_ops=True)]

    def judge(self, ctx: GateContext, results):
        result = results[0]
        if not result.candidate_ok or not result.runs or not result.runs[0].ok:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {run_problem(result)}", [result.case])
        run = result.runs[0].meta
        ops, launches = run.get("ops", {}), run.get("launches", {})
        transfers = dict(run.get("host_transfers", {}))
        transfers.update({op: n for op, n in ops.items() if op in HOST_OPS})
        reference_ops = result.reference.meta.get("ops") or {}
        library = sorted(op for op in ops if op in HEAVY_OPS and (op in reference_ops or not reference_ops))
        trace = {"aten_ops": ops, "kernel_launches": launches, "host_transfers": transfers,
                 "reference_ops": reference_ops}
        problems = []
        if not launches:
            problems.append("no custom kernel ran")
        if library:
            problems.append(f"the reference's {', '.join(f'aten.{op}' for op in library)} ran in PyTorch")
        if transfers:
            problems.append("host transfers: " + ", ".join(f"{k} ×{v}" for k, v in sorted(transfers.items())))
        if problems:
            return self.confirmed("; ".join(problems), result, **trace)
        kernels = ", ".join(f"{k} ×{v}" for k, v in sorted(launches.items()))
        return self.verdict(REFUTED, f"the work ran in the candidate's kernels ({kernels}); no reference library op "
                                     "and no host transfer", [result.case], **trace)
