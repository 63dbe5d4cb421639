"""One command-line vocabulary: every short option means one long option in every command, every long
option has one short form (or none) everywhere and one meaning (:data:`MEANINGS`), flags print as flags
in help, and each old spelling still parses as its new one (or, for an option that did nothing, is
dropped with a note)."""

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
    for name in ("demo", "mine-negatives", "index add", "encode", "index build", "eval", "serve"):
        assert "--center" in _names(COMMANDS[name]), name
    assert "--center" not in _names(COMMANDS["chat"])  # chat does not embed: the option did nothing
    for name in ("encode", "eval", "serve", "teacher-targets", "ask", "chat", "index build", "inspect", "demo"):
        assert "--max-length" in _names(COMMANDS[name]), name  # the most tokens of one prompt
    assert "--max-input-tokens" not in _names(COMMANDS["serve"])
    # every command that runs torch takes --threads; the others do not pretend to
    no_torch = {
        "models",
        "install-teacher",
        "export-checkpoint",
        "index import",
        "index delete",
        "index info",
        "version",
    }
    assert {name for name, command in COMMANDS.items() if "--threads" not in _names(command)} == no_torch
    decoding = ["--max-new-tokens", "--temperature", "--top-p", "--seed", "--repetition-penalty"]
    decoding += ["--no-repeat-ngram-size", "--frequency-penalty", "--presence-penalty", "--stop"]
    for name in ("chat", "ask"):  # the SamplingOptions fields, as the chat route names them
        assert set(decoding) <= set(_names(COMMANDS[name])), name
    assert "--dtype" not in _names(COMMANDS["export-checkpoint"])  # the stored dtype is --save-dtype
    assert "--kv-cache" in _names(COMMANDS["ask"]) and "--cache-file" in _names(COMMANDS["eval"])
    assert not any("--cache" in _names(command) for command in COMMANDS.values())
    for name, command in COMMANDS.items():
        for option in _options(command):
            if "--device" in option.opts:
                assert option.default == "auto", name  # teacher-targets too
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
REQUIRED = {
    "ask": ["IDX", "question"],
    "mine-negatives": ["in.jsonl", "--out", "out.jsonl"],
    "eval": ["tasks"],
    "export-checkpoint": ["RUN", "--out", "OUT"],
}
VALUES = {"--kv-cache": "doc", "--save-dtype": "bfloat16"}  # a value the new option takes (else 7)


@pytest.mark.parametrize(("command", "old"), CASES, ids=[f"{c} {o}" for c, o in CASES])
def test_an_old_spelling_parses_as_its_new_one(command, old, capsys):
    cli = COMMANDS[command]
    new = OLD_SPELLINGS[command][old]
    assert old not in _names(cli)  # not declared: hidden from --help and from the short-option check
    required = REQUIRED.get(command, [])
    defaults = cli.make_context(command, list(required)).params
    if not new:  # an option that had no effect: dropped, with a note
        assert cli.make_context(command, [*required, old]).params == defaults
        assert f"note: {old} has no effect here" in capsys.readouterr().err
        return
    assert new[0] in _names(cli)
    option = next(o for o in _options(cli) if new[0] in (*o.opts, *o.secondary_opts))
    value = [] if len(new) > 1 or option.is_flag else [VALUES.get(new[0], "7")]
    via_old = cli.make_context(command, [*required, old, *value]).params
    assert "is an old spelling of" in capsys.readouterr().err
    via_new = cli.make_context(command, [*required, *new, *value]).params
    assert via_old == via_new
    assert via_old != defaults  # the old spelling did set something


def test_respell_handles_values_joined_to_the_option():
    old = {"--top-k": ("--top",), "-k": ("--top",)}
    assert respell(["--top-k=3", "-k4", "--", "--top-k"], old) == ["--top=3", "--top=4", "--", "--top-k"]
    assert respell(["--steps", "5", "-q"], old) == ["--steps", "5", "-q"]


def test_version_option():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == genembed.__version__


# What each long option means, as a phrase its help says in every command that declares it (lower case).
# None: declared by one command only; an option that a second command declares needs a phrase, so one
# name cannot come to mean two things (the issue found --cache a KV mode in ask and a file in eval).
MEANINGS: dict[str, str | None] = {
    "--adapter": "'none'",
    "--api-key": None,
    "--attention": "causal or bidirectional",
    "--as-published": None,
    "--batch-size": "per forward pass",
    "--benchmark": None,
    "--cache-file": None,
    "--center": "center",
    "--center-cache-size": None,
    "--center-named-only": None,
    "--chunk": None,  # index delete: a chunk id
    "--chunk-size": None,  # teacher-targets: texts per saved chunk of targets
    "--chunk-tokens": None,  # index build: the size of a document's pieces (not a cut: see cli/_spellings.py)
    "--cluster-starts": None,
    "--collection": "milvus collection",
    "--corpus": None,
    "--cors-origin": None,
    "--count": None,
    "--device": "auto (cuda",
    "--doc": None,
    "--doc-instruction": None,
    "--doc-max-length": None,
    "--dtype": "float32",
    "--save-dtype": "stored in",
    "--field": None,
    "--filter": "filter",
    "--force": None,
    "--frequency-penalty": "subtract this",
    "--generator": "weights that generate",
    "--graceful-timeout": None,
    "--host": None,
    "--id-field": None,
    "--index-param": "index",
    "--index-type": "index",
    "--instruction": "instruction",
    "--instructions": None,  # serve: a JSON file of named instructions
    "--json": None,
    "--keep-cache": None,
    "--keep-original": None,
    "--kv-cache": None,
    "--kv-dir": None,
    "--kv-dtype": None,
    "--limit": "at most",
    "--log-level": None,
    "--margin": None,
    "--max-batch-requests": None,
    "--max-batch-tokens": None,
    "--max-centering": None,
    "--max-centering-queue": None,
    "--max-centering-wait": None,
    "--max-inputs": None,
    "--max-length": "tokens per",
    "--max-new-tokens": "tokens per",
    "--max-prompt-tokens": None,
    "--max-queue": None,
    "--max-request-tokens": None,
    "--max-steps": None,
    "--method": "gircse",
    "--model": "hub id",
    "--model-id": None,
    "--no-cache": None,
    "--no-repeat-ngram-size": "n-gram of this size",
    "--normalize": None,
    "--num-negatives": None,
    "--offset": None,
    "--order": None,
    "--out": "write",
    "--overlap": None,
    "--overwrite": "existing",
    "--passage-tokens": None,
    "--port": None,
    "--presence-penalty": "subtract this",
    "--prompt": None,
    "--prompt-format": "plain, chat, gircse, gritlm",
    "--query-instruction": None,
    "--query-max-length": None,
    "--quiet": "no progress bars",
    "--rag": None,
    "--recompute": None,
    "--repetition-penalty": "already in the",
    "--rerank": None,
    "--rerank-scoring": None,
    "--rerank-top": "re-rank",
    "--resume": None,
    "--search-param": "search parameter",
    "--seed": "seed for sampling",
    "--shard-size": "shard",
    "--skip-top": None,
    "--step": None,
    "--steps": "soft tokens k",
    "--stop": "a string that ends the",
    "--store-kv": None,
    "--symmetric": None,
    "--system": None,
    "--task-instructions": None,
    "--targets": None,
    "--tasks": None,
    "--teacher": "a teacher name or a sentence-transformers folder",
    "--teacher-max-length": None,
    "--temperature": "greedy",
    "--text-field": None,
    "--threads": "torch cpu threads",
    "--title-field": None,
    "--token": "milvus credentials",
    "--token-encoding": None,
    "--top": "the n best",
    "--top-p": "nucleus",
    "--wheels": None,
}


def test_no_long_option_has_two_meanings():
    declared = defaultdict(list)  # long option -> [(command, help, is_flag)]
    for name, command in COMMANDS.items():
        for option in _options(command):
            long = next(o for o in option.opts if o.startswith("--"))
            declared[long].append((name, (option.help or "").lower(), option.is_flag))
    assert sorted(set(declared) - set(MEANINGS)) == []  # a new option: say what it means here
    assert sorted(set(MEANINGS) - set(declared)) == []
    for long, uses in declared.items():
        phrase = MEANINGS[long]
        if phrase is None:
            assert len(uses) == 1, f"{long} is declared by {[u[0] for u in uses]}: give it a phrase in MEANINGS"
            continue
        assert {flag for _, _, flag in uses} == {uses[0][2]}, long  # a flag everywhere, or a value everywhere
        wrong = [name for name, help, _ in uses if phrase not in help]
        assert wrong == [], f"{long} does not mean {phrase!r} in {wrong}"


@pytest.mark.parametrize("path", ["", *COMMANDS])
def test_flags_print_as_flags_in_help(path):
    result = runner.invoke(app, [*path.split(), "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output  # typer prints a flag's type as if it took a value
