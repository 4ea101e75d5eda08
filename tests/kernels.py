"""Kernels several test modules check: one definition each, so they cannot drift apart."""

import textwrap

# A float32 matmul whose `tl.dot` runs in TF32: PRC001 at row 10, column 9, under every
# profile (the loads' `.to(tl.float32)` shows the operands' dtype).
TF32_KERNEL = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :]).to(tl.float32)
        b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :]).to(tl.float32)
        c = tl.dot(a, b)
        tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], c)
''')
