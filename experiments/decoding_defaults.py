"""Which decoding defaults keep the default model's greedy replies from looping (issue 62)?

Greedy decoding with no penalty repeats a sentence to the token limit on everyday prompts. This runs the
default model (``genembed.load()``: SmolLM2-135M and the shipped adapter, which generates) greedily over
a held-aside set of prompts with each candidate setting of the repetition knobs of
:class:`~genembed.generation.sampling.SamplingOptions`, and reports per setting:

- ``loop_rate``: the share of replies that repeat a word 4-gram more than twice
  (:func:`genembed.generation.repetition.loops`);
- ``at_limit``: the share cut by ``max_new_tokens`` rather than ended by the model;
- ``facts``: how many factual prompts name the expected answer (a quality sanity check: a penalty so
  strong that it bans the words an answer needs shows here);
- mean reply length in words.

The defaults are chosen on the held-aside set; the five everyday prompts the test suite guards
(``tests/generation/test_repetition_real.py``) are reported apart, for the settings given with
``--everyday``, and were not used to choose. Run (one thread, under the shared lock; about 15 minutes):

    flock /tmp/genembed-cpu.lock .venv/bin/python experiments/decoding_defaults.py \\
        --out experiments/results/decoding_defaults

Writes ``OUT.json`` (every reply) and ``OUT.md`` (the table).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import _benchmarks  # noqa: F401  (puts benchmarks/ on the import path)
import torch
from _run_info import REPO, git_commit

from genembed.generation.repetition import EVERYDAY_PROMPTS

# (prompt, a word a right answer names, or None for open-ended prompts)
HELD_ASIDE: list[tuple[str, str | None]] = [
    ("What is the largest planet in the solar system?", "jupiter"),
    ("Who wrote Romeo and Juliet?", "shakespeare"),
    ("What is the boiling point of water in Celsius?", "100"),
    ("What is the chemical symbol for gold?", "au"),
    ("Which ocean is the largest?", "pacific"),
    ("Why is the sky blue?", None),
    ("Write a short poem about autumn.", None),
    ("How can I improve my sleep?", None),
    ("What are the benefits of reading books?", None),
    ("Give me a simple recipe for pancakes.", None),
    ("Suggest three names for a coffee shop.", None),
    ("What should I pack for a beach trip?", None),
    ("Describe a cat in two sentences.", None),
    ("Write a thank-you note to a friend.", None),
    ("What is the difference between weather and climate?", None),
    ("Give me two tips for learning a new language.", None),
]
EVERYDAY = list(EVERYDAY_PROMPTS)
# name -> the repetition knobs (everything else: greedy, max_new_tokens as given)
SETTINGS: dict[str, dict[str, float | int]] = {
    "off": {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0},
    "rp1.1": {"repetition_penalty": 1.1, "no_repeat_ngram_size": 0},
    "rp1.2": {"repetition_penalty": 1.2, "no_repeat_ngram_size": 0},
    "rp1.3": {"repetition_penalty": 1.3, "no_repeat_ngram_size": 0},
    "ngram3": {"repetition_penalty": 1.0, "no_repeat_ngram_size": 3},
    "ngram4": {"repetition_penalty": 1.0, "no_repeat_ngram_size": 4},
    "rp1.1+ngram4": {"repetition_penalty": 1.1, "no_repeat_ngram_size": 4},
    "rp1.2+ngram4": {"repetition_penalty": 1.2, "no_repeat_ngram_size": 4},
    "freq0.5": {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "frequency_penalty": 0.5},
    "freq1.0": {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "frequency_penalty": 1.0},
}


def run_setting(model, prompts: list[str], knobs: dict, max_new_tokens: int) -> list[dict]:
    """Greedy replies to ``prompts`` with ``knobs``, each with its token count and whether it loops."""
    from genembed.generation.repetition import most_repeated_ngram

    tokenizer = model.backbone.tokenizer
    rows = []
    for prompt in prompts:
        reply = model.generate(prompt, max_new_tokens=max_new_tokens, temperature=0.0, **knobs)
        tokens = len(tokenizer(reply, add_special_tokens=False)["input_ids"])
        gram, count = most_repeated_ngram(reply)
        rows.append({"prompt": prompt, "reply": reply, "tokens": tokens, "top_4gram": " ".join(gram), "count": count})
    return rows


def summarize(rows: list[dict], expected: dict[str, str | None], max_new_tokens: int) -> dict:
    from genembed.generation.repetition import loop_rate

    factual = [r for r in rows if expected.get(r["prompt"])]
    return {
        "loop_rate": round(loop_rate(r["reply"] for r in rows), 3),
        "at_limit": round(sum(r["tokens"] >= max_new_tokens - 1 for r in rows) / len(rows), 3),
        "facts": f"{sum(expected[r['prompt']] in r['reply'].lower() for r in factual)}/{len(factual)}",
        "mean_words": round(sum(len(r["reply"].split()) for r in rows) / len(rows), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--everyday", nargs="*", default=["off", "rp1.2+ngram4"], choices=list(SETTINGS))
    parser.add_argument("--max-new-tokens", type=int, default=256, help="the library default")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--resume", action="store_true", help="keep the settings OUT.json already holds")
    parser.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "decoding_defaults")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import genembed

    model = genembed.load()
    expected = {**dict(HELD_ASIDE), EVERYDAY[0]: "paris"}
    prompts = [p for p, _ in HELD_ASIDE]
    result: dict = {
        "command": "python experiments/decoding_defaults.py --settings "
        + " ".join(args.settings)
        + " --everyday "
        + " ".join(args.everyday),
        "git_commit": git_commit(),
        "model": model.name,
        "generation_weights": model.generation_weights,
        "max_new_tokens": args.max_new_tokens,
        "held_aside": {},
        "everyday": {},
    }
    json_path = args.out.with_suffix(".json")
    if args.resume and json_path.exists():  # keep the settings an earlier run measured
        earlier = json.loads(json_path.read_text())
        result["held_aside"], result["everyday"] = earlier["held_aside"], earlier["everyday"]
        result["command"] = earlier["command"] + "; then " + result["command"] + " --resume"
    # the first setting's everyday replies right after its held-aside ones: a run cut short keeps them
    jobs = [("held_aside", n) for n in args.settings[:1]] + [("everyday", n) for n in args.everyday]
    jobs += [("held_aside", n) for n in args.settings[1:]]
    for group, name in jobs:
        if name in result[group]:
            continue
        group_prompts = prompts if group == "held_aside" else EVERYDAY
        start = time.perf_counter()
        rows = run_setting(model, group_prompts, SETTINGS[name], args.max_new_tokens)
        summary = summarize(rows, expected, args.max_new_tokens)
        summary["seconds"] = round(time.perf_counter() - start, 1)
        result[group][name] = {"knobs": SETTINGS[name], **summary, "replies": rows}
        print(f"{group} {name}: {summary}", flush=True)
        write(result, args.out)  # after each setting, so a long run keeps what it measured
    print(table(result))


def write(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    out.with_suffix(".md").write_text(table(result) + "\n")


def table(result: dict) -> str:
    """The markdown table of ``result``: one row per setting and prompt set."""
    lines = [
        "| prompts | setting | loop rate | at token limit | factual right | mean words |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for group, label in (("held_aside", "held-aside (16)"), ("everyday", "everyday (5)")):
        for name, row in result[group].items():
            lines.append(
                f"| {label} | {name} | {row['loop_rate']:.2f} | {row['at_limit']:.2f} | {row['facts']} | "
                f"{row['mean_words']} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
