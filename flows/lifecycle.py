"""One pipeline run from its record's creation to its verdict: the skeleton ``land`` and
``rebenchmark`` share, so a flow is only the list of stages it runs.

    with pipeline_run("land", prof, host, notify=notify, revision=revision) as run:
        ...stages, writing into run.record; run.teardown / run.stop_when_done(server)...
    return run.result()

:func:`pipeline_run` opens the host's results store for the whole run (``results_store``), creates
the record (``new_record``, or the flow's own factory), and on the way out:

- a roost error (``RoostError``: expected, with its one-line explanation) fails the run at the stage
  it happened in, or ``setup`` outside every stage; it is kept for :meth:`Run.result`, which raises it
  after the report so a user's mistake keeps its exit code;
- anything else (a crash, a cancellation) fails the run too (``internal_error`` outside a stage),
  stops what was registered with :meth:`Run.stop_when_done` fast, and propagates;
- whatever happened, the teardown closes (servers stopped, the host's slot freed), then the report
  stage stores, compares, reports and notifies (failed runs too).

The record's failure state is written by the record itself (``RunRecord.fail``, ``reclassify``,
``clear_failure``); nothing here sets its fields one by one.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from typing import Any, cast

from prefect import get_run_logger
from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext
from prefect.states import Completed
from pydantic import SecretStr

import roost
from blocks.resolve import load_vllm_api_key
from blocks.store import results_store_for
from flows.identity import name_run, roost_logs_to_run, server_ui_url, tag_run
from flows.stages.report import report_stage
from roost.errors import RoostError, StageFailed
from roost.failures import OUTSIDE_STAGES
from roost.hosts import HostProfile
from roost.naming import pinned_commit, run_verdict
from roost.profiles import ModelProfile
from roost.records import RunMeta, RunRecord
from roost.regress import RegressionReport
from roost.serve.base import Server, stop_grace
from roost.store import using_store
from roost.store.fallback import KeepLocalCopy


@contextlib.contextmanager
def results_store(host: HostProfile) -> Iterator[KeepLocalCopy]:
    """The results store of a run on ``host`` (``blocks.store.results_store_for``) for the whole flow,
    every write it cannot take kept on the worker (``roost.store.fallback``)."""
    store = KeepLocalCopy(results_store_for(host))
    with using_store(store):
        yield store


def api_key() -> SecretStr:
    """The key vLLM requires: ``VLLM_API_KEY`` if set, else the ``roost-vllm-api-key`` Secret block
    if saved, else a fresh one for this run only. Never logged."""
    return load_vllm_api_key() or SecretStr(secrets.token_urlsafe(24))


def new_record(prof: ModelProfile, host: HostProfile, revision: str | None = None, **meta: Any) -> RunRecord:
    """An empty record for a run of ``prof`` on ``host``, tied to the current Prefect flow run (renamed
    ``<flow> · profile · host[ · commit] · <start>``, and roost's own loggers sent to it: ``flows/identity.py``)
    and to the server that holds it (``prefect_ui_url``: none for ``roost run``'s temporary server)."""
    ctx = FlowRunContext.get()
    flow_run = ctx.flow_run if ctx is not None else None
    fields: dict[str, Any] = {
        "roost_version": roost.__version__, "profile": prof.name, "repo_id": prof.repo_id,
        "revision": revision or prof.revision, "commit": "", "served_model_name": prof.served_model_name,
        "host": host.name, "backend": host.backend,
        "prefect_flow_run_id": str(flow_run.id) if flow_run is not None else "",
        "prefect_ui_url": server_ui_url() if flow_run is not None else "",
    }
    record = RunRecord(meta=RunMeta(**(fields | meta)))
    roost_logs_to_run()
    m = record.meta
    name_run(m.profile, m.host, m.commit or pinned_commit(m.revision))
    return record


class Run:
    """A run in progress: its record, its teardown, and how it ended."""

    def __init__(self, flow_name: str, record: RunRecord) -> None:
        self.flow_name = flow_name
        self.record = record
        self.teardown = contextlib.ExitStack()
        """Closed when the run ends, before the report: servers to stop, the host's slot to free."""
        self.failure: RoostError | None = None
        self.comparison: RegressionReport | None = None
        self._servers: list[Server] = []

    def stop_when_done(self, server: Server) -> None:
        """``server`` is this run's only: stopped when the run ends (after 5 s when it is cancelled)."""
        self._servers.append(server)
        self.teardown.callback(_stop, server)

    def abort(self, exc: BaseException) -> None:
        """A crash or a cancellation: stop this run's servers fast (the teardown frees the slot)."""
        for server in self._servers:
            server.stop(stop_grace(exc))

    def result(self) -> dict[str, Any]:
        """The verdict (:func:`finish`): the record as the flow's result, or the run's failure raised."""
        return finish(self.record, self.flow_name, self.failure, self.comparison)


@contextlib.contextmanager
def pipeline_run(flow_name: str, prof: ModelProfile, host: HostProfile, *, notify: bool, revision: str | None = None,
                 record: Callable[[], RunRecord] | None = None) -> Iterator[Run]:
    """The run of ``prof`` on ``host`` (see the module's docstring). ``record``: makes the run's record
    inside the results store (a rebenchmark inherits a stored run's identity); default :func:`new_record`."""
    with results_store(host):
        run = Run(flow_name, record() if record is not None else new_record(prof, host, revision))
        try:
            yield run
        except RoostError as exc:
            get_run_logger().error("%s failed at %s: %s", "run" if flow_name == "land" else flow_name,
                                   run.record.failed_stage or OUTSIDE_STAGES, exc)
            run.record.fail(OUTSIDE_STAGES, exc)  # one outside every stage (the demo's Hub mirror) too
            run.failure = exc
        except BaseException as exc:  # not roost's own: still a failed run, reported and stored as one
            run.record.fail(OUTSIDE_STAGES, exc)
            run.abort(exc)
            raise
        finally:
            run.teardown.close()
            run.comparison = report_stage(run.record, notify, prof, host)


def finish(record: RunRecord, flow_name: str, failure: RoostError | None = None,
           comparison: RegressionReport | None = None) -> dict[str, Any]:
    """Tag the flow run with the run's verdict (``verdict:<kind>``, ``roost.naming.run_verdict`` of the
    report stage's ``comparison``); fail it when the run failed (with ``failure`` itself when given,
    so a user's mistake keeps its exit code); else log where the report is and end the run Completed
    with the verdict as its message ("regressed: Decode -46.0% vs runs A, B, C", "ok", ...).

    The Completed state carries the record as JSON: Prefect makes a returned state the run's final
    state and hands its data to whoever called the flow, so to every caller this is the record dict.
    """
    verdict = run_verdict(record, comparison)
    tag_run(verdict.tag)
    if record.status == "failed":
        if failure is not None:
            raise failure
        raise StageFailed(record.failed_stage or flow_name, record.failure_message)
    logger = get_run_logger()
    logger.info("report: %s", record.report_path)
    logger.info("verdict: %s", verdict.message)
    final: State[dict[str, Any]] = Completed(message=verdict.message, data=record.model_dump(mode="json"))
    return cast(dict[str, Any], final)


def _stop(server: Server) -> None:
    server.stop()
    get_run_logger().info("server stopped")
