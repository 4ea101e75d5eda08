"""What bench/fuzz_static.py checks: seeded mutants of real-looking kernels, and extreme shapes.

Each mutant starts from a source file of `fixtures/` or of folders given (`seed_files`) and
takes one to three mutations: lines dropped, doubled, swapped, re-indented or cut short;
numbers made huge, negative or non-integral; names respelled (fullwidth letters, which
Python folds back to ASCII, other names of the file); operators swapped; unusual but valid
statements inserted (match, walrus, starred targets and calls, nested comprehensions,
`*args` launches, async, `except*`, deep brackets); other line endings, a byte-order mark,
bytes that are not UTF-8.  Besides them, generated extremes: kernels of thousands of
statements, many branches calling many helpers, long chains just under the nesting guard.
The same seed gives the same mutants.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SUFFIXES = (".py", ".cu", ".cuh")


# ------------------------------------------------------------------ seeds

def seed_files(extra: list[Path] = ()) -> list[tuple[str, str]]:
    """(name, text) of every source file under fixtures/ and `extra`, in a fixed order."""
    found = []
    for base in [FIXTURES, *extra]:
        for path in sorted(Path(base).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and path.stat().st_size < 200_000:
                found.append((path.name, path.read_text(encoding="utf-8", errors="replace")))
    return found


# ------------------------------------------------------------------ mutations on lines

def _lines(text: str) -> list[str]:
    return text.split("\n")


def drop_line(text: str, rng: random.Random) -> str:
    lines = _lines(text)
    del lines[rng.randrange(len(lines))]
    return "\n".join(lines)


def duplicate_line(text: str, rng: random.Random) -> str:
    lines = _lines(text)
    i = rng.randrange(len(lines))
    return "\n".join(lines[:i + 1] + [lines[i]] * rng.choice([1, 2, 50]) + lines[i + 1:])


def swap_lines(text: str, rng: random.Random) -> str:
    lines = _lines(text)
    if len(lines) > 1:
        i = rng.randrange(len(lines) - 1)
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return "\n".join(lines)


def reindent_line(text: str, rng: random.Random) -> str:
    """One line four spaces further in, or (where it has them) four spaces out."""
    lines = _lines(text)
    i = rng.randrange(len(lines))
    if rng.random() < 0.5:
        lines[i] = "    " + lines[i]
    elif lines[i].startswith("    "):
        lines[i] = lines[i][4:]
    return "\n".join(lines)


def cut_short(text: str, rng: random.Random) -> str:
    return text[:rng.randrange(len(text) + 1)]


# ------------------------------------------------------------------ mutations on tokens

NUMBERS = ("0", "-1", "1" + "0" * 30, "1" + "0" * 400, "0x" + "f" * 40, "1e308", "1e-400", "2**63", "-(2**31)",
           "3.5", "True", "None", "0b1", "1_000_000")
OPERATORS = {"+": "-", "-": "+", "*": "//", "//": "%", "<": "<=", ">=": ">", "==": "!=", "&": "|", "%": "*"}
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_OPERATOR = re.compile(r"(?<=[\w)\]] )(//|>=|==|[+\-*<&%])(?= [\w(\[])")
_ASSIGN = re.compile(r"^(\s*)([A-Za-z_]\w*) = (.+)$", re.MULTILINE)
_LAUNCH = re.compile(r"(\w+)\[([^\]\n]+)\]\(([^()\n]*)\)")


def _replace_one(pattern: re.Pattern, text: str, rng: random.Random, replace) -> str:
    matches = list(pattern.finditer(text))
    if not matches:
        return text
    m = rng.choice(matches)
    return text[:m.start()] + replace(m) + text[m.end():]


def replace_number(text: str, rng: random.Random) -> str:
    return _replace_one(_NUMBER, text, rng, lambda m: rng.choice(NUMBERS))


def fullwidth(name: str) -> str:
    """The name in fullwidth letters: Python folds it back to the ASCII name (NFKC)."""
    return "".join(chr(ord(c) + 0xFEE0) if c.isascii() and c.isalnum() else c for c in name)


def respell_name(text: str, rng: random.Random) -> str:
    names = sorted({m.group(0) for m in _NAME.finditer(text)})

    def other(m: re.Match) -> str:
        choice = rng.random()
        if choice < 0.4:
            return fullwidth(m.group(0))
        if choice < 0.7 and names:
            return rng.choice(names)
        return rng.choice(["ñ" + m.group(0), m.group(0) + "_", "_", "self", "tl", "torch", "match", "print"])
    return _replace_one(_NAME, text, rng, other)


def swap_operator(text: str, rng: random.Random) -> str:
    return _replace_one(_OPERATOR, text, rng, lambda m: OPERATORS.get(m.group(1), m.group(1)))


def unusual_assignment(text: str, rng: random.Random) -> str:
    """`x = e` as a starred target, a walrus, an annotated or augmented assignment."""
    def rewrite(m: re.Match) -> str:
        indent, name, value = m.groups()
        return indent + rng.choice([f"*rest, {name} = {value}, 0", f"({name} := {value})",
                                    f"{name}: int = {value}", f"{name}, = ({value},)",
                                    f"[{name}] = [{value}]", f"{name} += {value}"])
    return _replace_one(_ASSIGN, text, rng, rewrite)


def starred_launch(text: str, rng: random.Random) -> str:
    """`kernel[grid](a, b)` launched through `*args`, `**kwargs`, or a lambda grid."""
    def rewrite(m: re.Match) -> str:
        kernel, grid, args = m.groups()
        return rng.choice([f"{kernel}[{grid}](*({args},))", f"{kernel}[{grid}](*[{args}])",
                           f"{kernel}[lambda meta: ({grid})](**dict(zip(('a',), ({args},))))",
                           f"{kernel}[({grid})]({args}, *(), **{{}})"])
    return _replace_one(_LAUNCH, text, rng, rewrite)


PYTHON_SNIPPETS = (
    "match n:\n    case 0:\n        pass\n    case [a, *rest] if a:\n        n = a\n    case {'k': v, **kw}:\n        pass\n"
    "    case Point(x=0) | None:\n        pass\n    case _:\n        pass",
    "total = [[i * j for j in range(i) if j % 2] for i in range(4) if (k := i)]",
    "first, *middle, last = (lambda *a, **k: a)(*range(5), **{})",
    "if (m := len(str(10 ** 50))) > 0:\n    pass",
    "try:\n    pass\nexcept* ValueError as group:\n    pass",
    "async def _helper(*args, **kwargs):\n    async with args as a:\n        await a\n    return [x async for x in a]",
    "def _decorated():\n    @staticmethod\n    @(lambda f: f)\n    def inner(a, /, b, *, c=1):\n        nonlocal_value = a\n"
    "        return inner\n    return _decorated",
    "x = (" * 40 + "1" + ")" * 40,
    "y = " + " + ".join(["z"] * 900),
    "value = f\"{f'{1 + 2!r:>{10}}'}\"",
    "del a, (b, c), [d]",
    "assert (q := 3) and q, f'{q=}'",
    "global GLOBAL_N\nGLOBAL_N = 0x" + "F" * 300,
    "items = {**{}, 'a': 1, **dict(b=2)}; s = {*(), *[]}",
    "with (open('a') as f, open('b') as g):\n    pass",
    "grid = lambda META: (triton.cdiv(n, META['BLOCK']), *[1] * 2)",
    "ｔｌ = tl\nz = ｔｌ.ｍａｘｉｍｕｍ(z, 0.0)",
    "b = b'\\xff\\x00' + bytes(3)",
    "class Point:\n    __match_args__ = ('x',)\n    x: int = 0",
    "print(*(i for i in range(3)), sep='', end='\\n' * 2)",
)

CUDA_SNIPPETS = (
    "#define HUGE 0x" + "F" * 64 + "ULL",
    "#define WIDTH " + "9" * 80,
    "template <typename T, int N = 4>\n__device__ __forceinline__ T twice(T v) { return v + v; }",
    "auto f = [&](int i) -> float { return i * 2.0f; };",
    "asm volatile(\"add.ftz.f32 %0, %1, %2;\" : \"=f\"(a) : \"f\"(b), \"f\"(c));",
    "#define CALL(...) foo(__VA_ARGS__)",
    "namespace a { namespace b { __global__ void __launch_bounds__(256, 2) k(float* x) { x[0] = 1; } } }",
    "const char* s = R\"(raw \\ string with ) and \" quotes)\";",
    "#if 0\n#error never\n#endif",
    "__shared__ float tile[32][33];\nextern __shared__ float dynamic[];",
)


def insert_snippet(text: str, rng: random.Random, cuda: bool = False) -> str:
    lines = _lines(text)
    i = rng.randrange(len(lines) + 1)
    before = lines[i - 1] if i else ""
    indent = re.match(r"\s*", before).group(0) + ("    " if before.rstrip().endswith(":") else "")
    snippet = rng.choice(CUDA_SNIPPETS if cuda else PYTHON_SNIPPETS)
    return "\n".join(lines[:i] + [indent + line for line in snippet.split("\n")] + lines[i:])


def line_endings(text: str, rng: random.Random) -> str:
    return rng.choice([text.replace("\n", "\r\n"), text.replace("\n", "\r"),
                       "".join(c + ("\r" if c == "\n" and rng.random() < 0.3 else "") for c in text)])


def bytes_in_text(text: str, rng: random.Random) -> str:
    """A byte-order mark, a tab, a form feed, a NUL or a lone surrogate (written as bytes that
    are not UTF-8) somewhere in the text."""
    i = rng.randrange(len(text) + 1)
    return text[:i] + rng.choice(["\ufeff", "\t", "\f", "\x00", "\udcff", "\u202e", "\u00a0"]) + text[i:]


PY_MUTATIONS = (drop_line, duplicate_line, swap_lines, reindent_line, cut_short, replace_number, respell_name,
                swap_operator, unusual_assignment, starred_launch, insert_snippet, insert_snippet, line_endings,
                bytes_in_text)
CUDA_MUTATIONS = (drop_line, duplicate_line, swap_lines, cut_short, replace_number, respell_name, swap_operator,
                  line_endings, bytes_in_text)


# A mutant may grow (a doubled line, a snippet), not balloon: fifty copies of a file written
# on one line (carriage returns only) are 13,000 lines, past any per-file budget by size alone.
MAX_GROWTH = 100_000


def mutate(name: str, text: str, rng: random.Random) -> str:
    cuda = not name.endswith(".py")
    for _ in range(rng.choice([1, 1, 2, 3])):
        if not text:
            break
        mutation = rng.choice(CUDA_MUTATIONS if cuda else PY_MUTATIONS)
        mutated = insert_snippet(text, rng, cuda=True) if cuda and rng.random() < 0.2 else mutation(text, rng)
        text = mutated if len(mutated) <= len(text) + MAX_GROWTH else text
    return text


# ------------------------------------------------------------------ generated extremes

HEAD = ("import triton\nimport triton.language as tl\n\n\n")


def long_kernel(rng: random.Random) -> str:
    body = "".join(f"    y = tl.where(y > {i % 7}, y, t * {i})\n" for i in range(rng.choice([1000, 2000])))
    return (HEAD + "@triton.jit\ndef long_kernel(x_ptr, n, BLOCK: tl.constexpr):\n"
            "    offs = tl.arange(0, BLOCK)\n    y = tl.load(x_ptr + offs)\n    t = y\n" + body +
            "    tl.atomic_add(x_ptr + offs, y)\n")


def branching_helpers(rng: random.Random) -> str:
    """Many branches, each calling many helpers: the shape whose inference once grew exponentially."""
    helpers = rng.choice([8, 20])
    text = HEAD
    for h in range(helpers):
        text += (f"@triton.jit\ndef helper_{h}(v, w):\n    if w > 0:\n        return v * w\n"
                 f"    return {'helper_' + str(h - 1) + '(v, w - 1)' if h else 'v'}\n\n\n")
    body = "".join(f"    if c == {b}:\n        acc = helper_{b % helpers}(acc, c) + helper_{(b * 7) % helpers}(acc, 1)\n"
                   for b in range(rng.choice([30, 80])))
    return (text + "@triton.jit\ndef branchy(x_ptr, c, BLOCK: tl.constexpr):\n    offs = tl.arange(0, BLOCK)\n"
            "    acc = tl.load(x_ptr + offs)\n" + body + "    tl.atomic_add(x_ptr + offs, acc)\n")


def deep_chain(rng: random.Random) -> str:
    n = rng.choice([300, 900, 990, 1200])
    shape = rng.choice(["x" + ".a" * n, "-" * n + "x", " + ".join(["x"] * n), "x" + "[0]" * n, "not " * n + "x"])
    return HEAD + "@triton.jit\ndef deep(x_ptr, BLOCK: tl.constexpr):\n    x = tl.load(x_ptr)\n" \
                  f"    y = {shape}\n    tl.store(x_ptr, y)\n"


EXTREMES = (long_kernel, branching_helpers, deep_chain)


def mutants(seed: int, count: int, seeds: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`count` (file name, text) pairs, the same for the same seed and seed files."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if rng.random() < 0.04:
            make = rng.choice(EXTREMES)
            out.append((f"m{i:05d}_{make.__name__}.py", make(rng)))
            continue
        name, text = rng.choice(seeds)
        out.append((f"m{i:05d}_{name}", mutate(name, text, rng)))
    return out
