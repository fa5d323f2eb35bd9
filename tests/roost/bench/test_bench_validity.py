"""The unmeasurable rule (roost/bench/validity.py), table-driven on synthetic token timings.

The two requests that prompted it come from landing the local profile through Docker: a 64-token
request at a 128-token prompt whose first token came at 68 ms and the other 63 within 7 ms (8,970
tok/s against a 3,465 tok/s roofline), and its repeat, whose 64 tokens came at one instant."""

from __future__ import annotations

import pytest

from roost.bench import metrics as M
from roost.bench.validity import (
    BURST_SHARE,
    FLUSH_GAP_S,
    MAX_TOKENS_PER_CHUNK,
    MIN_DECODE_SPAN_S,
    Kind,
    describe_counts,
    num_speculative_tokens,
    stream_ceiling_tok_s,
    unmeasurable,
)
from roost.vllm.stream import RequestRecord

T0 = 1000.0
TINY_CEILING = 3464.5232815964523  # the tiny model's roofline on this CPU (record.decode_ceiling_tok_s)
MTP_ONE = ["--speculative-config", '{"method":"mtp","num_speculative_tokens":1}']


def stream(chunks: list[float], tokens: int | None = None, *, error: str = "") -> RequestRecord:
    """A request sent at T0 whose token chunks arrived ``chunks`` seconds after it; ``tokens`` is
    usage's completion_tokens (default: one per chunk)."""
    ts = [T0 + c for c in chunks]
    return RequestRecord(request_id="r", t_sent=T0, t_first=ts[0] if ts else None, t_last=ts[-1] if ts else None,
                         token_times=ts, completion_tokens=tokens if tokens is not None else len(ts),
                         prompt_tokens=128, error=error, error_kind="cut" if error else None)


def even(first: float, n: int, span: float) -> list[float]:
    """``n`` chunks: the first at ``first``, the rest evenly over the next ``span`` seconds."""
    return [first + span * i / (n - 1) for i in range(n)]


def groups(first: float, at: list[float], per: int) -> list[float]:
    """The first chunk at ``first``, then ``per`` chunks at each instant of ``at`` (one read each)."""
    return [first] + [t for t in at for _ in range(per)]


def coalesced_every_third() -> list[float]:
    """64 chunks 10 ms apart, every third read together with the one before it (a busy client)."""
    out: list[float] = []
    for i in range(64):
        out.append(out[-1] if i % 3 == 2 else 0.05 + 0.01 * i)
    return out


# the local profile's 128-token point: 63 tokens after the first in 63 / 8,970 s = 7.02 ms
SPAN_8970 = 63 / 8970

FLAGGED = [
    # (name, chunks, usage tokens, ceiling, kind, words in the reason)
    ("the local profile's 8,970 tok/s request", even(0.068, 64, SPAN_8970), 64, TINY_CEILING,
     Kind.ABOVE_CEILING, ["8,970 tok/s", "2.6x", "3,465 tok/s"]),
    ("its repeat: 64 tokens at one instant", [0.068] * 64, 64, TINY_CEILING, Kind.BURST, ["all 64 tokens", "one instant"]),
    ("the same, as one merged chunk", [0.068], 64, None, Kind.BURST, ["all 64 tokens", "one instant", "68.00 ms"]),
    ("63 tokens flushed in three reads, no ceiling known", groups(0.068, [0.0703, 0.0727, 0.068 + SPAN_8970], 21), 64,
     None, Kind.BURST, ["60 of the 63 token chunks"]),
    ("63 tokens merged into 4 chunks, no ceiling known", [0.068, 0.0698, 0.0716, 0.0734, 0.068 + SPAN_8970], 64, None,
     Kind.BURST, ["64 tokens arrived in 5 chunks", "12.8 per chunk"]),
    ("a decode span under a millisecond", [0.050, 0.0503, 0.0505], 3, None, Kind.BURST, ["all 3 tokens", "within 0.50 ms"]),
    ("a normal start, then the rest held back and flushed", even(0.03, 20, 19 * 0.005) + [0.3] * 44, 64, TINY_CEILING,
     Kind.BURST, ["43 of the 63 token chunks"]),
    ("spec decoding faster than the scaled ceiling", even(0.2, 33, 32 * 0.005), 64, stream_ceiling_tok_s(60.0, MTP_ONE),
     Kind.ABOVE_CEILING, ["394 tok/s", "3.3x the 120 tok/s"]),
]

MEASURABLE = [
    # (name, chunks, usage tokens, ceiling)
    ("the tiny model on this CPU: 200 tok/s", even(0.03, 64, 63 / 200), 64, TINY_CEILING),
    ("the 9B recipe: 12.6 tok/s, 73% of its 17.2 tok/s ceiling", even(0.46, 256, 255 / 12.6), 256, 17.2),
    ("MTP, two tokens per chunk, above the bare roofline", even(0.2, 33, 32 * 0.02), 64, stream_ceiling_tok_s(60.0, MTP_ONE)),
    ("a 7-token draft fully accepted: 8 tokens per chunk", even(0.2, 8, 7 * 0.03), 64, None),
    ("a loaded client reading every third chunk with the one before", coalesced_every_third(), 64, None),
    ("a preempted stream: a 30 s stall mid-decode", even(0.1, 32, 31 * 0.05) + even(31.7, 32, 31 * 0.05), 64, 17.2 * 100),
    ("timing jitter 3% above the ceiling", even(0.05, 64, 63 / (1.03 * 1000.0)), 64, 1000.0),
    ("two tokens, an ordinary gap", [0.05, 0.07], 2, TINY_CEILING),
    ("a token chunk per token without usage", even(0.05, 16, 15 * 0.005), None, None),
    ("without a ceiling, an evenly spaced 8,970 tok/s stream cannot be told from a fast model",
     even(0.068, 64, SPAN_8970), 64, None),
]


@pytest.mark.parametrize(("name", "chunks", "tokens", "ceiling", "kind", "words"), FLAGGED, ids=[c[0] for c in FLAGGED])
def test_flagged(name: str, chunks: list[float], tokens: int, ceiling: float | None, kind: Kind, words: list[str]) -> None:
    why = unmeasurable(stream(chunks, tokens), ceiling)
    assert why is not None and why.kind == kind, name
    for w in words:
        assert w in why.reason, (w, why.reason)


@pytest.mark.parametrize(("name", "chunks", "tokens", "ceiling"), MEASURABLE, ids=[c[0] for c in MEASURABLE])
def test_measurable(name: str, chunks: list[float], tokens: int | None, ceiling: float | None) -> None:
    r = stream(chunks, tokens)
    assert unmeasurable(r, ceiling) is None, name
    assert M.decode_tok_s(r) is not None


def test_the_local_profile_numbers_are_what_the_tests_build() -> None:
    r = stream(even(0.068, 64, SPAN_8970), 64)
    assert M.decode_tok_s(r) == pytest.approx(8970) and M.decode_tok_s(r) / TINY_CEILING == pytest.approx(2.59, abs=0.01)  # type: ignore[operator]
    assert M.decode_tok_s(stream([0.068] * 64, 64)) is None  # the repeat the report showed as "n/a"
    # the MTP case above the bare roofline: 63 tokens in 0.64 s, 98 tok/s against 60 (x2 with one draft token)
    assert M.decode_tok_s(stream(even(0.2, 33, 32 * 0.02), 64)) == pytest.approx(98.4, abs=0.1)


def test_thresholds_sit_between_a_flush_and_an_engine_step() -> None:
    # a flush is one read (0 s apart); the fastest engine step of the tiny model here is ~3 ms
    assert 0 < FLUSH_GAP_S < MIN_DECODE_SPAN_S < 3e-3
    assert BURST_SHARE == 0.5 and MAX_TOKENS_PER_CHUNK >= 2 * 2  # MTP's two tokens per chunk, with room


def test_requests_without_a_decode_are_not_judged() -> None:
    assert unmeasurable(stream([0.068] * 64, 64, error="stream cut"), TINY_CEILING) is None  # counted as an error
    assert unmeasurable(stream([0.05], 1), TINY_CEILING) is None  # one token: nothing to time
    assert unmeasurable(stream([], None), TINY_CEILING) is None


def test_describe_counts() -> None:
    assert describe_counts([Kind.BURST, Kind.ABOVE_CEILING, Kind.ABOVE_CEILING]) == (
        "2 above the roofline ceiling, 1 delivered in a burst")
    assert describe_counts([]) == ""


@pytest.mark.parametrize(
    ("argv", "k"),
    [([], 0),
     (["--max-num-seqs", "20"], 0),
     (MTP_ONE, 1),
     (['--speculative-config={"method":"mtp","num_speculative_tokens":3}'], 3),
     ([*MTP_ONE, "--speculative-config", '{"method":"ngram","num_speculative_tokens":5}'], 5),  # the last one wins
     (["--speculative-config", "{not json"], None),
     (["--speculative-config", '{"method":"mtp"}'], None)],
)
def test_num_speculative_tokens(argv: list[str], k: int | None) -> None:
    assert num_speculative_tokens(argv) == k


def test_stream_ceiling_scales_the_roofline_by_the_tokens_a_step_emits() -> None:
    assert stream_ceiling_tok_s(17.2) == 17.2
    assert stream_ceiling_tok_s(60.0, MTP_ONE) == 120.0
    assert stream_ceiling_tok_s(None, MTP_ONE) is None and stream_ceiling_tok_s(0.0) is None  # unknown roofline
    assert stream_ceiling_tok_s(60.0, ["--speculative-config", "{"]) is None  # unreadable: not judged
