"""Fixtures of the report tests: the hand-built Ornith 1.0 9B records of ``support.samples``."""

from __future__ import annotations

import pytest
from support.samples import failed_record, history, spark_record

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
