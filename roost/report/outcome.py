"""What the report stage did, for the stages after it (the notification reads ``comparison`` and ``files``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from roost.regress import RegressionReport
from roost.report.compare import ModelComparison
from roost.report.publish import ReportUrls
from roost.report.write import ReportFiles
from roost.store import StoredRun


class ReportOutcome(BaseModel):
    """What the report stage did; the notify stage reads ``comparison`` and ``files``."""

    stored: StoredRun | None = None
    files: ReportFiles | None = None
    comparison: RegressionReport | None = None
    models: ModelComparison | None = Field(default=None, description="The comparison with the model this one "
                                           "replaced (roost.report.compare), when made.")
    urls: ReportUrls | None = Field(default=None, description="Where a browser reaches the files (a results URL set).")
    artifact_keys: dict[str, str] = Field(default_factory=dict)
    artifact_markdown: str = Field(
        default="", description="The report as Markdown for the Prefect UI: charts from the results URL, or the "
        "headline ones inline and the rest named by path.")
    errors: list[str] = Field(default_factory=list)

    @property
    def markdown(self) -> Path | None:
        return self.files.markdown if self.files else None
