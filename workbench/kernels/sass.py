"""Reading SASS, the instructions `nvdisasm` prints: each instruction's opcode (a memory access with its
width in bits), branch targets, and the loop that holds a kernel's work (the one with the most FFMAs).
`workbench.kernels.static` reports what it finds.

    >>> sass = '''
    ... .L_x_0:
    ...     /*0000*/  LDS.128 R4, [R2] ;
    ...     /*0010*/  FFMA R8, R4, R5, R8 ;
    ...     /*0020*/  @P0 BRA `(.L_x_0) ;
    ...     /*0030*/  EXIT ;
    ... '''
    >>> main_loop_mix(sass_instructions(sass))
    ['LDS.128', 'FFMA', 'BRA']
"""

from __future__ import annotations

import re
from typing import Any

_INSTRUCTION = re.compile(
    r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?\s*([^;]*);"
)
_LABEL = re.compile(r"^(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def sass_instructions(sass: str) -> list[tuple[int, str, str | None]]:
    """(address, opcode, branch target address) of each SASS instruction, NOPs left out; a memory access's
    opcode carries its width in bits (``LDS.128``, ``LDG.32``: see `_access_width`)."""
    labels: dict[str, int] = {}
    pending: list[str] = []
    parsed: list[tuple[int, str, str | None]] = []
    for line in sass.splitlines():
        label = _LABEL.match(line.strip())
        if label:
            pending.append(label.group(1))
            continue
        found = _INSTRUCTION.search(line)
        if not found:
            continue
        address = int(found.group(1), 16)
        for name in pending:
            labels[name] = address
        pending = []
        jump = _TARGET.search(found.group(5) or "")
        opcode = found.group(3)
        if opcode in _ACCESSES:
            opcode = f"{opcode}.{_access_width(found.group(4) or '')}"
        parsed.append((address, opcode, jump.group(1) if jump else None))
    return [
        (address, opcode, labels.get(name) if name else None)
        for address, opcode, name in parsed
        if opcode != "NOP"
    ]


_ACCESSES = ("LDS", "STS", "LDG", "STG", "LD", "ST")


def _access_width(modifiers: str) -> int:
    """Bits per thread of a load or store from its SASS modifiers (``.E.128``, ``.U.64``; none: 32).

    Example:
        >>> _access_width(".E.128"), _access_width(".U8"), _access_width("")
        (128, 8, 32)
    """
    found = re.findall(r"\.U?(8|16|32|64|128)\b", modifiers)
    return int(found[-1]) if found else 32


def base_opcode(opcode: str) -> str:
    return opcode.split(".")[0]


def main_loop_mix(instructions: list[tuple[int, str, Any]]) -> list[str]:
    """The opcodes of the loop (a backward branch's span) holding the most FFMAs (the smallest such loop);
    the whole kernel when no loop holds one."""
    best: tuple[int, list[str]] = (0, [])
    for address, opcode, target in instructions:
        if opcode in ("BRA", "JMP") and target is not None and target <= address:
            body = [op for a, op, _ in instructions if target <= a <= address]
            count = body.count("FFMA")
            if count > best[0] or (count == best[0] and count and len(body) < len(best[1])):
                best = (count, body)
    return best[1] if best[0] else [op for _, op, _ in instructions]


def ffma_share(loop: list[str]) -> float:
    """FFMA / instructions of `loop` (`main_loop_mix`'s opcodes); 0 without FFMA."""
    return loop.count("FFMA") / max(len(loop), 1)
