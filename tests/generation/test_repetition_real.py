"""The default model's greedy replies at the default decoding settings do not loop (issue 62), through
``model.generate``, ``genembed chat`` and ``/v1/chat/completions`` alike.

Before the defaults guarded against repetition, the first three prompts repeated a sentence to the token
limit. The replies are cut at 128 new tokens here (the default is 256) to keep the test short: a loop
shows within 128 tokens (the old replies repeated a sentence of 10 to 25 tokens), and every path gets
the same limit so their replies can be compared. experiments/decoding_defaults.py measures the defaults
at 256 tokens on these prompts and on a held-aside set (docs/experiments.md).
"""

from __future__ import annotations

import pytest

from genembed.generation.repetition import EVERYDAY_PROMPTS, most_repeated_ngram

pytestmark = pytest.mark.slow

EVERYDAY = list(EVERYDAY_PROMPTS)
NEW_TOKENS = 128


@pytest.fixture(scope="module")
def replies(default_model) -> list[str]:
    return [default_model.generate(prompt, max_new_tokens=NEW_TOKENS) for prompt in EVERYDAY]


def _no_loops(texts: list[str]) -> None:
    repeats = {prompt: most_repeated_ngram(text) for prompt, text in zip(EVERYDAY, texts, strict=True)}
    assert {p: r for p, r in repeats.items() if r[1] > 2} == {}  # no 4-gram more than twice


def test_generate_does_not_loop_at_the_defaults(default_model, replies):
    _no_loops(replies)
    assert all(text.strip() for text in replies)
    assert "Paris" in replies[0]  # the penalties leave the answer a question needs
    # the same prompts with the penalties off loop, so this test can fail
    off = default_model.generate(EVERYDAY[0], max_new_tokens=NEW_TOKENS, repetition_penalty=1.0, no_repeat_ngram_size=0)
    assert most_repeated_ngram(off)[1] > 2


def test_the_chat_route_and_the_cli_reply_the_same(default_model, replies):
    import openai
    from typer.testing import CliRunner

    from genembed.cli.app import app
    from genembed.serve import create_app, running_server

    with running_server(create_app(default_model)) as (url, _):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
        served = [
            client.chat.completions.create(
                model="genembed", messages=[{"role": "user", "content": p}], max_tokens=NEW_TOKENS
            )
            .choices[0]
            .message.content
            for p in EVERYDAY
        ]
    assert served == replies
    runner = CliRunner()
    for prompt, expected in zip(EVERYDAY, replies, strict=True):
        result = runner.invoke(app, ["chat", "--prompt", prompt, "--max-new-tokens", str(NEW_TOKENS)])
        assert result.exit_code == 0, result.output
        assert result.stdout == expected + "\n"
    _no_loops(served)
