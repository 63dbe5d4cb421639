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
    result = runner.invoke(
        app, ["chat", "--model", path, "--prompt", "What is the capital of France?", "--max-new-tokens", "12"]
    )
    assert result.exit_code == 0, result.output
    expected = model.generate("What is the capital of France?", max_new_tokens=12)
    assert expected and result.stdout == expected + "\n"


def test_conversation_keeps_history_and_reset_clears_it(saved):
    path, model = saved
    # penalties off: the tiny random model's replies then depend on the history (checked below)
    plain = {"max_new_tokens": 8, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0}
    options = ["--max-new-tokens", "8", "--repetition-penalty", "1", "--no-repeat-ngram-size", "0"]
    result = runner.invoke(
        app, ["chat", "--model", path, *options], input="hello\nhow are you?\n/reset\nhow are you?\n"
    )
    assert result.exit_code == 0, result.output
    first = model.generate("hello", **plain)
    second = model.generate(
        [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": first},
            {"role": "user", "content": "how are you?"},
        ],
        **plain,
    )
    fresh = model.generate("how are you?", **plain)
    assert second != fresh  # the history matters, so the check below can fail
    assert result.stdout == f"> {first}\n> {second}\n> > {fresh}\n> \n"


def test_generator_option_chats_with_a_generation_adapter(saved, tmp_path):
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    import genembed

    path, model = saved
    torch.manual_seed(3)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "up_proj"], init_lora_weights=False)
    get_peft_model(copy.deepcopy(model.backbone.model), config).save_pretrained(tmp_path / "gen")
    prompt = ["chat", "--model", path, "--prompt", "What is the capital of France?", "--max-new-tokens", "12"]
    result = runner.invoke(app, [*prompt, "--generator", str(tmp_path / "gen")])
    assert result.exit_code == 0, result.output
    expected = genembed.load(path, generation_adapter=tmp_path / "gen").generate(
        "What is the capital of France?", max_new_tokens=12
    )
    assert expected != model.generate("What is the capital of France?", max_new_tokens=12)
    assert result.stdout == expected + "\n"
    result = runner.invoke(app, [*prompt, "--generator", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "generation adapter folder" in result.output


def test_chat_names_the_weights_that_generate_and_notes_the_raw_backbone(saved, tmp_path):
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    path, model = saved
    prompt = ["chat", "--model", path, "--prompt", "Hi", "--max-new-tokens", "2"]
    plain = runner.invoke(app, prompt)
    assert plain.exit_code == 0, plain.output
    assert f"generating with {model.backbone.name} (base weights)" in plain.stderr and "note:" not in plain.stderr
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj"], init_lora_weights=False)
    get_peft_model(copy.deepcopy(model.backbone.model), config).save_pretrained(tmp_path / "emb")
    adapted = runner.invoke(app, [*prompt, "--adapter", str(tmp_path / "emb")])
    assert adapted.exit_code == 0, adapted.output
    lines = adapted.stderr.splitlines()
    assert sum("note: replies come from the raw backbone weights" in line for line in lines) == 1  # said once
    assert "--generator FOLDER" in adapted.stderr
    joint = runner.invoke(app, [*prompt, "--adapter", str(tmp_path / "emb"), "--generator", "adapter"])
    assert joint.exit_code == 0, joint.output
    assert "+ adapter" in joint.stderr and "note:" not in joint.stderr


def test_every_decoding_option_reaches_the_reply(saved):
    path, model = saved
    knobs = {
        "max_new_tokens": 10,
        "temperature": 1.0,
        "top_p": 0.9,
        "seed": 4,
        "repetition_penalty": 1.5,
        "no_repeat_ngram_size": 2,
        "frequency_penalty": 2.0,
        "presence_penalty": 1.0,
    }
    options = [a for name, value in knobs.items() for a in ("--" + name.replace("_", "-"), str(value))]
    result = runner.invoke(app, ["chat", "--model", path, "--prompt", "Hello there", *options])
    assert result.exit_code == 0, result.output
    expected = model.generate("Hello there", **knobs)
    assert result.stdout == expected + "\n"
    bad = runner.invoke(app, ["chat", "--model", path, "--prompt", "Hi", "--frequency-penalty", "3"])
    assert bad.exit_code == 2 and "--frequency-penalty" in bad.output


def test_help_shows_the_decoding_defaults():
    from genembed.generation.sampling import ANSWER_SAMPLING, SamplingOptions

    for command, defaults in (("chat", SamplingOptions()), ("ask", ANSWER_SAMPLING)):
        text = " ".join(runner.invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output.split())
        assert f"(default: {defaults.max_new_tokens})" in text, command
        for name in ("--max-new-tokens", "--top-p", "--repetition-penalty", "--no-repeat-ngram-size", "--stop"):
            assert name in text, (command, name)
        assert f"(0: off) (default: {defaults.no_repeat_ngram_size})" in text


def test_max_length_refuses_a_conversation_too_long(saved):
    path, model = saved
    from genembed.generation.chat import chat_prompt_ids

    n = len(chat_prompt_ids(model.backbone.tokenizer, "What is the capital of France?"))
    prompt = ["chat", "--model", path, "--prompt", "What is the capital of France?", "--max-new-tokens", "4"]
    result = runner.invoke(app, [*prompt, "--max-length", str(n - 1)])
    assert result.exit_code == 2
    assert f"the conversation is {n} tokens long, over --max-length {n - 1}" in result.output
    assert runner.invoke(app, [*prompt, "--max-length", str(n)]).exit_code == 0
