"""Finds the hot inner loop of one function in AArch64 assembly (clang's or gcc's) and counts its work.

No markers go into the kernel sources, so the compiler sees exactly the engine's code; instead the assembly
is cut into basic blocks, the natural loops are found from the back edges, and the hot loop is the one doing
the most multiply-accumulates among the innermost loops that do any (a prefetch loop nested inside with no
work does not make it an outer loop). llvm-mca needs straight-line code: one trip is the shortest path from
the loop header back to it that passes every multiply-accumulate of the loop (rare branches, like a prefetch
switching to its next address range, are left out).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

LABEL = re.compile(r"^([.\w$]+|\d+):")
# b.ne (clang) and bne (gcc) are the same conditional branch.
BRANCH = re.compile(r"^(b|b\.\w+|b(?:eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le)|cbn?z|tbn?z)\s+(.*)$")
CALL = re.compile(r"^(bl|b)\s+([A-Za-z_][\w$.]*)$")
# Multiply-accumulates per instruction: NEON (128-bit) forms; "sveN" = N per 128 bits of the SVE vector.
INT_MACS = [
    (re.compile(r"^(sdot|udot|usdot|sudot)\s+v\d+\.4s"), 16),
    (re.compile(r"^(smmla|ummla|usmmla)\s+v\d+\.4s"), 32),
    (re.compile(r"^(smull2?|umull2?|smlal2?|umlal2?)\s+v\d+\.8h"), 8),
    (re.compile(r"^(sdot|udot|usdot|sudot)\s+z\d+\.s"), "sve16"),
    (re.compile(r"^(smmla|ummla|usmmla)\s+z\d+\.s"), "sve32"),
]
# A lone token through a 2-token instruction (our decode on i8mm: SMMLA with the token paired with a copy of
# itself): half of its multiply-accumulates are padding, so it counts the useful half.
INT_ONE_TOKEN = [(INT_MACS[1][0], 16), *(e for i, e in enumerate(INT_MACS) if i != 1)]
# llama.cpp's bf16 dot on ARM multiplies in fp32 and adds in double one product at a time: its work is the fmul.
MUL_MACS = [(re.compile(r"^fmul\s+v\d+\.4s"), 4), (re.compile(r"^fmul\s+s\d+"), 1)]  # gcc leaves it scalar
FLOAT_MACS = [
    (re.compile(r"^bfdot\s+v\d+\.4s"), 8),
    (re.compile(r"^bfmmla\s+v\d+\.4s"), 16),
    (re.compile(r"^fmla\s+v\d+\.4s"), 4),
    (re.compile(r"^fmla\s+v\d+\.8h"), 8),
    (re.compile(r"^bfdot\s+z\d+\.s"), "sve8"),
    (re.compile(r"^bfmmla\s+z\d+\.s"), "sve16"),
    (re.compile(r"^(fmla|fmad)\s+z\d+\.s"), "sve4"),
    (re.compile(r"^(fmla|fmad)\s+z\d+\.h"), "sve8"),
]


@dataclass
class Loop:
    function: str
    lines: list[str]     # one trip, straight-line, for llvm-mca
    macs: int            # multiply-accumulates of that trip
    blocks: int          # basic blocks on it
    instructions: int = field(init=False)

    def __post_init__(self):
        self.instructions = len(self.lines)


@dataclass
class Block:
    label: str | None
    lines: list[str] = field(default_factory=list)
    succ: list[int] = field(default_factory=list)
    work: int = 0


def _clean(line: str) -> str:
    return line.split("//")[0].strip()


def function_body(asm: str, name: str) -> list[str]:
    """The cleaned lines of function `name` (directives dropped), up to the end of the function."""
    lines = asm.splitlines()
    mangled = re.compile(rf"^_Z{len(name)}{re.escape(name)}\w*:$")  # a C++ function of that name
    try:
        start = next(i for i, l in enumerate(lines) if _clean(l) == f"{name}:" or mangled.match(_clean(l)))
    except StopIteration:
        raise LookupError(f"function {name} not found in the assembly") from None
    body = []
    for line in lines[start + 1:]:
        s = _clean(line)
        if s.startswith((".Lfunc_end", ".size", ".cfi_endproc")):
            break
        if s and (s.startswith(".inst") or not (s.startswith(".") and not LABEL.match(s))):
            body.append(s)
    return body


def macs_of(instruction: str, kind: str, sve_bits: int = 128) -> int:
    for pattern, macs in {"int": INT_MACS, "int1": INT_ONE_TOKEN, "float": FLOAT_MACS, "mul": MUL_MACS}[kind]:
        if pattern.match(instruction):
            return int(macs[3:]) * sve_bits // 128 if isinstance(macs, str) else macs
    return 0


def _blocks(body: list[str], kind: str, sve_bits: int) -> list[Block]:
    blocks = [Block(None)]
    for s in body:
        m = LABEL.match(s)
        if m:
            if blocks[-1].lines or blocks[-1].label is not None:
                blocks.append(Block(m.group(1)))
            else:
                blocks[-1].label = m.group(1)
            s = s[m.end():].strip()
            if not s:
                continue
        blocks[-1].lines.append(s)
        blocks[-1].work += macs_of(s, kind, sve_bits)
        if BRANCH.match(s) or s == "ret":
            blocks.append(Block(None))
    where: dict[str, list[int]] = {}
    for i, b in enumerate(blocks):
        if b.label is not None:
            where.setdefault(b.label, []).append(i)

    def target(label: str, i: int) -> int | None:
        if re.fullmatch(r"\d+[bf]", label):  # numeric local labels of inline asm: 1b back, 1f forward
            cands = where.get(label[:-1], [])
            back = [c for c in cands if c <= i] if label[-1] == "b" else [c for c in cands if c > i]
            return (back[-1] if label[-1] == "b" else back[0]) if back else None
        return where.get(label, [None])[0]

    for i, b in enumerate(blocks):
        last = b.lines[-1] if b.lines else ""
        m = BRANCH.match(last)
        if m and not CALL.match(last):
            t = target(m.group(2).split(",")[-1].strip(), i)
            if t is not None:
                b.succ.append(t)
        if last != "ret" and not (m and m.group(1) == "b") and i + 1 < len(blocks):
            b.succ.append(i + 1)
    return blocks


def _natural_loops(blocks: list[Block]) -> list[tuple[int, set[int]]]:
    """(header, blocks) for every back edge found by a depth-first walk from the entry."""
    loops, state = [], {}
    preds: dict[int, list[int]] = {i: [] for i in range(len(blocks))}
    for j, b in enumerate(blocks):
        for i in b.succ:
            preds[i].append(j)
    stack = [(0, iter(blocks[0].succ))]
    state[0] = "open"
    while stack:
        node, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            state[node] = "done"
            stack.pop()
        elif state.get(nxt) == "open":
            body, todo = {nxt, node}, ([] if node == nxt else [node])  # never walk past the header
            while todo:
                for p in preds[todo.pop()]:
                    if p not in body:
                        body.add(p)
                        todo.append(p)
            loops.append((nxt, body))
        elif nxt not in state:
            state[nxt] = "open"
            stack.append((nxt, iter(blocks[nxt].succ)))
    return loops


def _trip(blocks: list[Block], header: int, body: set[int]) -> list[int]:
    """Shortest (in instructions) simple path header -> header through the loop with all of its work."""
    total = sum(blocks[i].work for i in body)
    best: list[int] | None = None
    best_len = None
    stack = [(header, [header])]
    steps = 0
    while stack and steps < 200000:
        steps += 1
        node, path = stack.pop()
        for s in blocks[node].succ:
            if s == header:
                if sum(blocks[i].work for i in path) == total:
                    n = sum(len(blocks[i].lines) for i in path)
                    if best_len is None or n < best_len:
                        best, best_len = path, n
            elif s in body and s not in path:
                stack.append((s, path + [s]))
    if best is None:  # the work sits on alternative paths (an if/else of two kernels): not one loop to time
        raise LookupError("no single trip holds the loop's work")
    return best


def _hot_loop_in(name: str, body: list[str], kind: str, sve_bits: int, want: str, avoid: str) -> Loop:
    blocks = _blocks(body, kind, sve_bits)

    def fits(members: set[int]) -> bool:
        text = "\n".join(l for i in members for l in blocks[i].lines)
        return (not want or re.search(want, text, re.M)) and not (avoid and re.search(avoid, text, re.M))

    loops = [(h, b, sum(blocks[i].work for i in b)) for h, b in _natural_loops(blocks) if fits(b)]
    working = [(h, b, w) for h, b, w in loops if w > 0]
    innermost = [(h, b, w) for h, b, w in working if not any(b2 < b for _, b2, _ in working)]
    if not innermost:
        raise LookupError("no working loop")
    header, members, work = max(innermost, key=lambda t: t[2])
    path = _trip(blocks, header, members)
    # Labels are gone from the trip; a branch to a numeric local label (3b) must still name something.
    lines = [re.sub(r"([\s,])(\d+)[bf]$", r"\1.Llocal\2", l) if BRANCH.match(l) else l for i in path for l in blocks[i].lines]
    return Loop(function=name, lines=lines, macs=work, blocks=len(path))


def callees(body: list[str]) -> list[str]:
    """Functions called or tail-called by name (not local labels)."""
    out = []
    for s in body:
        m = CALL.match(s)
        if m and not m.group(2).startswith(".L") and m.group(2) not in out:
            out.append(m.group(2))
    return out


def hot_loop(asm: str, name: str, kind: str, sve_bits: int = 128, depth: int = 3, decode=None, want: str = "",
             avoid: str = "") -> Loop:
    """The hot loop of `name` or of what it calls, `depth` calls deep (an est_* wrapper calls the kernel's
    tile function); `kind` "int", "int1" (int for one token: SMMLA's padded token is not work), "float" or "mul"
    says which instructions are the work. decode(words) turns
    `.inst 0x...` words (inline asm spelling out newer instructions) into assembly text. want / avoid: regexes
    a loop's instructions must / must not match (to pick one of a function's code paths)."""
    best, seen, todo = None, set(), [(name, 0)]
    while todo:
        fn, d = todo.pop(0)
        if fn in seen:
            continue
        seen.add(fn)
        try:
            body = function_body(asm, fn)
        except LookupError:
            if fn == name:
                raise
            continue  # a library function (memcpy, ...)
        words = [l.split()[1] for l in body if l.startswith(".inst")]
        if words:
            if decode is None:
                raise ValueError(f"{fn} has .inst words and no decoder was given")
            text = iter(decode(words))
            body = [next(text) if l.startswith(".inst") else l for l in body]
        try:
            loop = _hot_loop_in(fn, body, kind, sve_bits, want, avoid)
            if best is None or loop.macs > best.macs:
                best = loop
        except LookupError:
            pass
        if d < depth:
            todo += [(c, d + 1) for c in callees(body)]
    if best is None:
        raise LookupError(f"no loop with {kind} multiply-accumulates in {name} or what it calls")
    return best
