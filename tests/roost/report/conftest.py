"""Hand-built RunRecords for the report tests, with figures from the seeds (Ornith 1.0 9B BF16 on a Spark).

Seed 001: decode 12.65 / 12.61 / 12.50 / 12.00 / 10.34 / 8.86 tok/s at 0.5K / 2K / 8K / 32K / 131K / 250K
prompt tokens, TTFT 0.14 s -> 109 s, ceiling 17.2 tok/s at 273 GB/s, KV 390,070 tokens / 1.49x on a
12 GiB pool, cold load 108 s. The concurrency sweep follows seed 002's shape (peak at the
--max-num-seqs cap, drop past it).
"""

from __future__ import annotations

import pytest
from report_samples import failed_record, history, spark_record

from roost.records import RunRecord


@pytest.fixture
def record() -> RunRecord:
    return spark_record()


@pytest.fixture
def failed() -> RunRecord:
    return failed_record()


@pytest.fixture
def earlier() -> list[RunRecord]:
    return history()
