"""roost.plan.fit: the weights vLLM loads, the fit on a host, and the decode ceiling."""

from __future__ import annotations

from roost.hosts import CPU, SPARK
from roost.plan.args import ServeArgs
from roost.plan.fit import decode_ceiling_tok_s, fit_check, fit_findings, load_weight_bytes
from roost.units import GiB


def test_fit_check() -> None:
    ok = fit_check(int(65.4 * GiB), 8 * GiB, SPARK)
    assert ok.fits and ok.free_bytes == SPARK.usable_bytes - ok.total_bytes
    assert ok.total_bytes == int(65.4 * GiB) + 8 * GiB + 8 * GiB and fit_findings(ok, SPARK) == []
    bad = fit_check(6 * GiB, 1 * GiB, CPU)
    assert not bad.fits and bad.free_bytes == 8 * GiB - 10 * GiB
    [finding] = fit_findings(bad, CPU)
    assert (finding.code, finding.severity) == ("DOES_NOT_FIT_HOST", "error")
    assert finding.message == ("weights 6.00 GiB + KV pool 1.00 GiB + headroom 3.00 GiB exceed cpu's 8.00 GiB budget; "
                               "use a quantized build or a bigger host")


def test_load_weight_bytes_drops_what_is_not_built() -> None:
    by_class = {"mlp": 100, "vision": 10, "mtp": 5}
    plain = ServeArgs(served_model_name="m", max_model_len=8, kv_cache_memory_bytes=1)
    assert load_weight_bytes(by_class, plain) == 110  # no --speculative-config: the MTP draft is not loaded
    lm_only = plain.model_copy(update={"language_model_only": True})
    assert load_weight_bytes(by_class, lm_only) == 100
    spec = plain.model_copy(update={"speculative_config": {"method": "mtp", "num_speculative_tokens": 1}})
    assert load_weight_bytes(by_class, spec) == 115


def test_decode_ceiling() -> None:
    """The Ornith 1.0 9B recipe: 15.87 GB per token at the Spark's 273 GB/s is a 17.2 tok/s ceiling."""
    assert f"{decode_ceiling_tok_s(15_873_376_768, SPARK):.1f}" == "17.2"
    assert decode_ceiling_tok_s(10**9, CPU) == 20.0
    assert decode_ceiling_tok_s(0, SPARK) == 0.0
