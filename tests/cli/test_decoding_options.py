"""The decoding options: declared once (cli/_decoding.py), each one a SamplingOptions field with dashes."""

from __future__ import annotations

import dataclasses

import typer
from typer.testing import CliRunner

from genembed.cli._decoding import decoding_options
from genembed.generation.sampling import ANSWER_SAMPLING, SamplingOptions

runner = CliRunner()


def _app(base=None):
    seen = {}
    app = typer.Typer()

    @app.command()
    @decoding_options(base, what="answer")
    def command(name: str = "x", sampling: SamplingOptions | None = None) -> None:
        seen["name"], seen["sampling"] = name, sampling

    return app, seen


def test_every_field_is_an_option_and_reaches_the_command():
    app, seen = _app()
    knobs = {
        "max_new_tokens": 7,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 3,
        "repetition_penalty": 1.4,
        "no_repeat_ngram_size": 2,
        "frequency_penalty": 0.25,
        "presence_penalty": -0.5,
    }
    assert set(knobs) | {"stop"} == {f.name for f in dataclasses.fields(SamplingOptions)}
    args = [a for name, value in knobs.items() for a in ("--" + name.replace("_", "-"), str(value))]
    result = runner.invoke(app, ["--name", "y", *args, "--stop", "END", "--stop", "\n\n"])
    assert result.exit_code == 0, result.output
    assert seen == {"name": "y", "sampling": SamplingOptions(**knobs, stop=("END", "\n\n"))}


def test_unset_options_keep_the_commands_defaults():
    app, seen = _app(ANSWER_SAMPLING)
    assert runner.invoke(app, []).exit_code == 0
    assert seen["sampling"] == ANSWER_SAMPLING
    assert runner.invoke(app, ["--temperature", "0.3"]).exit_code == 0
    assert seen["sampling"] == dataclasses.replace(ANSWER_SAMPLING, temperature=0.3)


def test_out_of_range_values_are_usage_errors():
    app, _ = _app()
    for option, value in (("--frequency-penalty", "2.5"), ("--top-p", "1.5"), ("--repetition-penalty", "0")):
        result = runner.invoke(app, [option, value])
        assert result.exit_code == 2 and option in result.output, (option, result.output)
