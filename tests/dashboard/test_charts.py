"""The SVG geometry of the activity charts (no database: pure arithmetic)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from portqueue.dashboard import charts

START = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
STARTS = [START + timedelta(minutes=n) for n in range(4)]


@pytest.mark.parametrize(("value", "ceiling"), [
    (0, 1), (0.003, 0.005), (1, 1), (1.2, 2), (3, 5), (7, 10), (10, 10), (11, 20), (480, 500)])
def test_nice_ceiling(value: float, ceiling: float) -> None:
    assert charts.nice_ceiling(value) == pytest.approx(ceiling)


def test_stacked_bars_scale_to_the_tallest_stack() -> None:
    chart = charts.stacked_bars(STARTS, [("completed", [4, 0, 1, 0]), ("failed", [1, 0, 0, 0])])
    assert [tick.label for tick in chart.y_ticks] == ["0", "1.25", "2.5", "3.75", "5"]
    completed, failed, small = chart.bars
    assert completed.height == pytest.approx(chart.plot_height * 4 / 5)
    assert completed.y + completed.height == pytest.approx(chart.bottom)
    assert failed.y + failed.height == pytest.approx(completed.y)  # stacked on top
    assert small.x > failed.x and small.title == "09:02 UTC: 1 completed"
    assert all(bar.x + bar.width <= chart.right for bar in chart.bars)


def test_lines_break_where_there_is_no_value() -> None:
    chart = charts.lines(STARTS, [("p95", [0.5, 1.0, None, 2.0])], "s")
    (line,) = chart.lines
    assert len(line.points.split()) == 2
    (dot,) = chart.dots  # the lone last value
    assert dot.kind == "p95"
    assert [tick.label for tick in chart.y_ticks][-1] == "2 s"
    assert chart.y_ticks[1].label == "500 ms"
