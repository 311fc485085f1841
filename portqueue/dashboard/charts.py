"""Charts as server-rendered SVG geometry: the templates draw the shapes
computed here (rectangles, polylines, tick labels) as inline ``<svg>``, with
colours from the stylesheet. No script and no inline style: the CSP allows
neither, and presentation attributes need neither."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

WIDTH, HEIGHT = 960, 180
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 10, 26
X_LABELS = 8


@dataclass(frozen=True)
class Tick:
    at: float  # pixel position along its axis
    label: str


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    kind: str  # CSS class
    title: str


@dataclass(frozen=True)
class Line:
    points: str  # "x,y x,y …" for one unbroken run of values
    kind: str


@dataclass
class Chart:
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    bars: list[Bar] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    dots: list[Bar] = field(default_factory=list)  # a value with no neighbour to join
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    plot_width: int = WIDTH - LEFT - RIGHT
    plot_height: int = HEIGHT - TOP - BOTTOM

    @property
    def bottom(self) -> int:
        return self.top + self.plot_height

    @property
    def right(self) -> int:
        return self.left + self.plot_width


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value``."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power * (1 + 1e-9):
            return float(step * power)
    return 10.0 * power


def _number(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:g} s" if value >= 1 or value == 0 else f"{value * 1000:g} ms"
    if unit == "%":
        return f"{value:g} %"
    return f"{value:g}"


def _y_ticks(top_value: float, unit: str) -> list[Tick]:
    return [Tick(TOP + (HEIGHT - TOP - BOTTOM) * (1 - n / 4), _number(top_value * n / 4, unit))
            for n in range(5)]


def _x_ticks(starts: Sequence[datetime], slot: float) -> list[Tick]:
    every = max(1, math.ceil(len(starts) / X_LABELS))
    return [Tick(LEFT + slot * i, moment.astimezone(timezone.utc).strftime("%H:%M"))
            for i, moment in enumerate(starts) if i % every == 0]


def _scale(value: float, top_value: float) -> float:
    return (HEIGHT - TOP - BOTTOM) * min(value, top_value) / top_value


def stacked_bars(starts: Sequence[datetime],
                 series: Sequence[tuple[str, Sequence[int]]]) -> Chart:
    """One bar per bucket, ``series`` stacked bottom up (kind, values)."""
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(starts))
    totals = [sum(values[i] for _, values in series) for i in range(len(starts))]
    top_value = nice_ceiling(max(totals, default=0))
    chart = Chart(_y_ticks(top_value, ""), _x_ticks(starts, slot))
    gap = min(2.0, slot * 0.2)
    for i, moment in enumerate(starts):
        base = float(chart.bottom)
        for kind, values in series:
            height = _scale(values[i], top_value)
            if height > 0:
                base -= height
                chart.bars.append(Bar(
                    LEFT + slot * i + gap / 2, base, slot - gap, height, kind,
                    f"{moment.astimezone(timezone.utc):%H:%M} UTC: {values[i]} {kind}"))
    return chart


def lines(starts: Sequence[datetime], series: Sequence[tuple[str, Sequence[float | None]]],
          unit: str, floor_top: float = 0.0) -> Chart:
    """One polyline per series through each bucket's middle; a gap where a
    bucket has no value (nothing started, nothing settled)."""
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(starts))
    known = [v for _, values in series for v in values if v is not None]
    top_value = nice_ceiling(max([*known, floor_top], default=0))
    chart = Chart(_y_ticks(top_value, unit), _x_ticks(starts, slot))
    for kind, values in series:
        run: list[tuple[float, float]] = []
        for i, value in enumerate([*values, None]):
            if value is not None:
                run.append((LEFT + slot * (i + 0.5), chart.bottom - _scale(value, top_value)))
                continue
            if len(run) == 1:
                x, y = run[0]
                chart.dots.append(Bar(x - 2, y - 2, 4, 4, kind, ""))
            elif run:
                chart.lines.append(Line(" ".join(f"{x:.1f},{y:.1f}" for x, y in run), kind))
            run = []
    return chart
