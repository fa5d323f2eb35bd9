"""The results URL: validation, where it comes from, and the URLs of a run's report files."""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.errors import UserError
from roost.hosts import CPU, HostProfile
from roost.report.publish import RESULTS_URL_ENV, file_url, report_urls, results_url, validate_results_url


@pytest.mark.parametrize(("url", "expected"), [
    ("", ""),
    ("  ", ""),
    ("http://spark.tailnet:8765", "http://spark.tailnet:8765/"),
    ("https://reports.example.org/roost/", "https://reports.example.org/roost/"),
    ("http://[fd7a:115c::1]:8765/", "http://[fd7a:115c::1]:8765/"),
])
def test_valid_urls_end_in_a_slash(url: str, expected: str) -> None:
    assert validate_results_url(url, "results_url") == expected


@pytest.mark.parametrize(("url", "message"), [
    ("file:///srv/results", "must be an http:// or https:// URL"),
    ("spark:8765", "must be an http:// or https:// URL"),
    ("http://", "has no host name"),
    ("http://spark:8765/?token=x", "must not have a query or fragment"),
    ("http://spark:port/", "not a valid URL"),
])
def test_invalid_urls_are_a_user_error_naming_the_field(url: str, message: str) -> None:
    with pytest.raises(UserError, match=rf"^ROOST_RESULTS_URL\b.*{message}"):
        validate_results_url(url, "ROOST_RESULTS_URL")


def test_credentials_are_refused_and_never_echoed() -> None:
    with pytest.raises(UserError) as err:
        validate_results_url("https://alice:hunter2@spark:8765/", "results_url")
    assert str(err.value).startswith("results_url: must not contain a user name or password")
    assert "hunter2" not in str(err.value) and "alice" not in str(err.value)


def test_the_environment_overrides_the_host_profile() -> None:
    assert results_url("http://spark:8765/", {}) == "http://spark:8765/"
    assert results_url("http://spark:8765/", {RESULTS_URL_ENV: "http://127.0.0.1:9000"}) == "http://127.0.0.1:9000/"
    assert results_url("", {RESULTS_URL_ENV: " "}) == ""
    with pytest.raises(UserError, match=r"^ROOST_RESULTS_URL"):
        results_url("http://spark:8765/", {RESULTS_URL_ENV: "ftp://spark/"})


def test_the_host_profile_field_is_validated() -> None:
    assert CPU.results_url == ""
    data = CPU.model_dump() | {"results_url": "http://cpu-box:8765"}
    assert HostProfile.model_validate(data).results_url == "http://cpu-box:8765/"
    with pytest.raises(UserError, match=r"^results_url: must not contain a user name or password"):
        HostProfile.model_validate(data | {"results_url": "http://u:p@cpu-box/"})


def test_report_urls_are_relative_to_the_reports_root(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    run = root / "model=org--tiny model" / "host=cpu" / "run-1"
    urls = report_urls(run / "report.html", run / "report.md", {"decode": run / "charts" / "decode.png"},
                       run / "charts" / "decode.png", root, "http://w:8765/r/")
    assert urls is not None
    assert urls.html == "http://w:8765/r/model=org--tiny%20model/host=cpu/run-1/report.html"
    assert urls.charts == {"decode": "http://w:8765/r/model=org--tiny%20model/host=cpu/run-1/charts/decode.png"}
    assert urls.key_chart == urls.charts["decode"]
    assert report_urls(run / "report.html", run / "report.md", {}, None, root, "") is None
    assert report_urls(tmp_path / "x.html", run / "report.md", {}, None, root, "http://w/") is None
    assert file_url(tmp_path / "elsewhere.png", root, "http://w/") is None
