"""The GPU check's report: each check's value against its baseline and target, and the environment.

`GpuReport.write(folder)` writes ``<folder>/<device>.md`` (a table to read) and ``<folder>/<device>.json``
(the same, for programs), ``<device>`` being the GPU's name in lower case with dashes.

Example:
    >>> check = Check("matmul fp32 4096³", 0.62, "× cuBLAS", "torch.mm (TF32 off)", ">= 0.75", False)
    >>> check.verdict
    'FAIL'
    >>> report = GpuReport({"gpu": "NVIDIA H100 80GB HBM3"}, [check], [], 12.0)
    >>> report.slug
    'nvidia-h100-80gb-hbm3'
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from workbench.tables import markdown_table, text_table

_PACKAGE = Path(__file__).resolve().parents[1]
# where stored reports are: in the wheel's package data, else in a clone's docs/gpu
_STORED = (_PACKAGE / "resources" / "gpu", _PACKAGE.parent / "docs" / "gpu")


@dataclass(frozen=True)
class Check:
    """One measured check: ``value`` in ``unit`` (for a ratio, ours over ``baseline``), the issue's
    ``target`` (empty: reported, no target) and whether it was met (None without a target)."""

    name: str
    value: float | None
    unit: str
    baseline: str
    target: str
    passed: bool | None
    detail: str = ""

    @property
    def verdict(self) -> str:
        return {True: "pass", False: "FAIL", None: "—"}[self.passed]

    def cells(self) -> list[str]:
        value = "—" if self.value is None else f"{self.value:,.4g}"
        return [self.name, value, self.unit, self.baseline, self.target or "—", self.verdict, self.detail]


def at_least(name: str, value: float, unit: str, baseline: str, floor: float, detail: str = "") -> Check:
    """A check that passes when `value` ≥ `floor`."""
    return Check(name, value, unit, baseline, f">= {floor:g}", value >= floor, detail)


def at_most(name: str, value: float, unit: str, baseline: str, ceiling: float, detail: str = "") -> Check:
    """A check that passes when `value` ≤ `ceiling`."""
    return Check(name, value, unit, baseline, f"<= {ceiling:g}", value <= ceiling, detail)


def reported(name: str, value: float | None, unit: str, baseline: str = "", detail: str = "") -> Check:
    """A measurement reported without a target."""
    return Check(name, value, unit, baseline, "", None, detail)


def failed(name: str, error: str) -> Check:
    """A step that could not measure: its error is the detail."""
    return Check(name, None, "", "", "runs", False, error)


_HEADERS = ("check", "value", "unit", "baseline", "target", "verdict", "detail")


@dataclass
class GpuReport:
    """Everything one run of the check measured: environment, checks in order, the steps left out (with
    why) and the wall seconds."""

    environment: dict[str, str]
    checks: list[Check]
    skipped: list[tuple[str, str]]
    seconds: float
    steps: list[tuple[str, float]] = field(default_factory=list)  # each step that ran, its wall seconds
    notes: list[str] = field(default_factory=list)  # paragraphs shown under the title (how runs were joined)

    @property
    def slug(self) -> str:
        name = self.environment.get("gpu") or "no-gpu"
        return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.passed is False]

    def markdown(self) -> str:
        env = self.environment
        lines = [
            f"# GPU check: {env.get('gpu', 'no GPU')}, {env.get('date', '')}",
            "",
            "Written by `workbench gpu-check` (`make gpu-check`), which measures it again on such a machine.",
            "",
            *(line for note in self.notes for line in (note, "")),
            markdown_table(("environment", ""), [[key, value] for key, value in env.items()]),
            "",
            f"{len(self.checks)} checks, {len(self.failures)} failed, {self.seconds:.0f} s in all.",
            "",
            markdown_table(_HEADERS, [check.cells() for check in self.checks]),
        ]
        if self.steps:
            lines += ["", "Steps and their wall time: " + ", ".join(f"{n} {s:.0f} s" for n, s in self.steps)]
        if self.skipped:
            lines += ["", "Not run:", ""] + [f"- {name}: {why}" for name, why in self.skipped]
        return "\n".join(lines) + "\n"

    def as_json(self) -> dict:
        return {
            "environment": self.environment,
            "notes": self.notes,
            "seconds": self.seconds,
            "steps": [{"name": name, "seconds": seconds} for name, seconds in self.steps],
            "checks": [dataclasses.asdict(check) | {"verdict": check.verdict} for check in self.checks],
            "skipped": [{"name": name, "reason": why} for name, why in self.skipped],
        }

    def write(self, folder: str | Path) -> tuple[Path, Path]:
        """Write ``<slug>.md`` and ``<slug>.json`` into `folder` (created); return both paths."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        markdown, data = folder / f"{self.slug}.md", folder / f"{self.slug}.json"
        markdown.write_text(self.markdown())
        data.write_text(json.dumps(self.as_json(), indent=2) + "\n")
        return markdown, data

    def rows(self, *prefixes: str) -> list[Check]:
        """The checks whose names start with one of `prefixes` (all without)."""
        return [check for check in self.checks if not prefixes or check.name.startswith(prefixes)]

    def table(self, *prefixes: str) -> str:
        """Those checks as a text table, titled with the GPU and the date they were measured on."""
        title = (
            f"measured on {self.environment.get('gpu')}, {self.environment.get('date')} (workbench gpu-check)"
        )
        return title + "\n" + text_table(_HEADERS, [check.cells() for check in self.rows(*prefixes)])

    @classmethod
    def from_json(cls, data: dict) -> GpuReport:
        """The report `as_json` wrote (the checks' verdicts are derived again)."""
        names = [field.name for field in dataclasses.fields(Check)]
        checks = [Check(**{key: check[key] for key in names}) for check in data["checks"]]
        return cls(
            data["environment"],
            checks,
            [(entry["name"], entry["reason"]) for entry in data.get("skipped", [])],
            data["seconds"],
            [(entry["name"], entry["seconds"]) for entry in data.get("steps", [])],
            data.get("notes", []),
        )


def stored_report(gpu: str = "nvidia-h100-80gb-hbm3") -> GpuReport:
    """A GPU report that comes with workbench (measured on that GPU, see docs/gpu/): what the tutorials show
    beside the CPU runs a learner does.

    Raises:
        FileNotFoundError: no stored report for `gpu`; the message lists those there are.

    Example:
        >>> report = stored_report()
        >>> report.environment["gpu"], len(report.rows("matmul register")) >= 1
        ('NVIDIA H100 80GB HBM3', True)
    """
    for folder in _STORED:
        path = folder / f"{gpu}.json"
        if path.exists():
            return GpuReport.from_json(json.loads(path.read_text()))
    known = sorted({path.stem for folder in _STORED for path in folder.glob("*.json")})
    raise FileNotFoundError(f"no stored GPU report {gpu!r}; stored: {', '.join(known) or 'none'}")
