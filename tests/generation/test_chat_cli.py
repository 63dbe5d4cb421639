from __future__ import annotations

import pytest
from typer.testing import CliRunner

from genembed.cli.app import app

runner = CliRunner()


@pytest.fixture
def saved(chatty, tmp_path):
    chatty.model.config.tie_word_embeddings = False  # keep the untied random head when reloading
    chatty.model.save_pretrained(tmp_path)
    chatty.tokenizer.save_pretrained(tmp_path)
    import genembed

    return str(tmp_path), genembed.load(tmp_path)


def test_one_shot_prompt_prints_the_reply(saved):
    path, model = saved
    result = runner.invoke(app, ["chat", "--model", path, "-p", "What is the capital of France?", "-n", "12"])
    assert result.exit_code == 0, result.output
    expected = model.generate("What is the capital of France?", max_new_tokens=12)
    assert expected and result.stdout == expected + "\n"


def test_conversation_keeps_history_and_reset_clears_it(saved):
    path, model = saved
    result = runner.invoke(
        app, ["chat", "--model", path, "-n", "8"], input="hello\nhow are you?\n/reset\nhow are you?\n"
    )
    assert result.exit_code == 0, result.output
    first = model.generate("hello", max_new_tokens=8)
    second = model.generate(
        [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": first},
            {"role": "user", "content": "how are you?"},
        ],
        max_new_tokens=8,
    )
    fresh = model.generate("how are you?", max_new_tokens=8)
    assert second != fresh  # the history matters, so the check below can fail
    assert result.stdout == f"> {first}\n> {second}\n> > {fresh}\n> \n"
