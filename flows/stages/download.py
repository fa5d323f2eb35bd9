"""Stage 2, ``download``: the checkpoint fetched and verified into its local directory."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger
from pydantic import BaseModel

from flows.identity import name_run
from flows.stages.timing import stage
from roost.hub.snapshot import DownloadResult
from roost.profiles import ModelProfile
from roost.records import RunRecord
from roost.settings import checkpoint_dir
from tasks.download import cached_line, download_task


class Checkpoint(BaseModel):
    """A verified checkpoint on local disk."""

    model_dir: Path
    commit: str
    cached: bool
    download: DownloadResult


def download_stage(record: RunRecord, prof: ModelProfile, endpoint: str | None = None) -> Checkpoint:
    """Fetch and verify the profile's repo at the record's revision (the preflight's commit when it ran)
    into its checkpoint directory, from ``endpoint`` (``flows.stages.hub.hub_source``).

    The Hub token comes from the profile's Secret block (``hf_token_secret``), else ``HF_TOKEN``.
    """
    with stage(record, "download") as st:
        revision = record.meta.commit or record.meta.revision  # the commit the preflight audited
        state = download_task(prof, revision, str(checkpoint_dir(prof.repo_id)), endpoint=endpoint,
                              token_secret=prof.hf_token_secret, return_state=True)
        result: DownloadResult = state.result()
        record.meta.commit = result.commit
        prefect_cached = state.name == "Cached"  # Prefect's cache: the task did not run, so it logged nothing
        if prefect_cached:
            get_run_logger().info("%s", cached_line(result))
        st.cached = result.cached or prefect_cached
    name_run(record.meta.profile, record.meta.host, result.commit)
    return Checkpoint(model_dir=Path(result.local_dir), commit=result.commit, cached=st.cached, download=result)
