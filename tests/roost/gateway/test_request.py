"""A request read as vLLM reads it (``roost.gateway.request``), backend errors as clients see them
(``roost.gateway.upstream_errors``), the forwarded user (``keys.forwarded_user``), and the stream meter's
error events and secrets. Parity with vLLM's own request models: ``test_request_parity.py``."""

from __future__ import annotations

import base64
import json
from typing import Any

import orjson
import pytest

from roost.gateway.keys import forwarded_user
from roost.gateway.metering import StreamMeter, answer_texts, secret_pattern
from roost.gateway.request import InvalidRequest, Reading, TooDeep, encode, forwarded_body, read_request
from roost.gateway.upstream_errors import clean_message, relayed_error, stream_error_event
from roost.secrets import redact

KEY = "upstream-key-5f2b9c0d1e7a"


def scrub(text: str) -> str:
    return redact(text, [KEY])


@pytest.mark.parametrize("spelling", [True, "true", "yes", "on", "1", "t", "y", "TRUE", 1, 1.0])
def test_every_spelling_vllm_reads_as_a_stream_is_a_stream(spelling: Any) -> None:
    for endpoint in ("chat", "completions"):
        reading = read_request(endpoint, {"model": "m", "stream": spelling, "prompt": "x", "messages": []})
        assert reading.stream is True
        body = forwarded_body({"model": "m", "stream": spelling}, reading)
        assert body is not None and body["stream"] is True  # the backend gets it as read
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


@pytest.mark.parametrize("spelling", [False, "false", "no", "off", "0", 0, None])
def test_every_spelling_vllm_reads_as_no_stream_is_forwarded_as_received(spelling: Any) -> None:
    reading = read_request("chat", {"model": "m", "stream": spelling})
    assert reading.stream is False and forwarded_body({"stream": spelling}, reading) is None


@pytest.mark.parametrize("bad", ["maybe", 2, "2", "", 0.5, [], {}])
def test_a_stream_vllm_refuses_is_refused_naming_the_field(bad: Any) -> None:
    with pytest.raises(InvalidRequest) as err:
        read_request("chat", {"model": "m", "stream": bad})
    assert err.value.param == "stream" and "`stream`" in err.value.message


def test_stream_options_need_a_truthy_stream_in_the_raw_body_as_in_vllm() -> None:
    with pytest.raises(InvalidRequest) as err:
        read_request("completions", {"stream": 0, "stream_options": {"include_usage": True}})
    assert err.value.param == "stream_options" and "stream=True" in err.value.message
    # vLLM checks the raw value: "false" is a truthy string, so it passes, then reads as no stream
    assert read_request("chat", {"stream": "false", "stream_options": {"include_usage": True}}).stream is False
    assert read_request("chat", {"stream": 0, "stream_options": {}}).stream is False  # an empty dict is falsy


def test_usage_options_are_read_with_vllms_defaults_and_rule() -> None:
    r = read_request("chat", {"stream": True, "stream_options": {}})
    assert (r.include_usage, r.continuous_usage) == (False, False)  # vLLM's StreamOptions default both False
    r = read_request("chat", {"stream": True, "stream_options": {"include_usage": "yes", "continuous_usage_stats": 1}})
    assert (r.include_usage, r.continuous_usage) == (True, True)
    # continuous usage only with usage (vLLM's should_include_usage)
    r = read_request("chat", {"stream": True, "stream_options": {"continuous_usage_stats": True}})
    assert (r.include_usage, r.continuous_usage) == (False, False)
    r = read_request("chat", {"stream": True, "stream_options": {"include_usage": "false"}})
    assert r.include_usage is False


def test_choices_and_prompts_are_read_as_vllm_reads_them() -> None:
    assert read_request("chat", {"n": "3"}).n == 3
    assert read_request("chat", {"n": None}).n == 1
    assert read_request("completions", {"prompt": ["a", "b", "c"], "n": 2}).prompts == 3
    assert read_request("completions", {"prompt": [[1, 2], [3]]}).prompts == 2
    assert read_request("completions", {"prompt": [1, 2, 3]}).prompts == 1
    assert read_request("completions", {"prompt": "abc"}).prompts == 1
    with pytest.raises(InvalidRequest) as err:
        read_request("completions", {"prompt": [1, -2]})
    assert err.value.param == "prompt"
    with pytest.raises(InvalidRequest):
        read_request("chat", {"n": "two"})
    body = forwarded_body({"stream": "1", "n": "2"}, read_request("chat", {"stream": "1", "n": "2"}))
    assert body is not None and body["n"] == 2
    assert read_request("embeddings", {"stream": "nonsense"}) == Reading(stream=False, n=1, prompts=1,
                                                                        include_usage=False, continuous_usage=False)


def test_deep_bodies_are_encoded_as_deep_as_vllm_reads_them_and_refused_beyond() -> None:
    for depth in (10, 300, 800):
        nested: Any = "x"
        for _ in range(depth):
            nested = [nested]
        body = {"model": "m", "stream": True, "extra": nested}
        assert json.loads(encode(body)) == body
    very: Any = []
    for _ in range(5000):
        very = [very]
    with pytest.raises(TooDeep):
        encode({"v": very})


def test_backend_refusals_keep_their_reason_and_lose_their_internals() -> None:
    vllm = {"error": {"message": "This model's maximum context length is 2048 tokens. However, you requested 3000.",
                      "type": "BadRequestError", "param": "max_tokens", "code": 400}}
    status, body = relayed_error(400, vllm, scrub)
    err = orjson.loads(body)["error"]
    assert status == 400 and err["message"].startswith("This model's maximum context length is 2048")
    assert (err["type"], err["param"], err["code"]) == ("BadRequestError", "max_tokens", "400")
    leaky = {"error": {"message": f"bad key {KEY} from http://10.1.2.3:8004/v1 at 192.168.0.7:8000 in "
                       "/usr/lib/python3/site-packages/vllm/x.py\nTraceback (most recent call last):\n  File ...",
                       "type": "<script>", "code": {"x": 1}}}
    status, body = relayed_error(422, leaky, scrub)
    text = body.decode()
    for leak in (KEY, "10.1.2.3", "192.168.0.7", "site-packages", "Traceback", "<script>"):
        assert leak not in text
    assert orjson.loads(body)["error"]["message"].startswith("bad key ***")


@pytest.mark.parametrize("status", [500, 502, 503])
def test_backend_failures_say_only_that_the_server_failed(status: int) -> None:
    tb = {"error": {"message": "Traceback (most recent call last):\n  File \"/srv/vllm/engine.py\", line 3\n"
                    "RuntimeError: CUDA out of memory at 127.0.0.1:8004", "type": "InternalServerError", "code": 500}}
    got, body = relayed_error(status, tb, scrub)
    assert got == status and orjson.loads(body)["error"] == {
        "message": f"the model's server failed (HTTP {status})", "type": "api_error", "param": None,
        "code": "backend_error"}
    assert relayed_error(500, None, scrub)[0] == 500  # not JSON at all


def test_a_backend_refusing_the_gateways_key_is_the_gateways_problem() -> None:
    for status in (401, 403):
        got, body = relayed_error(status, {"error": {"message": "Unauthorized"}}, scrub)
        assert got == 502 and orjson.loads(body)["error"]["code"] == "backend_auth"


def test_clean_message_is_one_bounded_line() -> None:
    assert clean_message("a\x1b[31mb\nsecond line", scrub) == "a[31mb"
    assert len(clean_message("x" * 5000, scrub)) == 500
    assert clean_message("at [::1]:8000 and localhost:8004", scrub) == "at <address> and <address>"


def test_stream_error_events_are_rewritten_and_secrets_scrubbed_in_every_form() -> None:
    forms = [KEY, base64.b64encode(f"x:{KEY}".encode()).decode(), base64.b64encode(KEY.encode()).decode()]
    upstream = {"error": {"message": f"failed with key {forms[0]} basic {forms[1]} b64 {forms[2]} at 10.0.0.2:8000",
                          "type": "BadRequestError", "param": None, "code": 400}}
    from roost.secrets import encoded_forms

    secrets = secret_pattern(f.encode() for f in (KEY, *encoded_forms(KEY)))
    meter = StreamMeter(error_event=lambda obj: stream_error_event(obj, scrub), secrets=secrets,
                        scrub=lambda b: scrub(b.decode()).encode())
    out = meter.feed(b"data: " + json.dumps(upstream).encode() + b"\n\n")
    assert meter.error is not None
    for form in forms:
        assert form.encode() not in out
    assert b"10.0.0.2" not in out and out.startswith(b"data: {\"error\"")
    # a secret in an ordinary event is masked too (the meter checks every event)
    leak = b'data: {"choices":[{"index":0,"delta":{"content":"' + KEY.encode() + b'"}}]}\n\n'
    assert KEY.encode() not in meter.feed(leak)
    assert stream_error_event({"object": "error", "message": "m", "code": 503}, scrub).startswith(b"data: ")


def test_answer_texts_are_what_a_backend_without_usage_is_billed_by() -> None:
    chat = {"choices": [{"message": {"content": "hi", "reasoning": "think ",
                                     "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}},
                        {"message": {"content": None}}]}
    assert answer_texts(chat) == ["think hif{}"]
    assert answer_texts({"choices": [{"text": "a"}, {"text": "b"}]}) == ["a", "b"]
    assert answer_texts(None) == [] and answer_texts({"choices": "x"}) == []


def test_forwarded_users_are_one_string_however_they_were_sent() -> None:
    email = "jöhn.dœ@exämple.com"
    assert forwarded_user(email.encode("utf-8")) == email  # raw UTF-8 (aiohttp)
    assert forwarded_user(b"UTF-8''j%C3%B6hn.d%C5%93%40ex%C3%A4mple.com") == email  # RFC 8187
    assert forwarded_user(email.encode("latin-1", "replace")) is not None  # not UTF-8: Latin-1, never an error
    assert forwarded_user("jo\u0308hn@x.org".encode()) == "jöhn@x.org"  # NFC: composed and decomposed are one
    assert forwarded_user(b"  \t ") is None and forwarded_user(None) is None
    assert forwarded_user(b"a\x00b\x7fc") == "abc"
    assert len(forwarded_user(b"x" * 1000) or "") == 320


_FIELD_VALUES: dict[str, list[Any]] = {
    "stream": ["absent", True, False, None, "true", 1, 0],
    "n": ["absent", 1, 3, 0, -1, None, True, "2", 2.0],
    "stream_options": ["absent", None, {}, {"include_usage": True}, {"include_usage": False},
                       {"include_usage": True, "continuous_usage_stats": True}, {"include_usage": None},
                       {"include_usage": "yes"}, {"continuous_usage_stats": True}, [], "x"],
    "prompt": ["absent", "one text", None, ["a", "b"], [1, 2, 3]],
}


def _bodies() -> list[dict[str, Any]]:
    import itertools

    out = []
    for values in itertools.product(*_FIELD_VALUES.values()):
        body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        body.update({k: v for k, v in zip(_FIELD_VALUES, values, strict=True) if not (isinstance(v, str) and v == "absent")})
        out.append(body)
    return out


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_the_plain_reading_of_the_hot_path_is_pydantics_reading(endpoint: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The door's hot path reads plain bodies without pydantic: for every body, what it reads (or refuses)
    is what the pydantic models read."""
    import roost.gateway.request as request

    def outcome(body: dict[str, Any]) -> Any:
        try:
            return read_request(endpoint, body).model_dump()
        except InvalidRequest as exc:
            return ("refused", exc.message, exc.param)

    bodies = _bodies()
    fast = [outcome(b) for b in bodies]
    monkeypatch.setattr(request, "_plain_reading", lambda _e, _b: None)  # pydantic for every body
    assert fast == [outcome(b) for b in bodies]


def test_secret_forms_find_every_form_anywhere() -> None:
    forms = secret_pattern(f.encode() for f in (KEY, *(f for f in (base64.b64encode(KEY.encode()).decode(),))))
    assert forms is not None
    assert forms.search(b"data: " + KEY.encode() + b"\n\n") is not None
    assert forms.search(b"x" + base64.b64encode(KEY.encode()) + b"y") is not None
    assert forms.search(b"data: {\"choices\": []}\n\n") is None
    assert secret_pattern([b"", b""]) is None
