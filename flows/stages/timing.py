"""``stage``: one stage's timing, status and failure in the run record, and the run's stage label."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from flows.identity import label_stage
from roost.records import RunRecord, StageTiming


@contextlib.contextmanager
def stage(record: RunRecord, name: str) -> Iterator[StageTiming]:
    """Time one stage into ``record.stages``; a failure marks the run failed at this stage (the first
    failure is the run's, unless a later retry succeeds and clears it: ``RunRecord.fail``). The flow
    run's ``roost.stage`` label names the stage, for the crash alert of a run whose process dies in it."""
    label_stage(name)
    timing = StageTiming(stage=name, seconds=0.0)
    t0 = time.perf_counter()
    try:
        yield timing
    except BaseException as exc:
        timing.status = "failed"
        record.fail(name, exc)
        raise
    finally:
        timing.seconds = time.perf_counter() - t0
        record.stages.append(timing)
