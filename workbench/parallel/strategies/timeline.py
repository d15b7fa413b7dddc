"""Pipeline-parallel step timelines: the bubble fraction, measured and ideal, from ``timeline`` events.

Each stage of a pipeline reports, on every logged step, the spans it spent on forward (``"F"``) and
backward (``"B"``) passes of each micro-batch (see `workbench.train.events`)::

    {"stage": 0, "stages": 2, "microbatches": 4, "schedule": "1F1B",
     "spans": [["F", 0, 1700000000.00, 1700000000.01], ["F", 1, 1700000000.01, 1700000000.02], ...]}

`StepTimeline` gathers one step's payloads (one per stage) and measures how much of the step the stages
sat idle: ``1 − Σ busy / (p × makespan)``. With p stages, m micro-batches and equal-length passes a
GPipe or 1F1B schedule idles ``(p − 1) / (m + p − 1)`` of the time (`ideal_bubble_fraction`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from workbench._validate import check_int

KINDS = ("F", "B")
_KEYS = ("stage", "stages", "microbatches", "schedule", "spans")


class Span(NamedTuple):
    """One forward or backward pass of one micro-batch on one stage; times in s from the step start."""

    stage: int
    kind: str  # "F" or "B"
    microbatch: int
    start: float
    end: float


def ideal_bubble_fraction(stages: int, microbatches: int) -> float:
    """The idle fraction ``(p − 1) / (m + p − 1)`` of a pipeline of p stages and m micro-batches.

    Example:
        >>> ideal_bubble_fraction(2, 2)  # 1/3
        0.3333333333333333
        >>> ideal_bubble_fraction(4, 12)
        0.2
    """
    p = check_int("stages", stages, minimum=1)
    m = check_int("microbatches", microbatches, minimum=1)
    return (p - 1) / (m + p - 1)


def measured_bubble_fraction(timelines: Iterable[Mapping[str, Any]]) -> float:
    """The idle fraction of one step from its ``timeline`` payloads (one per stage, any order).

    ``1 − Σ busy / (p × makespan)``: busy is the summed span durations, makespan the latest end minus the
    earliest start over all stages. Raises ValueError if stages are missing or repeated, the payloads
    disagree on ``stages``, ``microbatches`` or ``schedule``, or a span is malformed.

    Example (GPipe, 2 stages, 2 micro-batches, every pass 1 s long):
        >>> stage_0 = {"stage": 0, "stages": 2, "microbatches": 2, "schedule": "GPipe",
        ...            "spans": [["F", 0, 0, 1], ["F", 1, 1, 2], ["B", 0, 4, 5], ["B", 1, 5, 6]]}
        >>> stage_1 = {"stage": 1, "stages": 2, "microbatches": 2, "schedule": "GPipe",
        ...            "spans": [["F", 0, 1, 2], ["F", 1, 2, 3], ["B", 0, 3, 4], ["B", 1, 4, 5]]}
        >>> round(measured_bubble_fraction([stage_0, stage_1]), 4)  # 8 s busy of 2 stages × 6 s
        0.3333
    """
    return StepTimeline.from_payloads(timelines).bubble


@dataclass(frozen=True)
class StepTimeline:
    """One pipeline step: every stage's spans, with times in seconds from the step's first span.

    Build it with `from_payloads`; `spans` are sorted by stage, then start time.

    Example (1F1B, 2 stages, 4 micro-batches, unit passes: stage 0 waits 1 s for the first backward and
    1 s for the last):
        >>> spans_1 = [[k, i, 1 + 2 * i + (k == "B"), 2 + 2 * i + (k == "B")] for i in range(4) for k in "FB"]
        >>> spans_0 = [["F", 0, 0, 1], ["F", 1, 1, 2], ["B", 0, 3, 4], ["F", 2, 4, 5],
        ...            ["B", 1, 5, 6], ["F", 3, 6, 7], ["B", 2, 7, 8], ["B", 3, 9, 10]]
        >>> step = StepTimeline.from_payloads(
        ...     {"stage": s, "stages": 2, "microbatches": 4, "schedule": "1F1B", "spans": spans}
        ...     for s, spans in enumerate([spans_0, spans_1]))
        >>> step.makespan, round(step.bubble, 4), step.ideal_bubble
        (10.0, 0.2, 0.2)
        >>> step.spans[0]
        Span(stage=0, kind='F', microbatch=0, start=0.0, end=1.0)
    """

    schedule: str
    stages: int
    microbatches: int
    spans: tuple[Span, ...]

    @classmethod
    def from_payloads(cls, payloads: Iterable[Mapping[str, Any]]) -> StepTimeline:
        """Check one step's payloads (one per stage) and offset their times to start at 0."""
        payloads = list(payloads)
        if not payloads:
            raise ValueError("no timeline payloads: expected one per pipeline stage")
        for payload in payloads:
            missing = [key for key in _KEYS if key not in payload]
            if missing:
                raise ValueError(f"timeline payload lacks {', '.join(missing)}; it needs {', '.join(_KEYS)}")
        first = payloads[0]
        stages = check_int("timeline stages", first["stages"], minimum=1)
        microbatches = check_int("timeline microbatches", first["microbatches"], minimum=1)
        for key in ("stages", "microbatches", "schedule"):
            values = sorted({repr(payload[key]) for payload in payloads})
            if len(values) > 1:
                raise ValueError(f"the timeline payloads of one step disagree on {key}: {', '.join(values)}")
        seen: set[int] = set()
        raw: list[tuple[int, str, int, float, float]] = []
        for payload in payloads:
            stage = payload["stage"]
            if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < stages:
                raise ValueError(f"timeline stage must be an integer in [0, {stages}), got {stage!r}")
            if stage in seen:
                raise ValueError(f"stage {stage} appears twice in one step's timeline payloads")
            seen.add(stage)
            raw.extend(_span(stage, index, span) for index, span in enumerate(payload["spans"]))
        missing_stages = sorted(set(range(stages)) - seen)
        if missing_stages:
            raise ValueError(f"stages {missing_stages} of {stages} have no timeline payload for this step")
        if not raw:
            raise ValueError("the timeline payloads hold no spans")
        t0 = min(span[3] for span in raw)
        spans = sorted(
            (Span(s, k, i, start - t0, end - t0) for s, k, i, start, end in raw),
            key=lambda span: (span.stage, span.start, span.end),
        )
        return cls(str(first["schedule"]), stages, microbatches, tuple(spans))

    @property
    def makespan(self) -> float:
        """Seconds from the first span's start to the last span's end, over all stages."""
        return max(span.end for span in self.spans)

    @property
    def bubble(self) -> float:
        """The measured idle fraction ``1 − Σ busy / (p × makespan)`` (0 when no span takes time)."""
        busy = sum(span.end - span.start for span in self.spans)
        makespan = self.makespan
        return 1.0 - busy / (self.stages * makespan) if makespan > 0 else 0.0

    @property
    def ideal_bubble(self) -> float:
        """``(p − 1) / (m + p − 1)``: the idle fraction with equal-length passes."""
        return ideal_bubble_fraction(self.stages, self.microbatches)


def _span(stage: int, index: int, span: Any) -> tuple[int, str, int, float, float]:
    """Check one ``[kind, microbatch, start, end]`` entry of a stage's spans.

    Micro-batch indices may reach past ``microbatches``: a step that accumulates gradients over several
    batches runs the schedule once per batch, and its spans count micro-batches across all of them.
    """
    where = f"stage {stage} span {index}"
    if isinstance(span, str | bytes) or not isinstance(span, list | tuple) or len(span) != 4:
        raise ValueError(f"{where} must be [kind, microbatch, start, end], got {span!r}")
    kind, microbatch, start, end = span
    if kind not in KINDS:
        raise ValueError(f"{where} has kind {kind!r}; expected 'F' (forward) or 'B' (backward)")
    if isinstance(microbatch, bool) or not isinstance(microbatch, int) or microbatch < 0:
        raise ValueError(f"{where} has micro-batch {microbatch!r}; expected an integer ≥ 0")
    for name, value in (("start", start), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{where} has {name} {value!r}; expected a finite time in seconds")
    if end < start:
        raise ValueError(f"{where} ends before it starts ({start} > {end})")
    return stage, kind, microbatch, float(start), float(end)
