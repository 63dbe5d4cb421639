"""``genembed make-gen-data INPUT... --out FILE``: the model answers prompts; the answers become
generative training data (``{"prompt", "response"}`` lines) for joint GRIT training.

    genembed make-gen-data ../shared/data/train/*.jsonl --out runs/selfgen.jsonl --limit 2000
    genembed make-gen-data ../shared/data/train/*.jsonl --out runs/heldout.jsonl --offset 2000 --limit 200
    genembed make-gen-data ../shared/data/train/covidqa.jsonl --rag --out runs/selfgen-rag.jsonl --limit 600
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import DeviceOpt, DtypeOpt, ModelOpt, adapter_option, load_model, out_option, top_option
from ._decoding import decoding_option


def make_gen_data(
    inputs: Annotated[list[Path], typer.Argument(help="JSONL files (query / prompt / text field) or .txt files")],
    out: Annotated[Path, out_option("generative JSONL to write")],
    model: ModelOpt = None,
    adapter: Annotated[str | None, adapter_option("none: the raw backbone answers")] = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    field: Annotated[str | None, typer.Option("--field", help="JSON field holding the prompt")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="answer at most this many prompts")] = None,
    offset: Annotated[
        int, typer.Option("--offset", min=0, help="skip this many shuffled prompts first (a held-aside split)")
    ] = 0,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=1, help="tokens per response")] = 128,
    rag: Annotated[
        bool,
        typer.Option("--rag", help="questions (query) with passages (pos, then distractors) in genembed ask's prompt"),
    ] = False,
    top: Annotated[int, top_option("--rag: the n best passages per prompt (genembed ask's --top)")] = 3,
    passage_tokens: Annotated[
        int, typer.Option("--passage-tokens", min=1, help="--rag: each passage cut to this many tokens")
    ] = 160,
    no_repeat_ngram_size: Annotated[
        int,
        typer.Option("--no-repeat-ngram-size", min=0, help="no n-gram of this size twice in a response (0: off)"),
    ] = 0,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="prompts per forward pass (generated together)")
    ] = 8,
    temperature: decoding_option("temperature", what="response") = 0.0,
    top_p: decoding_option("top_p", what="response") = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="seed for sampling and the prompt shuffle")] = 0,
) -> None:
    """Generate responses to prompts with the base model and write generative training data.

    Without ``--adapter`` the raw backbone answers (not the embedding adapter shipped as the default).
    With ``--rag`` each contrastive row's question is answered from its positive and distractor passages
    in the prompt ``genembed ask`` builds (genembed.training.selfgen).
    """
    from genembed.training.data import DataError
    from genembed.training.selfgen import generate_responses, read_prompts, read_rag_items

    loaded = load_model(model, adapter or "none", dtype, device=device) if rag else None
    try:
        if loaded is not None:
            tokenizer = loaded.backbone.tokenizer
            prompts = read_rag_items(inputs, tokenizer, top_k=top, passage_tokens=passage_tokens, seed=seed)
        else:
            prompts = read_prompts(inputs, field=field)
    except DataError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    loaded = loaded or load_model(model, adapter or "none", dtype, device=device)
    path = generate_responses(
        loaded.backbone,
        prompts,
        out,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        limit=limit,
        offset=offset,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )
    rows = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    typer.echo(f"wrote {rows} prompt/response pairs to {path}")
