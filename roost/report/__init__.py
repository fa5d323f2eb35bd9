"""Per-run reports: Markdown, self-contained HTML and PNG charts (see ``roost.report.write``)."""

from roost.report.write import ReportFiles, write_report

__all__ = ["ReportFiles", "write_report"]
