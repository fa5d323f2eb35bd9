"""A flow that runs the download task in a process of its own, as a deployment's flow-run process does
(``PREFECT_LOGGING_EXTRA_LOGGERS`` read when Prefect loads). Prints the flow run's id.

    python tests/tasks/download_log_flow.py REPO_ID LOCAL_DIR ENDPOINT
"""

from __future__ import annotations

import sys

from prefect import flow
from prefect.context import FlowRunContext

from flows.identity import roost_logs_to_run
from roost.hub.snapshot import RetryPolicy
from roost.profiles import ModelProfile
from tasks.download import download_task


@flow(name="roost-test-download-logs")
def fetch(repo_id: str, local_dir: str, endpoint: str) -> str:
    roost_logs_to_run()
    download_task(ModelProfile(name="log-test", repo_id=repo_id, served_model_name="t"), None, local_dir,
                  endpoint=endpoint, retry=RetryPolicy(attempts=3, base_s=0.1, cap_s=0.2))
    ctx = FlowRunContext.get()
    assert ctx is not None and ctx.flow_run is not None
    return str(ctx.flow_run.id)


if __name__ == "__main__":
    print(fetch(*sys.argv[1:4]))
