# ruff: noqa: RUF001  (the reports print a real minus sign)
"""The metric catalogue: one definition per metric, the one knee rule, and how numbers are printed."""

from __future__ import annotations

import pytest

from roost import catalogue as C
from roost.catalogue import KNEE_FRACTION, find_knee, fmt_change, fmt_value


def test_every_metric_is_defined_once_with_a_unit_and_a_formula() -> None:
    names = [m.name for m in C.CATALOGUE.values()]
    assert len(names) == len(set(names)) >= 19 and list(C.CATALOGUE) == names
    for m in C.CATALOGUE.values():
        assert m.label and m.unit and len(m.definition) > 10, m


def test_a_metric_at_one_point_keeps_its_unit_and_direction() -> None:
    at = C.DECODE.at_prompt(2048)
    assert (at.name, at.label, at.unit, at.direction) == (
        "decode_tok_s@prompt=2048", "decode tok/s @ 2,048-token prompt", "tok/s", C.Direction.HIGHER)
    at = C.OUTPUT_THROUGHPUT.at_concurrency(16)
    assert (at.name, at.label) == ("output_tok_s@concurrency=16", "aggregate output tok/s @ 16 concurrent")
    assert C.DECODE.name == "decode_tok_s"  # the original is not changed (metrics are frozen)


def test_the_knee_is_the_lowest_concurrency_reaching_90_percent_of_peak() -> None:
    assert KNEE_FRACTION == 0.9
    # the Ornith 1.5 recipe's sweep shape: the peak at the --max-num-seqs cap (20), a drop past it
    knee = find_knee([(1, 60.0), (16, 450.0), (20, 490.3), (24, 405.7)])
    assert knee is not None
    assert (knee.concurrency, knee.output_tok_s, knee.peak_concurrency, knee.peak_output_tok_s) == (16, 450.0, 20, 490.3)
    assert knee.saturated and knee.tolerance == pytest.approx(0.1)
    knee = find_knee([(1, 60.0), (16, 441.2), (20, 490.3), (24, 405.7)])  # 441.2 < 0.9 * 490.3 = 441.27
    assert knee is not None and knee.concurrency == 20
    # still growing at the highest level measured: not saturated
    knee = find_knee([(1, 60.0), (4, 200.0), (8, 380.0)])
    assert knee is not None and (knee.concurrency, knee.saturated) == (8, False)


def test_the_knee_ignores_levels_without_a_rate_and_ties_go_to_fewer_users() -> None:
    assert find_knee([]) is None and find_knee([(4, None), (8, float("nan")), (16, 0.0)]) is None
    knee = find_knee([(8, 100.0), (4, 100.0), (2, None)])
    assert knee is not None and (knee.concurrency, knee.peak_concurrency) == (4, 4)


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [(12.61, "tok/s", "12.6 tok/s"), (0.54, "s", "0.54 s"), (0.1234, "s", "0.123 s"), (490.3, "tok/s", "490.3 tok/s"),
     (390070, "tokens", "390,070 tokens"), (3.0, "", "3"), (73.26, "%", "73.3%"), (4975.0, "tok/s", "4,975 tok/s"),
     (1.49, "x", "1.49x"), (16, "concurrent", "16 concurrent"), (None, "s", "—"), (float("nan"), "s", "—")],
)
def test_fmt_value(value: float | None, unit: str, text: str) -> None:
    assert fmt_value(value, unit) == text


def test_fmt_change() -> None:
    assert fmt_change(-12.698) == "−12.7%" and fmt_change(4.1) == "+4.1%" and fmt_change(None) == "n/a"
