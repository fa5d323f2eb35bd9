"""Sending a run's Slack message: slack-sdk does the HTTP, this module decides and never raises.

``WebClient.chat_postMessage`` (Block Kit) then ``files_upload_v2`` of the key chart into the
message's thread, or ``WebhookClient.send`` for an incoming webhook. slack-sdk's retry handlers
cover a 429 (waiting ``Retry-After``), connection errors and a 500/503.

A Slack problem never fails a run: :func:`deliver` returns a
:class:`~roost.notify.NotifyResult` (sent / skipped / failed, with the reason). Each request is bounded
by the notifier's ``timeout_s``; a request Slack took and did not answer in time is not retried (it may
have been posted: a retry would post it twice), so a Slack that hangs costs one ``timeout_s`` per call.
The token and the webhook URL never reach a log, a result or an exception message: slack-sdk gets a
private logger that drops its debug/info lines (which carry the webhook URL) and redacts the rest.

Where to send is a :class:`SlackTarget`: the ``SlackNotifier`` Prefect block
(``blocks/slack.py``) is one, so this module needs no Prefect.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import SecretStr

from roost.notify import SlackMessage, build_message, message_kind, should_notify
from roost.records import NotifyResult, RunMeta, RunRecord
from roost.regress import RegressionReport
from roost.secrets import redact

if TYPE_CHECKING:  # slack-sdk loads only when a message is sent: every land run imports this module
    from slack_sdk.http_retry import RetryHandler


class SlackTarget(Protocol):
    """Where and how to post (the fields of the ``SlackNotifier`` block)."""

    bot_token: SecretStr | None
    webhook_url: SecretStr | None
    channel: str
    mention_on_regression: list[str]
    notify_on: list[Any]
    upload_chart: bool
    base_url: str
    timeout_s: int
    max_retries: int

    @property
    def transport(self) -> Literal["bot", "webhook"]: ...

    def secrets(self) -> list[str]: ...


class _Forward(logging.Handler):
    """Hands slack-sdk's warnings and errors to our logger, secrets redacted."""

    def __init__(self, log: Any, secrets: list[str]) -> None:
        super().__init__(level=logging.WARNING)
        self._log = log
        self._secrets = secrets

    def emit(self, record: logging.LogRecord) -> None:
        self._log.warning("slack-sdk: %s", redact(record.getMessage(), self._secrets))


def sdk_logger(log: Any, secrets: list[str]) -> logging.Logger:
    """A private logger for slack-sdk: warnings and errors only (its debug and info lines print
    request URLs, which for a webhook are the secret), redacted and forwarded to ``log``.

    A standalone ``Logger`` (not in the logging tree), so nothing propagates to other handlers.
    """
    logger = logging.Logger("roost.notify.slack_sdk", level=logging.WARNING)
    logger.addHandler(_Forward(log, secrets))
    return logger


class RetryCounter:
    """Counts the retries slack-sdk's handlers decide on, and says why in our own log."""

    def __init__(self, log: Any) -> None:
        self.count = 0
        self._log = log

    def note(self, why: str) -> None:
        self.count += 1
        self._log.warning("Slack: %s; retry %d", why, self.count)


def retry_handlers(max_retries: int, counter: RetryCounter) -> list[RetryHandler]:
    """slack-sdk's handlers for 429, connection errors and 500/503, each retrying ``max_retries`` times."""
    from slack_sdk.http_retry import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler
    from slack_sdk.http_retry.builtin_handlers import ServerErrorRetryHandler
    from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator

    backoff = BackoffRetryIntervalCalculator(backoff_factor=0.5)

    class RateLimit(RateLimitErrorRetryHandler):
        def prepare_for_next_attempt(self, **kw: Any) -> None:
            resp = kw.get("response")
            after = ""
            if resp is not None:
                after = next((v[0] for k, v in resp.headers.items() if k.lower() == "retry-after"), "")
            counter.note(f"rate limited (429), waiting Retry-After {after or '?'} s")
            super().prepare_for_next_attempt(**kw)

    class Connection(ConnectionErrorRetryHandler):
        def prepare_for_next_attempt(self, **kw: Any) -> None:
            counter.note(f"connection failed ({type(kw.get('error')).__name__})")
            super().prepare_for_next_attempt(**kw)

    class ServerError(ServerErrorRetryHandler):
        def prepare_for_next_attempt(self, **kw: Any) -> None:
            resp = kw.get("response")
            counter.note(f"server error ({resp.status_code if resp is not None else '?'})")
            super().prepare_for_next_attempt(**kw)

    return [
        RateLimit(max_retry_count=max_retries),
        Connection(max_retry_count=max_retries, interval_calculator=backoff),
        ServerError(max_retry_count=max_retries, interval_calculator=backoff),
    ]


def prefect_run_url(meta: RunMeta, ui_url: str) -> str:
    """The Prefect UI page of the run's flow run, or ``""`` when either part is unknown."""
    if not meta.prefect_flow_run_id or not ui_url:
        return ""
    return f"{ui_url.rstrip('/')}/runs/flow-run/{meta.prefect_flow_run_id}"


def _send_bot(
    notifier: SlackTarget, message: SlackMessage, chart: Path | None, result: NotifyResult,
    counter: RetryCounter, secrets: list[str], log: Any,
) -> None:
    from slack_sdk import WebClient

    token = notifier.bot_token.get_secret_value().strip() if notifier.bot_token else ""
    client = WebClient(
        token=token,
        base_url=notifier.base_url,
        timeout=notifier.timeout_s,
        logger=sdk_logger(log, secrets),
        retry_handlers=retry_handlers(notifier.max_retries, counter),
    )
    resp = client.chat_postMessage(channel=notifier.channel, text=message.text, blocks=message.blocks,
                                   unfurl_links=False)
    result.status = "sent"
    result.channel = str(resp.get("channel") or notifier.channel)
    result.message_ts = str(resp.get("ts") or "")
    if chart is None or not notifier.upload_chart:
        return
    try:
        up = client.files_upload_v2(
            channel=result.channel,
            thread_ts=result.message_ts or None,
            file=str(chart),
            filename=chart.name,
            title=chart.stem.replace("_", " "),
        )
        file_info = up.get("file") or {}
        result.file_id = str(file_info.get("id", "")) if isinstance(file_info, dict) else ""
    except Exception as exc:  # the message is out; a failed upload is noted, not fatal
        detail = redact(f"chart upload failed: {type(exc).__name__}: {exc}", secrets)
        log.warning("Slack: %s", detail)
        result.detail = detail


def _send_webhook(
    notifier: SlackTarget, message: SlackMessage, result: NotifyResult, counter: RetryCounter,
    secrets: list[str], log: Any,
) -> None:
    from slack_sdk.webhook import WebhookClient

    url = notifier.webhook_url.get_secret_value().strip() if notifier.webhook_url else ""
    client = WebhookClient(url, timeout=notifier.timeout_s, logger=sdk_logger(log, secrets),
                           retry_handlers=retry_handlers(notifier.max_retries, counter))
    resp = client.send(text=message.text, blocks=message.blocks, unfurl_links=False)
    if resp.status_code != 200:
        raise RuntimeError(f"webhook answered HTTP {resp.status_code}: {resp.body[:200]}")
    result.status = "sent"


def deliver(
    notifier: SlackTarget | None,
    record: RunRecord,
    comparison: RegressionReport | None,
    *,
    chart: Path | None = None,
    report_location: str = "",
    run_url: str = "",
    logger: Any = None,
) -> NotifyResult:
    """Decide, build and send the run's Slack message. Never raises; the result says what happened."""
    log = logger or logging.getLogger("roost.notify")
    kind = message_kind(record, comparison)
    if notifier is None:
        return NotifyResult(status="skipped", kind=kind, detail="no Slack notifier configured")
    if not should_notify(kind, notifier.notify_on):
        return NotifyResult(status="skipped", kind=kind, transport=notifier.transport,
                            detail=f"{kind} messages are off (notify_on: {', '.join(notifier.notify_on) or 'nothing'})")
    secrets = notifier.secrets()
    result = NotifyResult(status="failed", kind=kind, transport=notifier.transport,
                          channel=notifier.channel if notifier.transport == "bot" else "")
    counter = RetryCounter(log)
    try:
        message = build_message(record, comparison, run_url=run_url, report_location=report_location,
                                mentions=notifier.mention_on_regression)
        if notifier.transport == "bot":
            _send_bot(notifier, message, chart, result, counter, secrets, log)
        else:
            _send_webhook(notifier, message, result, counter, secrets, log)
    except Exception as exc:
        result.status = "failed"
        what = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, TimeoutError):  # connected, then no answer: not retried (Slack may have posted it)
            what = f"no answer from Slack within {notifier.timeout_s} s ({what})"
        result.detail = redact(what, secrets)[:1000]
    result.retries = counter.count
    if result.status == "sent":
        log.info("Slack: %s message sent via %s%s", kind, result.transport,
                 f" to {result.channel} (ts {result.message_ts})" if result.channel else "")
    else:
        log.error("Slack: %s message not sent (the run is unaffected): %s", kind, result.detail)
    return result


