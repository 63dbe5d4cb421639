from __future__ import annotations

import json
import time

import httpx
import pytest

pytestmark = pytest.mark.integration

MESSAGES = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What is the capital of France?"},
]


def _prompt_tokens(reference, messages) -> int:
    from genembed.generation.chat import chat_prompt_ids

    return len(chat_prompt_ids(reference.backbone.tokenizer, messages))


def test_chat_equals_direct_generation(served, openai_client):
    response = openai_client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=12)
    expected = served.reference.generate(MESSAGES, max_new_tokens=12)
    choice = response.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == expected
    assert response.object == "chat.completion" and response.model == served.reference.name
    completion = len(served.reference.backbone.tokenizer(expected, add_special_tokens=False).input_ids)
    assert response.usage.prompt_tokens == _prompt_tokens(served.reference, MESSAGES)
    assert response.usage.completion_tokens == completion
    assert response.usage.total_tokens == response.usage.prompt_tokens + completion


def test_seeded_sampling_is_reproducible(served, openai_client):
    kwargs = {"temperature": 1.5, "top_p": 0.95, "seed": 7}
    first = openai_client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=16, **kwargs)
    again = openai_client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=16, **kwargs)
    expected = served.reference.generate(MESSAGES, max_new_tokens=16, **kwargs)
    assert first.choices[0].message.content == again.choices[0].message.content == expected
    assert expected != served.reference.generate(MESSAGES, max_new_tokens=16)  # sampling, not greedy


def test_decoding_fields_have_the_library_names_and_effects(served, openai_client):
    # OpenAI's penalties as the client sends them, genembed's own as extra body fields: the same
    # names as model.generate's keywords, the same reply
    penalties = {"frequency_penalty": 1.5, "presence_penalty": -0.5}
    extra = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 2}
    response = openai_client.chat.completions.create(
        model="m", messages=MESSAGES, max_tokens=16, **penalties, extra_body=extra
    )
    expected = served.reference.generate(MESSAGES, max_new_tokens=16, **penalties, **extra)
    assert response.choices[0].message.content == expected
    plain = served.reference.generate(MESSAGES, max_new_tokens=16, repetition_penalty=1.0, no_repeat_ngram_size=0)
    assert expected != plain  # the settings changed the reply


def test_streaming_with_the_openai_client(served, openai_client):
    kwargs = {"temperature": 1.0, "seed": 3}
    stream = openai_client.chat.completions.create(
        model="m", messages=MESSAGES, max_tokens=20, stream=True, stream_options={"include_usage": True}, **kwargs
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == served.reference.generate(MESSAGES, max_new_tokens=20, **kwargs)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == _prompt_tokens(served.reference, MESSAGES)
    assert len({c.id for c in chunks}) == 1


def test_stream_is_server_sent_events_ending_in_done(served):
    body = {"messages": MESSAGES, "max_tokens": 6, "stream": True, "temperature": 1.0, "seed": 1}
    with httpx.stream("POST", served.url + "/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    last = events[-1]
    assert last["choices"][0]["finish_reason"] in ("stop", "length")
    usage = last["usage"]  # without include_usage the finishing chunk carries the usage
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    assert text == served.reference.generate(MESSAGES, max_new_tokens=6, temperature=1.0, seed=1)


def test_stop_strings_and_content_parts(served, openai_client):
    full = served.reference.generate("Name three colours.", max_new_tokens=24, temperature=1.0, seed=5)
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    assert stop.strip(), f"pick a visible stop string from {full!r}"
    response = openai_client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": [{"type": "text", "text": "Name three colours."}]}],
        max_tokens=24,
        temperature=1.0,
        seed=5,
        stop=[stop],
    )
    assert response.choices[0].message.content == full[: full.index(stop)]
    assert response.choices[0].finish_reason == "stop"


def test_length_limit_and_finish_reason(served):
    too_many = {"messages": MESSAGES, "max_tokens": served.state.settings.max_new_tokens + 1}
    response = httpx.post(served.url + "/v1/chat/completions", json=too_many)
    assert response.status_code == 413
    assert response.json()["error"]["param"] == "max_tokens"
    ok = httpx.post(served.url + "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 3}, timeout=60)
    body = ok.json()
    assert body["usage"]["completion_tokens"] == 3  # the tiny model never says EOS this early
    assert body["choices"][0]["finish_reason"] == "length"


def test_a_client_leaving_mid_stream_frees_the_server(served):
    body = {"messages": MESSAGES, "max_tokens": served.state.settings.max_new_tokens, "stream": True}
    with httpx.stream("POST", served.url + "/v1/chat/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")  # the stream started; now hang up
    deadline = time.monotonic() + 10
    while served.state.worker.active:
        assert time.monotonic() < deadline, "the abandoned generation still counts as active"
        time.sleep(0.01)
    ok = httpx.post(served.url + "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200
