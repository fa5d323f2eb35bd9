"""The pipeline's stages, one module each, in the order a landing runs them.

Each stage function runs one step through its Prefect task(s) (``tasks/<stage>.py``), times it into
the run record (:func:`flows.stages.timing.stage`: a failure inside marks the run failed there) and
returns what the next stage needs as a typed result. Nothing here branches on the serving backend.

    hub.hub_source                        the Hub to read: HF_ENDPOINT, or the demo's local mirror
    preflight.preflight_stage             audit + KV plan from the Hub's headers, before any weight byte
    download.download_stage -> Checkpoint the verified local directory and its commit
    eval_datasets.eval_datasets_stage     every evaluation's questions read and sampled
    audit.audit_stage -> ServePlan        the files on disk audited, the KV plan and the vLLM arguments
    build.build_stage -> Prepared         the serving image, or nothing to build
    host.host_slot_stage                  one server per host: the slot held until the teardown
    host.host_check_stage                 occupants refused or replaced, roost's own server stopped, memory
    serve.serve_stage -> ColdLoad         a healthy server; failed cold loads classified and retried
    gateway.gateway_stage                 a kept server registered for the metering gateway
    probes.probe_stage                    reasoning split, named tool call, structured output
    vision.vision_stage                   an image request when a vision tower is served
    benchmark.benchmark_stage             points and per-request rows into the record and the store
    gateway_door.gateway_benchmark_stage  a kept server's sweep again through the gateway, metered
    evaluate.eval_stage                   accuracy evaluations, paired with the baseline run
    mtp_ab.mtp_ab_stage                   the same image without --speculative-config: speed-up, acceptance
    report.report_stage                   stored, compared, written, published, sent to Slack

The run around them (record creation, failure, teardown, report, verdict) is ``flows.lifecycle``.
"""

from flows.stages.audit import ServePlan, audit_stage
from flows.stages.benchmark import benchmark_stage, classify_exit
from flows.stages.build import build_stage
from flows.stages.download import Checkpoint, download_stage
from flows.stages.eval_datasets import eval_datasets_stage
from flows.stages.evaluate import eval_log_path, eval_stage
from flows.stages.gateway import gateway_stage
from flows.stages.gateway_door import gateway_benchmark_stage, gateway_door, measured_directly
from flows.stages.host import host_check_stage, host_slot_stage
from flows.stages.hub import hub_source
from flows.stages.mtp_ab import mtp_ab_stage
from flows.stages.preflight import preflight_stage, refuse_unservable
from flows.stages.probes import probe_stage
from flows.stages.report import report_stage
from flows.stages.serve import serve_stage
from flows.stages.timing import stage
from flows.stages.vision import vision_stage

__all__ = [
    "Checkpoint", "ServePlan", "audit_stage", "benchmark_stage", "build_stage", "classify_exit", "download_stage",
    "eval_datasets_stage", "eval_log_path", "eval_stage", "gateway_benchmark_stage", "gateway_door", "gateway_stage",
    "host_check_stage", "host_slot_stage", "hub_source", "measured_directly", "mtp_ab_stage", "preflight_stage",
    "probe_stage", "refuse_unservable", "report_stage", "serve_stage", "stage", "vision_stage",
]
