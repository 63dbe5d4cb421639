"""One command-line vocabulary: every short option means one long option in every command, every long
option has one short form (or none) everywhere, and each old spelling still parses as its new one."""

from __future__ import annotations

from collections import defaultdict

import pytest
import typer
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner

import genembed
from genembed.cli._spellings import OLD_SPELLINGS, respell
from genembed.cli.app import app

runner = CliRunner()
ROOT = typer.main.get_command(app)


def _commands(group=ROOT, path=()):
    for name, command in group.commands.items():
        if isinstance(command, TyperGroup):
            yield from _commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


COMMANDS = dict(_commands())


def _options(command):
    return [p for p in command.params if isinstance(p, TyperOption)]


def test_the_walk_sees_every_command():
    assert {"encode", "index build", "index add", "ask", "serve", "chat", "eval", "demo", "mine-negatives"} <= set(
        COMMANDS
    )


def test_each_short_option_means_one_long_option_everywhere():
    meanings, shorts = defaultdict(set), defaultdict(set)
    for name, command in COMMANDS.items():
        for option in _options(command):
            long = next(o for o in option.opts if o.startswith("--"))
            short = [o for o in option.opts if not o.startswith("--")]
            for s in short:
                meanings[s].add(long)
            shorts[long].add(tuple(short))
            assert len(short) <= 1, (name, option.opts)
    assert {s: sorted(m) for s, m in meanings.items() if len(m) > 1} == {}
    assert {long: s for long, s in shorts.items() if len(s) > 1} == {}
    # the concepts the issue found spelled several ways
    assert meanings["-k"] == {"--steps"} and meanings["-p"] == {"--port"} and "-n" not in meanings
    assert not {"--top-k", "--candidates", "--depth"} & {o for c in COMMANDS.values() for o in _names(c)}


def _names(command):
    return [o for option in _options(command) for o in (*option.opts, *option.secondary_opts)]


def test_one_name_per_concept_across_commands():
    for name in ("demo", "ask", "inspect", "mine-negatives"):
        assert "--top" in _names(COMMANDS[name]), name  # how many results
    for name in ("eval", "ask"):
        assert "--rerank-top" in _names(COMMANDS[name]), name
    for name in ("demo", "chat", "mine-negatives", "index add", "encode", "index build", "eval", "serve"):
        assert "--center" in _names(COMMANDS[name]), name
    for name in ("serve", "chat"):
        assert "--generator" in _names(COMMANDS[name]) and "--generation-adapter" not in _names(COMMANDS[name])
    adapter = next(o for o in _options(COMMANDS["make-gen-data"]) if "--adapter" in o.opts)
    assert "(default: none" in adapter.help  # the default the command really uses


def test_embedding_options_default_to_the_models_own():
    for name, command in COMMANDS.items():
        for option in _options(command):
            if {"--method", "--steps", "--attention"} & set(option.opts):
                assert option.default is None, (name, option.opts)


CASES = [(command, old) for command, table in OLD_SPELLINGS.items() for old in table]
REQUIRED = {"ask": ["IDX", "question"], "mine-negatives": ["in.jsonl", "--out", "out.jsonl"], "eval": ["tasks"]}


@pytest.mark.parametrize(("command", "old"), CASES, ids=[f"{c} {o}" for c, o in CASES])
def test_an_old_spelling_parses_as_its_new_one(command, old, capsys):
    cli = COMMANDS[command]
    new = OLD_SPELLINGS[command][old]
    assert old not in _names(cli)  # not declared: hidden from --help and from the short-option check
    assert new[0] in _names(cli)
    value = [] if len(new) > 1 else ["7"]
    required = REQUIRED.get(command, [])
    via_old = cli.make_context(command, [*required, old, *value]).params
    assert "is an old spelling of" in capsys.readouterr().err
    via_new = cli.make_context(command, [*required, *new, *value]).params
    assert via_old == via_new
    defaults = cli.make_context(command, list(required)).params
    assert via_old != defaults  # the old spelling did set something


def test_respell_handles_values_joined_to_the_option():
    old = {"--top-k": ("--top",), "-k": ("--top",)}
    assert respell(["--top-k=3", "-k4", "--", "--top-k"], old) == ["--top=3", "--top=4", "--", "--top-k"]
    assert respell(["--steps", "5", "-q"], old) == ["--steps", "5", "-q"]


def test_version_option():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == genembed.__version__
