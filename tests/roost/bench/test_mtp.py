"""The MTP A/B comparison: points paired across the two runs, speed-ups, acceptance, the arguments."""

from __future__ import annotations

import pytest

from roost.bench import mtp
from roost.records import BenchPoint, Distribution, MtpAB
from roost.vllm.server_metrics import SpecCounters


def _point(kind: str, prompt: int, conc: int, rate: float | None, *, target: int | None = None,
           skipped: bool = False, delta: dict[str, float] | None = None) -> BenchPoint:
    dist = Distribution(count=3, median=rate) if rate is not None else Distribution()
    return BenchPoint(
        kind=kind,  # type: ignore[arg-type]
        prompt_tokens=prompt, prompt_tokens_target=target, output_tokens=64, concurrency=conc,
        requests=0 if skipped else 3, skipped=skipped,
        decode_tok_s=dist if kind == "prompt_length" else Distribution(count=3, median=1.0),
        output_tok_s=dist if kind == "concurrency" else Distribution(count=3, median=1.0),
        metrics_delta=delta or {},
    )


# The recipe's shape: +41 % at one user, shrinking as users are added.
WITH = [
    _point("prompt_length", 2049, 1, 70.5, target=2048,
           delta={"spec_decode_num_draft_tokens": 200, "spec_decode_num_accepted_tokens": 150}),
    _point("prompt_length", 512, 1, 72.0, target=512),
    _point("concurrency", 512, 1, 70.0),
    _point("concurrency", 512, 16, 480.0),
    _point("concurrency", 512, 24, 500.0),
]
WITHOUT = [
    _point("prompt_length", 2048, 1, 50.0, target=2048),
    _point("prompt_length", 512, 1, 60.0, target=512),
    _point("concurrency", 512, 1, 50.0),
    _point("concurrency", 512, 16, 400.0),
    _point("concurrency", 512, 24, 480.0),
    _point("concurrency", 512, 32, 490.0),
]


def test_speedup_per_prompt_length_and_per_concurrency() -> None:
    pts = mtp.compare(WITH, WITHOUT)
    by = {(p.kind, p.prompt_tokens, p.concurrency): p for p in pts}
    ref = by[("prompt_length", 2048, 1)]  # paired by the asked-for length, not the tokenizer's count
    assert ref.metric == "decode_tok_s" and ref.speedup == pytest.approx(1.41)
    assert ref.acceptance_rate == pytest.approx(0.75)
    assert by[("prompt_length", 512, 1)].speedup == pytest.approx(1.2)
    conc = [by[("concurrency", 512, c)] for c in (1, 16, 24)]
    assert [p.metric for p in conc] == ["output_tok_s"] * 3
    assert [round(p.speedup or 0, 3) for p in conc] == [1.4, 1.2, 1.042]  # shrinking under load
    only_baseline = by[("concurrency", 512, 32)]
    assert only_baseline.with_spec is None and only_baseline.speedup is None
    assert pts[-1] is only_baseline  # the speculative run's order first, then the baseline's extras


def test_unmeasured_or_zero_rates_have_no_speedup() -> None:
    pts = mtp.compare([_point("prompt_length", 128, 1, 10.0), _point("prompt_length", 256, 1, None, skipped=True)],
                      [_point("prompt_length", 128, 1, 0.0), _point("prompt_length", 256, 1, 10.0)])
    assert [p.speedup for p in pts] == [None, None]
    assert pts[1].with_spec is None


def test_reference_is_the_point_nearest_2048_tokens() -> None:
    ab = MtpAB(speculative_config='{"method":"mtp","num_speculative_tokens":1}', points=mtp.compare(WITH, WITHOUT))
    ref = mtp.reference(ab)
    assert ref is not None and ref.prompt_tokens == 2048
    assert [p.prompt_tokens for p in mtp.prompt_points(ab)] == [512, 2048]
    assert [p.concurrency for p in mtp.concurrency_points(ab)] == [1, 16, 24, 32]
    assert mtp.describe(ab).startswith("speculative decoding (mtp) vs none: 1.41x decode at a 2,048-token prompt")


def test_the_speedup_survives_the_record_round_trip() -> None:
    ab = MtpAB(speculative_config="{}", points=mtp.compare(WITH, WITHOUT), baseline_points=WITHOUT)
    data = ab.model_dump(mode="json")
    assert data["points"][0]["speedup"] == pytest.approx(1.41)  # stored with the record
    again = MtpAB.model_validate(data)
    assert again.points[0].speedup == pytest.approx(1.41) and len(again.baseline_points) == len(WITHOUT)


def test_acceptance_from_counters() -> None:
    a = mtp.acceptance(SpecCounters(drafts=100, draft_tokens=200, accepted_tokens=150,
                                    accepted_per_position=[90, 60]), "metrics")
    assert (a.source, a.rate, a.mean_acceptance_length, a.per_position) == ("metrics", 0.75, 2.5, [0.9, 0.6])
    ab = MtpAB(speculative_config='{"method":"ngram"}', acceptance=a)
    assert mtp.describe(ab) == ("speculative decoding (ngram) vs none: no decode rate measured by both runs; "
                                "draft acceptance 75.0%")


@pytest.mark.parametrize(("args", "config", "rest"), [
    (["--max-model-len", "2048", "--speculative-config", '{"method":"mtp"}', "--dtype", "bfloat16"],
     '{"method":"mtp"}', ["--max-model-len", "2048", "--dtype", "bfloat16"]),
    (["--speculative-config={\"method\":\"ngram\"}", "--enforce-eager"], '{"method":"ngram"}', ["--enforce-eager"]),
    (["--speculative-config", "A", "--speculative-config=B"], "B", []),  # the last one wins, as with vLLM
    (["--dtype", "bfloat16"], None, ["--dtype", "bfloat16"]),
])
def test_the_speculative_config_in_the_arguments(args: list[str], config: str | None, rest: list[str]) -> None:
    assert mtp.speculative_config(args) == config
    assert mtp.without_speculative(args) == rest


def test_method_of_a_config() -> None:
    assert mtp.speculative_method('{"method":"mtp","num_speculative_tokens":1}') == "mtp"
    assert mtp.speculative_method("not json") == ""
    assert mtp.speculative_method("[1]") == ""
