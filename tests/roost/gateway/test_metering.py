"""Metering from request bodies and streams (``roost.gateway.metering``), and keys (``roost.gateway.keys``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from roost.gateway.keys import bearer_token, check_name, digest, new_key
from roost.gateway.metering import (
    StreamMeter,
    tokenize_bodies,
    tokenize_count,
)


def ev(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def chunk(text: str, *, usage: tuple[int, int] | None = None, finish: str | None = None) -> bytes:
    obj: dict[str, Any] = {"id": "c", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return ev(obj)


def stream_with_continuous_usage(n: int) -> bytes:
    body = b"".join(chunk(" t", usage=(9, i + 1), finish="length" if i == n - 1 else None) for i in range(n))
    return body + ev({"id": "c", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": n}}) + ev(b"[DONE]")


@pytest.mark.parametrize(("include", "continuous", "usage_chunks", "final"), [
    (False, False, 0, False), (True, False, 1, True), (True, True, 5, True)])
def test_the_client_gets_only_the_usage_it_asked_for(include: bool, continuous: bool, usage_chunks: int,
                                                     final: bool) -> None:
    meter = StreamMeter(client_include_usage=include, client_continuous=continuous)
    data = stream_with_continuous_usage(4)
    out = b"".join(meter.feed(data[i:i + 7]) for i in range(0, len(data), 7)) + meter.flush()  # split anywhere
    events = [e[6:] for e in out.decode().split("\n\n") if e]
    assert events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    assert sum("usage" in p for p in parsed) == usage_chunks
    assert (parsed[-1]["choices"] == []) is final
    assert "".join(p["choices"][0]["delta"]["content"] for p in parsed if p["choices"]) == " t" * 4
    assert (meter.prompt_tokens, meter.completion_tokens, meter.completion_source) == (9, 4, "usage")
    assert meter.done and meter.finished


def test_a_stream_without_usage_is_counted_per_chunk_with_text() -> None:
    meter = StreamMeter(client_include_usage=False, client_continuous=False)
    data = ev({"choices": [{"delta": {"role": "assistant", "content": ""}}]}) + chunk("a") + chunk("") + chunk("b") \
        + ev({"choices": [{"delta": {"reasoning_content": "hmm"}}]}) + chunk("c", finish="stop") + ev(b"[DONE]")
    assert meter.feed(data) == data  # nothing to take out: passed on byte for byte
    assert (meter.completion_tokens, meter.completion_source, meter.prompt_tokens) == (4, "stream-count", None)


def test_an_error_event_and_a_cut_stream_are_noticed() -> None:
    meter = StreamMeter()
    meter.feed(chunk("a", usage=(3, 1)) + ev({"error": {"message": "engine died", "code": 500}}))
    assert meter.error == "engine died" and not meter.done and meter.completion_tokens == 1
    cut = StreamMeter()
    assert cut.feed(chunk("a", usage=(3, 1)) + b'data: {"choi') != b""
    assert not cut.done and not cut.finished and cut.completion_tokens == 1


def choice_chunk(index: int, text: str, usage: tuple[int, int], finish: str | None = None) -> bytes:
    """A chunk as vLLM streams it with continuous usage: one choice, the usage of that choice alone."""
    return ev({"id": "c", "choices": [{"index": index, "text": text, "finish_reason": finish}],
               "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}})


def test_a_stream_of_several_choices_costs_the_sum_over_them_until_its_whole_usage_comes() -> None:
    """vLLM's continuous usage is per choice (``n`` of them per prompt, choice ``index = prompt * n + k``):
    a client that leaves is billed every choice's tokens, and the prompt once every prompt is known."""
    meter = StreamMeter(prompts=2, per_prompt=2)
    meter.feed(choice_chunk(0, "a", (5, 1)) + choice_chunk(1, "b", (5, 1)) + choice_chunk(0, "c", (5, 2)))
    assert (meter.completion_tokens, meter.prompt_tokens, meter.finished) == (3, None, False)  # prompt 1 unseen
    meter.feed(choice_chunk(3, "d", (7, 1), finish="length") + choice_chunk(2, "e", (7, 1), finish="length"))
    assert (meter.completion_tokens, meter.prompt_tokens, meter.completion_source) == (5, 12, "usage")
    meter.feed(choice_chunk(0, "f", (5, 3), finish="length"))
    assert not meter.finished  # choice 1 goes on
    meter.feed(choice_chunk(1, "g", (5, 2), finish="length"))
    assert meter.finished and (meter.completion_tokens, meter.prompt_tokens) == (7, 12)
    meter.feed(ev({"id": "c", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7}}) + ev(b"[DONE]"))
    assert (meter.completion_tokens, meter.prompt_tokens, meter.done) == (7, 12, True)  # vLLM's own total


def test_the_whole_requests_usage_outranks_the_choices() -> None:
    meter = StreamMeter(per_prompt=3)
    meter.feed(choice_chunk(0, "a", (4, 1)) + choice_chunk(2, "b", (4, 1)))
    assert (meter.completion_tokens, meter.prompt_tokens) == (2, 4)  # chat: every choice answers the one prompt
    meter.feed(ev({"id": "c", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 9}}))
    assert meter.completion_tokens == 9
    odd = StreamMeter()  # a choice without a usable index counts as the first
    odd.feed(ev({"choices": [{"index": "x", "text": "a"}], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}))
    assert (odd.completion_tokens, odd.prompt_tokens) == (2, 1)


def test_tokenize_bodies_follow_the_endpoint() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"enable_thinking": False},
            "tools": [{"type": "function"}], "max_tokens": 3}
    assert tokenize_bodies("chat", chat) == ([{"model": "m", "messages": chat["messages"], "add_generation_prompt": True,
                                               "chat_template_kwargs": {"enable_thinking": False},
                                               "tools": [{"type": "function"}]}], 0)
    assert tokenize_bodies("completions", {"model": "m", "prompt": "abc"}) == ([{"model": "m", "prompt": "abc"}], 0)
    assert tokenize_bodies("completions", {"model": "m", "prompt": [1, 2, 3]}) == ([], 3)
    assert tokenize_bodies("completions", {"model": "m", "prompt": ["a", [5, 6]]}) == ([{"model": "m", "prompt": "a"}], 2)
    assert tokenize_bodies("embeddings", {"model": "m", "input": "x"}) == ([], 0)
    assert tokenize_count({"count": 7, "tokens": [1]}) == 7 and tokenize_count({"tokens": [1, 2]}) == 2
    assert tokenize_count({"count": "7"}) is None and tokenize_count(None) is None


def test_keys_are_random_stored_as_digests_and_named_plainly() -> None:
    a, b = new_key(), new_key()
    assert a != b and a.startswith("rk-") and len(a) == 46
    assert digest(a) != digest(b) and len(digest(a)) == 64 and a not in digest(a)
    assert bearer_token("Bearer  abc ") == "abc" and bearer_token("bearer abc") == "abc"
    assert bearer_token("Basic abc") is None and bearer_token("Bearer") is None and bearer_token(None) is None
    assert check_name("ana@example.org") == "ana@example.org"
    for bad in ("", "-x", "a b", "x" * 129, "a/b"):
        with pytest.raises(Exception, match="key name"):
            check_name(bad)
