"""No secret roost is given is ever printed, logged or stored: plant distinctive ones, run what roost
runs (a landing, a rebenchmark, failures, the gateway), then look for them everywhere.

Planted (each distinctive, each looked for as it is, URL-encoded, JSON-escaped and base64-encoded at
every alignment: ``tests/support/secret_scan.py``):

- a Hugging Face token (``HF_TOKEN``) that a gated repository on the local Hub mirror needs
  (``support.hub.GatedHub``), and a wrong one (a landing refused by the gate);
- a vLLM API key, in the ``roost-vllm-api-key`` Secret block: the landing starts vLLM with it
  (through the server's environment), the rebenchmark finds it again, the gateway forwards with it,
  ``roost bench`` sends it to a server whose error bodies echo the request's headers; and a wrong one
  (``roost bench`` answered 401);
- a Slack bot token, in the ``roost-slack`` notifier block (the local Slack receiver checks it);
- a gateway key (``roost gateway key add``), and a wrong one the gateway refuses;
- the password of a server URL's userinfo (``roost bench http://user:PASSWORD@...``).

What runs: ``roost run`` of a saved profile of the tiny checkpoint on the process backend, kept serving
(preflight, download, audit, serve, benchmark, evaluation, report, Slack), with a quick benchmark and a
two-question evaluation; meanwhile ``roost run`` with the wrong token (refused at the preflight,
reported, sent to Slack) and ``roost bench`` against two servers that echo the request's headers, over
a URL with a password (one fails every request, so the benchmark fails sizing its prompts; one answers
the prompt-sizing requests, so every streamed request records the echo as its error); then the
``rebenchmark`` flow on the kept server, ``roost bench`` with the wrong key (401), and ``roost gateway
serve`` (the kept server through the landing's registration, an echoing server by a URL with a
password) answering a request, passing on an echoed error and refusing a wrong key, and its ``usage``
and ``key list``.

Where the scan looks: every file under ``ROOST_HOME`` (vLLM's and the servers' logs, state files,
evaluation logs, the gateway registration), ``PREFECT_HOME`` (Prefect's SQLite database: flow-run
parameters, logs, artifacts, task results) and the results store (Parquet decoded, every JSON record,
the reports), this module's own files (the gateway's log and usage database, olah's log, benchmark
output files), the Prefect server's log, every output of every command, every message the Slack
receiver got, the gateway's answers and ``/metrics``, every block document through Prefect's API with
its secrets included, the values its schema declares secret left out (the Secret block's value, the
notifier's token: where the secrets are meant to be), and the command line of every process seen while
the servers ran (sampled every 0.25 s), but those of the commands this test started itself with a URL
holding the password. A file not modified since the secrets were made (what earlier tests of the
session left) cannot hold one and is counted, not read. Zero hits; the test prints where it looked and
how many bytes it read. ``test_secret_scan_docker.py`` looks at a server container.

The echoing server is a FAKE (``EchoHeaders``): a fault a healthy vLLM does not produce.
"""

from __future__ import annotations

import base64
import concurrent.futures
import http.server
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from support.cli import ROOST
from support.gateway import GatewayProcess, wait_rows
from support.hostile_servers import QuietHandler
from support.secret_scan import CmdlineSampler, SecretScan, forms, without_secret_fields

HOST = "scan-cpu"
PROFILE = "scan-gated"
REPO = "acme/gated-tiny"


def _vllm_key() -> str:
    """A key in the standard base64 alphabet with a ``+`` or ``/`` in it: its URL-encoded form differs."""
    while True:
        key = "vk-" + base64.b64encode(os.urandom(24)).decode()
        if "+" in key or "/" in key:
            return key


MADE_AT = time.time() - 2.0  # the secrets below are made now: no file older than this can hold one
PLANTED = {
    "HF token": "hf_" + secrets.token_hex(17),
    "wrong HF token": "hf_" + secrets.token_hex(17),
    "vLLM API key": _vllm_key(),
    "wrong vLLM API key": "vk-wrong-" + secrets.token_urlsafe(18),
    "Slack bot token": f"xoxb-{secrets.randbelow(10**12):012d}-{secrets.randbelow(10**12):012d}-"
                       + secrets.token_hex(12),
    "wrong gateway key": "rk-" + secrets.token_urlsafe(32),
    "URL password": "urlpw-" + secrets.token_hex(12),
}


class EchoHeaders:
    """A FAKE OpenAI-compatible server for a fault a healthy vLLM does not produce: its errors echo the
    request's headers (as some proxies and frameworks do), the ``Authorization`` value first (as it is,
    URL-encoded and base64-encoded: within the 300 characters roost keeps of an error), then every
    header as a dict, URL-encoded and base64-encoded.

    ``answer_probes``: a one-token, non-streamed chat completion is answered (with usage), so a
    benchmark gets to its streamed requests, which fail; otherwise every answer but ``/v1/models`` is
    such an error (the benchmark fails while sizing its prompts)."""

    def __init__(self, *, answer_probes: bool) -> None:
        self.requests = 0
        owner = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"
            _send = QuietHandler.send_body

            def _answer(self) -> None:
                owner.requests += 1
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/v1/models":
                    data = [{"id": "echo", "object": "model", "max_model_len": 4096}]
                    self._send(200, json.dumps({"object": "list", "data": data}).encode())
                    return
                req = json.loads(raw) if raw.startswith(b"{") else {}
                if answer_probes and self.path == "/v1/chat/completions" and not req.get("stream"):
                    words = sum(len(str(m.get("content", "")).split()) for m in req.get("messages", []))
                    usage = {"prompt_tokens": 5 + words, "completion_tokens": 1, "total_tokens": 6 + words}
                    choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}
                    self._send(200, json.dumps({"object": "chat.completion", "choices": [choice], "usage": usage}).encode())
                    return
                auth = self.headers.get("Authorization", "")
                head = str(self.headers)
                message = (f"rejected {auth} ({quote(auth, safe='')}, {base64.b64encode(auth.encode()).decode()}); "
                           f"{self.command} {self.path} headers {dict(self.headers.items())}, "
                           f"{quote(head, safe='')}, {base64.b64encode(head.encode()).decode()}")
                self._send(400, json.dumps({"error": {"message": message, "type": "BadRequestError"}}).encode())

            do_GET = do_POST = _answer

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that left mid-answer is not news
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, password: str | None = None) -> str:
        return f"http://{f'scan-user:{password}@' if password else ''}127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Ran:
    """One command of the scenario: what it was, how it ended, what it printed."""

    name: str
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@dataclass
class Scenario:
    tmp: Path
    results: Path
    gateway_db: str
    gateway_log: Path
    sampler: CmdlineSampler
    ran: dict[str, Ran] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    by_design: list[str] = field(default_factory=list)
    """What shows a secret by design, left out of the scan: ``roost gateway key add`` prints the new key
    once (its stdout; its stderr is scanned), and a URL with a password typed on roost's command line is
    in that process's arguments (the arguments of every process roost started are scanned)."""
    own_argv: list[list[str]] = field(default_factory=list)
    slack_bodies: list[bytes] = field(default_factory=list)

    def run(self, name: str, args: list[str], *, env: dict[str, str] | None = None, timeout: float = 900) -> Ran:
        t0 = time.monotonic()
        self.own_argv.append(args)
        res = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=dict(os.environ) | (env or {}))
        ran = self.ran[name] = Ran(name, args, res.returncode, res.stdout, res.stderr, time.monotonic() - t0)
        return ran


def _json_out(ran: Ran) -> Any:
    return json.loads(ran.stdout[ran.stdout.index("{"):])


@pytest.fixture(scope="module")
def scenario(prefect_api: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    from prefect.blocks.system import Secret
    from support.hub import GatedHub
    from support.slack_receiver import SlackReceiver

    from blocks.hosts import HostBlock
    from blocks.profiles import ModelProfileBlock
    from blocks.resolve import VLLM_API_KEY_BLOCK
    from blocks.slack import SLACK_BLOCK, SlackNotifier
    from roost.demo.evalset import DEMO_EVAL_REPO, generate_gsm8k_mini
    from roost.hosts import CPU
    from roost.hub.mirror import HubMirror
    from roost.hub.publish import publish_repo
    from roost.profiles import LOCAL
    from roost.serve.process import reap_stale_servers

    tmp = tmp_path_factory.mktemp("secret-scan")
    mirrors = tmp / "mirrors"
    publish_repo(tiny_model, mirrors, REPO)
    publish_repo(generate_gsm8k_mini(tmp / "gsm8k-mini"), mirrors, DEMO_EVAL_REPO, repo_type="datasets")
    receiver = SlackReceiver(token=PLANTED["Slack bot token"], webhook_secret="scan-hook-" + secrets.token_hex(8))
    echoes = EchoHeaders(answer_probes=False), EchoHeaders(answer_probes=True)
    saved = [("roost-host", HOST), ("model-profile", PROFILE),
             ("secret", VLLM_API_KEY_BLOCK), ("roost-slack-notifier", SLACK_BLOCK)]
    with HubMirror(mirrors, workdir=tmp / "olah") as mirror, \
            GatedHub(mirror.endpoint, REPO, token=PLANTED["HF token"]) as gated, \
            pytest.MonkeyPatch.context() as mp, CmdlineSampler() as sampler:
        sc = Scenario(tmp=tmp, results=tmp / "results", gateway_db=f"sqlite:///{tmp / 'gateway.db'}",
                      gateway_log=tmp / "gateway.log", sampler=sampler)
        mp.setenv("ROOST_RESULTS_DIR", str(sc.results))
        mp.setenv("HF_ENDPOINT", gated.endpoint)
        mp.setenv("ROOST_GATEWAY_BACKENDS_DIR", str(tmp / "backends"))
        mp.delenv("VLLM_API_KEY", raising=False)
        mp.delenv("HF_TOKEN", raising=False)
        HostBlock.from_profile(CPU.model_copy(update={"name": HOST})).save(HOST, overwrite=True)
        quick = {"prompt_lengths": [128], "output_tokens": 16, "concurrency": [2], "repeats": 1, "warmup": 1}
        gsm8k = {"task": "gsm8k", "dataset": DEMO_EVAL_REPO, "limit": 2, "max_tokens": 16, "temperature": 0.0,
                 "thinking": False, "concurrency": 2}
        # eager: no compile warm-up (the cold start is what it is; the scan is about where the key goes)
        base = LOCAL.model_copy(update={"repo_id": REPO, "demo": False, "host": HOST, "bench": quick,
                                        "evals": [gsm8k], "vllm_overrides": [*LOCAL.vllm_overrides, "--enforce-eager"]})
        ModelProfileBlock.from_profile(base.model_copy(update={"name": PROFILE})).save(PROFILE, overwrite=True)
        Secret(value=PLANTED["vLLM API key"]).save(VLLM_API_KEY_BLOCK, overwrite=True)  # type: ignore[arg-type]
        SlackNotifier(bot_token=PLANTED["Slack bot token"], channel="C0SCAN", base_url=receiver.api_url,  # type: ignore[arg-type]
                      notify_on=["every_run", "regression", "failure"], prefect_ui_url="http://127.0.0.1:4200").save(
            SLACK_BLOCK, overwrite=True)
        try:
            _play(sc, *echoes)
        finally:
            sc.facts["reaped"] = reap_stale_servers(HOST)
            sc.slack_bodies = [c.body for c in receiver.calls("chat.postMessage")] + [
                c.body for c in receiver.calls("files.completeUploadExternal")]
            sc.facts["slack_posts"] = [c.json() for c in receiver.calls("chat.postMessage")]
            receiver.close()
            for echo in echoes:
                echo.close()
    try:
        yield sc  # the blocks stay until the scan has read them through the API
    finally:
        _delete_blocks(saved)


def _play(sc: Scenario, echo_all: EchoHeaders, echo_streams: EchoHeaders) -> None:
    hf = {"HF_TOKEN": PLANTED["HF token"]}
    key = {"VLLM_API_KEY": PLANTED["vLLM API key"]}
    quick = ["--output-tokens", "4", "--repeats", "1", "--warmup", "0"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # 1. the landing, kept serving (the key from the Secret block, through the server's environment);
        # what needs no server of its own runs meanwhile
        landing = pool.submit(sc.run, "land", [ROOST, "run", "--profile", PROFILE, "--keep-serving", "--json"], env=hf)
        # 2. a landing the Hub's gate refuses (a token without access): reported, stored, sent to Slack
        sc.run("land, wrong HF token", [ROOST, "run", "--profile", PROFILE, "--json"],
               env={"HF_TOKEN": PLANTED["wrong HF token"]})
        # 3. roost bench against servers that echo the request's headers, over a URL with a password:
        # every answer an error (while sizing prompts); the probes answered, the streams errors
        for name, echo in (("sizing", echo_all), ("streams", echo_streams)):
            target = echo.url(PLANTED["URL password"])
            sc.run(f"bench, echoing server ({name})", [ROOST, "bench", target, "--model", "echo", "--prompt-lengths",
                                                       "64", "--concurrency", "2", *quick, "--json",
                                                       "--output", str(sc.tmp / f"bench-echo-{name}.json")],
                   env=key, timeout=300)
            sc.run(f"bench, echoing server ({name}, table)", [ROOST, "bench", target, "--model", "echo",
                                                              "--prompt-lengths", "", "--concurrency", "1", *quick],
                   env=key, timeout=300)
        sc.by_design.append(f"the arguments of the `roost bench {echo_all.url('PASSWORD')}` processes this test started")
        sc.facts["echo_requests"] = echo_all.requests, echo_streams.requests
        add = subprocess.run([ROOST, "gateway", "key", "add", "scan-alice", "--db", sc.gateway_db, "--json"],
                             capture_output=True, text=True, timeout=120)
        assert add.returncode == 0, add.stderr
        sc.ran["gateway key add"] = Ran("gateway key add", [], add.returncode, "", add.stderr, 0.0)
        sc.by_design.append("the stdout of `roost gateway key add --json` (the new key, printed once)")
        good = sc.facts["gateway_key"] = json.loads(add.stdout)["key"]
        land = landing.result()
    assert land.returncode == 0, land.stderr[-4000:]
    sc.facts["land"] = _json_out(land)
    url = _served_url()
    sc.sampler.sample()
    # 4. the nightly rebenchmark of what the host serves (the key found again from the state file's reference)
    sc.run("rebenchmark", [sys.executable, "-c", "import json; from flows.rebenchmark import rebenchmark; "
                           f"print(json.dumps(rebenchmark(host={HOST!r}, notify=True)))"], env=hf)
    # 5. roost bench with a wrong key: 401
    sc.run("bench, wrong key", [ROOST, "bench", url, "--model", "tiny", "--prompt-lengths", "64", "--concurrency", "",
                                *quick, "--json", "--output", str(sc.tmp / "bench-401.json")],
           env={"VLLM_API_KEY": PLANTED["wrong vLLM API key"]}, timeout=300)
    # 6. the gateway: the landed server through its registration, the echoing server by URL (with a
    # password); the upstream key from the Secret block, as a worker's gateway finds it
    gw = GatewayProcess(sc.gateway_db, [echo_streams.url(PLANTED["URL password"])], log_path=sc.gateway_log,
                        registry=True)
    gw.env.pop("VLLM_API_KEY")
    gw.start(timeout_s=120)
    assert gw.proc is not None
    sc.own_argv.append([str(a) for a in gw.proc.args])  # type: ignore[union-attr]
    sc.by_design.append("the arguments of the `roost gateway serve --backend URL-WITH-PASSWORD` this test started")
    try:
        sc.sampler.sample()

        def chat(model: str, bearer: str) -> tuple[int, str]:
            body = {"model": model, "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 4,
                    "stream": True, "stream_options": {"include_usage": True}}
            r = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {bearer}"},
                           timeout=120)
            return r.status_code, r.text

        models = httpx.get(f"{gw.url}/v1/models", headers={"Authorization": f"Bearer {good}"}, timeout=30)
        sc.facts["gateway"] = {"ok": chat("tiny", good), "echo": chat("echo", good),
                               "bad": chat("tiny", PLANTED["wrong gateway key"]), "models": models.text,
                               "metrics": gw.metrics()}
        sc.facts["usage_rows"] = wait_rows(sc.gateway_db, 2)
        sc.sampler.sample()
    finally:
        gw.stop()
    sc.run("gateway usage", [ROOST, "gateway", "usage", "--db", sc.gateway_db, "--json"])
    sc.run("gateway key list", [ROOST, "gateway", "key", "list", "--db", sc.gateway_db, "--json"])


def _served_url() -> str:
    from roost.serve.process import process_servers

    (server,) = process_servers(HOST)
    return str(server.base_url)


def _delete_blocks(saved: list[tuple[str, str]]) -> None:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        for slug, name in saved:
            try:
                doc = client.read_block_document_by_name(name=name, block_type_slug=slug)
            except ObjectNotFound:
                continue
            assert doc.id is not None
            client.delete_block_document(doc.id)


def test_the_scanner_finds_a_secret_in_every_form_it_looks_for(tmp_path: Path) -> None:
    """The scan can fail: a secret hidden plain, URL-encoded, base64-encoded inside a longer text, in a
    compressed Parquet column and in a gzipped file is found each time; an unrelated text is not."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    secret = PLANTED["vLLM API key"]
    scan = SecretScan({"key": secret})
    scan.text("t", "plain", f"error: Bearer {secret} was refused")
    scan.text("t", "url", "next=" + quote(f"x {secret}", safe=""))
    for prefix in ("", "a", "ab"):
        scan.text("t", f"base64 after {prefix!r}", base64.b64encode(f"{prefix}Authorization: Bearer {secret}".encode()).decode())
    scan.text("t", "basic auth", base64.b64encode(f"user:{secret}".encode()).decode())
    pq.write_table(pa.table({"error": [f"HTTP 400: {secret}"] * 50}), tmp_path / "r.parquet", compression="zstd")
    (tmp_path / "log.gz").write_bytes(gzip.compress(f"line with {secret}\n".encode()))
    scan.tree("files", tmp_path)
    found = {h.where.split(" (")[0] for h in scan.hits}
    assert {"plain", "url", "base64 after ''", "base64 after 'a'", "base64 after 'ab'", "basic auth"} <= found, scan.report()
    assert any(h.where.endswith("r.parquet (rows)") for h in scan.hits), scan.report()
    assert any(h.where.endswith("log.gz (gunzip)") for h in scan.hits), scan.report()
    clean = SecretScan({"key": secret})
    clean.text("t", "other", f"Bearer {PLANTED['wrong vLLM API key']} " + base64.b64encode(os.urandom(64)).decode())
    assert clean.hits == []
    assert forms(secret)["url-encoded"] != secret.encode()  # the planted key has a character URL encoding changes


def test_redact_removes_a_secret_in_every_encoded_form_and_any_echoed_credential() -> None:
    """What a server may echo of a request: the key as it is, URL-encoded, JSON-escaped, inside a base64
    header dump at any alignment, and a ``Basic`` user:password pair (an URL's userinfo) roost was not
    told about; ordinary words after "Basic" stay."""
    from roost.secrets import MASK, redact

    key, password = PLANTED["vLLM API key"], PLANTED["URL password"]
    basic = base64.b64encode(f"scan-user:{password}".encode()).decode()
    texts = [f"headers {{'Authorization': 'Bearer {key}'}}", quote(f"Authorization: Bearer {key}", safe=""),
             json.dumps({"k": key}), f"Authorization: Basic {basic}", quote(f"Authorization: Basic {basic}", safe=""),
             *(base64.b64encode(f"{p}Authorization: Bearer {key}\r\nHost: x".encode()).decode() for p in ("", "a", "ab"))]
    for text in texts:
        out = redact(text, [key])
        assert MASK in out, out
        scan = SecretScan({"key": key, "password": password})
        scan.text("redacted", text[:40], out)
        assert scan.hits == [], (text, out)
    assert redact("Basic authentication required; Basic Settings", []) == "Basic authentication required; Basic Settings"
    # a short key is removed where it is a word of its own, not from inside other words
    assert redact('{"token_times": [1], "key": "k"} latest test', ["k", "test"]) == '{"token_times": [1], "key": "***"} latest ***'
    assert redact("the Bearer token abc is short", []) == "the Bearer token abc is short"


@pytest.mark.slow
def test_every_path_ran_and_failed_where_it_should(scenario: Scenario) -> None:
    """The scan means something only if every path ran: the landing and the rebenchmark measured, the
    failures failed the way they should, the echoing servers were asked and their echo reached roost's
    output, the gateway served and refused, Slack got every run."""
    land = scenario.facts["land"]
    assert land["status"] == "completed" and land["points"] and land["evals"][0]["status"] == "completed"
    assert scenario.ran["rebenchmark"].returncode == 0, scenario.ran["rebenchmark"].stderr[-3000:]
    rebench = _json_out(scenario.ran["rebenchmark"])
    assert rebench["status"] == "completed" and rebench["meta"]["host"] == HOST
    assert {s["stage"]: s["status"] for s in rebench["stages"]}["serve"] == "skipped"  # measured what runs
    assert scenario.facts["reaped"], "the kept server was not running at the end"

    gated = scenario.ran["land, wrong HF token"]
    assert gated.returncode == 2 and "Traceback" not in gated.stdout + gated.stderr, gated.stderr[-3000:]
    assert "gated" in gated.stderr.strip().splitlines()[-1], gated.stderr[-1000:]

    wrong = scenario.ran["bench, wrong key"]
    assert wrong.returncode == 2 and "(HTTP 401)" in wrong.stderr, (wrong.stdout[-2000:], wrong.stderr[-2000:])
    assert len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
    for name in ("sizing", "streams"):
        echoed = scenario.ran[f"bench, echoing server ({name})"]
        assert "Traceback" not in echoed.stderr, echoed.stderr[-3000:]
        assert "rejected" in echoed.stdout + (scenario.tmp / f"bench-echo-{name}.json").read_text(), echoed.stdout[-2000:]
    streams = json.loads((scenario.tmp / "bench-echo-streams.json").read_text())
    assert streams["requests"] and all("rejected" in r["error"] for r in streams["requests"]), streams["requests"][:1]
    assert min(scenario.facts["echo_requests"]) > 2

    gw = scenario.facts["gateway"]
    assert gw["ok"][0] == 200 and "[DONE]" in gw["ok"][1], gw["ok"]
    assert gw["echo"][0] == 400 and "rejected" in gw["echo"][1], gw["echo"]
    assert gw["bad"][0] == 401, gw["bad"]
    rows = {r["model"]: r for r in scenario.facts["usage_rows"]}
    assert (rows["tiny"]["key_name"], rows["tiny"]["status"], rows["tiny"]["completion_tokens"]) == ("scan-alice", "ok", 4)
    assert rows["echo"]["status"] == "http_400", rows["echo"]
    # Slack: the refused landing (a failure) and the two measured runs, with the planted token
    posts = scenario.facts["slack_posts"]
    runs = {land["meta"]["run_id"], rebench["meta"]["run_id"]}
    assert sum(any(r in json.dumps(p) for r in runs) for p in posts) == 2 and len(posts) >= 3, len(posts)


@pytest.mark.slow
def test_no_planted_secret_is_printed_logged_or_stored(scenario: Scenario, session_dir: Path) -> None:
    from roost.settings import roost_home

    scan = SecretScan(PLANTED | {"gateway key": scenario.facts["gateway_key"]}, since=MADE_AT)
    for ran in scenario.ran.values():
        scan.text("command output (stdout, stderr)", f"{ran.name}: stdout", ran.stdout)
        scan.text("command output (stdout, stderr)", f"{ran.name}: stderr", ran.stderr)
    for i, body in enumerate(scenario.slack_bodies):
        scan.blob("Slack messages received", f"Slack request {i}", body)
    for k, v in scenario.facts["gateway"].items():
        scan.json("gateway answers (/metrics too)", f"gateway {k}", v)
    scan.json("gateway answers (/metrics too)", "usage rows", scenario.facts["usage_rows"])
    home, prefect_home = roost_home(), Path(os.environ["PREFECT_HOME"])
    scan.tree("ROOST_HOME (vLLM and server logs, state, evals)", home)
    scan.tree("PREFECT_HOME (Prefect's database, results)", prefect_home)
    scan.tree("results store and reports", scenario.results)
    scan.tree("this module's files (gateway log + db, olah, output)", scenario.tmp, skip=[scenario.results])
    scan.file("Prefect server log", session_dir / "prefect-server.log")
    documents = _block_documents()
    for where, data in documents:  # with their secrets, minus the fields their schemas declare secret
        scan.json("Prefect block documents (API, non-secret fields)", where, data)
    scenario.sampler.scan_into(scan, skip=scenario.own_argv)
    report = scan.report()
    print(report)
    print("commands: " + "; ".join(f"{r.name} {r.seconds:.1f} s (exit {r.returncode})" for r in scenario.ran.values()))
    print("left out by design: " + "; ".join(scenario.by_design))

    looked = "\n".join(scan.files)
    port = scenario.facts["land"]["serve"]["attempts"][-1]["port"]
    for must in (f"servers/{HOST}-tiny-{port}.log", "prefect.db", "gateway.log", "gateway.db", "olah",
                 "results/requests/", "results/records/", "results/eval_answers/", "report.html", "report.md",
                 "bench-echo-streams.json", "gsm8k.jsonl"):
        assert must in looked, f"the scan did not read {must}"
    assert scenario.sampler.matching(b"vllm.entrypoints"), "no vLLM process was seen while sampling"
    assert scenario.sampler.matching(b"gateway\0serve"), "no gateway process was seen while sampling"
    assert {"secret/roost-vllm-api-key", "roost-slack-notifier/roost-slack", f"model-profile/{PROFILE}",
            f"roost-host/{HOST}"} <= {where for where, _ in documents}
    assert not scan.opaque, report
    assert scan.hits == [], report


def _block_documents() -> list[tuple[str, Any]]:
    from prefect.client.orchestration import get_client

    out: list[tuple[str, Any]] = []
    with get_client(sync_client=True) as client:
        offset = 0
        while True:
            docs = client.read_block_documents(offset=offset, limit=200, include_secrets=True)
            for d in docs:
                schema = d.block_schema.fields if d.block_schema is not None else {}
                name = f"{d.block_type.slug if d.block_type else '?'}/{d.name}"
                out.append((name, without_secret_fields(d.data, schema.get("secret_fields", []))))
            if len(docs) < 200:
                return out
            offset += 200
