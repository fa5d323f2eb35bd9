"""Stage 7a, ``gateway``: a kept server registered for the metering gateway and Prometheus."""

from __future__ import annotations

from prefect import get_run_logger

from blocks.resolve import VLLM_API_KEY_BLOCK, vllm_api_key_with_source
from flows.stages.timing import stage
from roost.hosts import HostProfile
from roost.monitor.targets import decode_floor
from roost.records import RunRecord

# Imported by gateway_stage, which only a landing that keeps its server runs: the gateway's tasks and the
# monitoring sync (Docker's SDK) stay out of a one-off landing's flow-run process.


def gateway_stage(record: RunRecord, base_url: str, served_model_name: str, host: HostProfile) -> None:
    """A landing that keeps its server registers it for the metering gateway on the host (the host's
    earlier servers are deregistered): the gateway routes ``served_model_name`` without a restart. When
    the host names Open WebUI (``openwebui_db`` or ``openwebui_url``), its default, pinned and first model
    becomes ``served_model_name`` in place of the retired ones (a failure there is a warning only)."""
    from tasks.gateway import follow_swap_in_openwebui, register_backend, served_elsewhere
    from tasks.monitor import sync_monitoring

    with stage(record, "gateway") as st:
        floor = decode_floor(record)
        old_names = served_elsewhere(host.name, base_url)  # read before register_backend retires them
        replaced = register_backend(base_url, served_model_name, host.name, record.meta.run_id,
                                    floor.tok_s if floor else None, floor.concurrency if floor else 0)
        st.note = f"registered {base_url}" + (f", replaced {', '.join(replaced)}" if replaced else "")
        if openwebui := follow_swap_in_openwebui(host, served_model_name, old_names):
            record.openwebui = openwebui  # Open WebUI's users get the new model as their default
            st.note += f"; Open WebUI {openwebui}"
        if reload := sync_monitoring():  # Prometheus scrapes it from now on (roost monitor render/up)
            st.note += f"; Prometheus {reload}"
        if vllm_api_key_with_source()[1] == "none":
            get_run_logger().warning(
                "gateway: this server's key is one-off (no VLLM_API_KEY, no %s Secret block), so the gateway "
                "cannot reach it; set one for both", VLLM_API_KEY_BLOCK)
