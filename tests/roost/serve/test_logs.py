"""The log buffer both backends fill: whole lines only, each handed out once."""

from __future__ import annotations

import datetime as dt
import threading

from roost.serve.logs import MAX_PARTIAL_CHARS, LogBuffer, split_lines

T = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def test_split_keeps_the_unfinished_line_for_later() -> None:
    assert split_lines("", "a\nb\r\nc\rd") == (["a", "b", "c"], "d")
    assert split_lines("d", "one\n\n  \nlast") == (["done"], "last")  # blank lines dropped
    assert split_lines("", "") == ([], "")


def test_a_runaway_line_is_cut() -> None:
    lines, rest = split_lines("", "x" * (MAX_PARTIAL_CHARS + 1))
    assert (len(lines), rest) == (1, "")


def test_new_text_hands_out_each_line_once_and_the_sink_sees_each_once() -> None:
    seen: list[str] = []
    buf = LogBuffer(seen.append)
    assert buf.new_text() == ""
    buf.add([(T, "one"), (T, "two")])
    assert buf.new_text() == "one\ntwo\n" and buf.new_text() == ""
    buf.add([(T, "three")])
    assert buf.new_text() == "three\n"
    assert buf.text() == "one\ntwo\nthree\n" and len(buf) == 3 and buf.lines()[2] == (T, "three")
    assert seen == ["one", "two", "three"]


def test_concurrent_writer_and_reader_lose_and_repeat_nothing() -> None:
    buf = LogBuffer()
    n = 5000

    def write() -> None:
        for i in range(n):
            buf.add([(T, str(i))])

    th = threading.Thread(target=write)
    th.start()
    got: list[str] = []
    while th.is_alive():
        got.append(buf.new_text())
    th.join()
    got.append(buf.new_text())
    assert "".join(got).split() == [str(i) for i in range(n)]
