"""``genembed chat``: a terminal conversation with the embedding model's own weights, streamed.

Each turn re-renders the whole conversation with the chat template. ``/reset`` clears it, ``/exit``
or Ctrl-D ends the session. ``--prompt`` answers one message and exits (for scripts).
"""

from __future__ import annotations

import warnings
from typing import Annotated

import typer

from genembed.generation.sampling import SamplingOptions

from ._common import AdapterOpt, DeviceOpt, DtypeOpt, GeneratorOpt, ModelOpt, load_model, say_generation_weights
from ._decoding import decoding_options

_HELP = "Type a message; /reset clears the conversation, /exit (or Ctrl-D) quits."


@decoding_options(what="reply")
def chat(
    prompt: Annotated[str | None, typer.Option("--prompt", help="answer this one message and exit")] = None,
    system: Annotated[
        str | None, typer.Option("--system", "-s", help="system message opening the conversation")
    ] = None,
    max_length: Annotated[
        int | None,
        typer.Option(
            "--max-length",
            min=1,
            help="tokens per prompt: a turn whose conversation is longer is refused (/reset starts over; "
            "default: the model's context)",
        ),
    ] = None,
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    generator: GeneratorOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    sampling: SamplingOptions | None = None,
) -> None:
    """Chat with the model in the terminal (replies stream as they are generated)."""
    from genembed.generation.adapters import BaseWeightsWarning

    loaded = load_model(model, adapter, dtype, device=device, generator=generator)
    say_generation_weights(loaded)
    messages: list[dict] = [{"role": "system", "content": system}] if system else []

    def reply(text: str) -> None:
        messages.append({"role": "user", "content": text})
        if max_length is not None:
            from genembed.generation.chat import chat_prompt_ids

            n = len(chat_prompt_ids(loaded.backbone.tokenizer, messages, loaded.prompt_format))
            if n > max_length:
                messages.pop()
                typer.secho(
                    f"error: the conversation is {n} tokens long, over --max-length {max_length}; "
                    "/reset starts a new one",
                    fg="red",
                    err=True,
                )
                if prompt is not None:
                    raise typer.Exit(2)
                return
        pieces = []
        with warnings.catch_warnings():  # the note on the weights was said once above
            warnings.simplefilter("ignore", BaseWeightsWarning)
            stream = loaded.generate(messages, stream=True, sampling=sampling)
        for piece in stream:
            pieces.append(piece)
            typer.echo(piece, nl=False)
        typer.echo()
        messages.append({"role": "assistant", "content": "".join(pieces)})

    if prompt is not None:
        reply(prompt)
        return
    typer.secho(f"{loaded.name}. {_HELP}", dim=True, err=True)
    while True:
        try:
            text = input("> ").strip()
        except (EOFError, KeyboardInterrupt):
            typer.echo()
            return
        if text in ("/exit", "/quit"):
            return
        if text == "/reset":
            del messages[1 if system else 0 :]
            typer.secho("(conversation cleared)", dim=True, err=True)
            continue
        if text:
            try:
                reply(text)
            except KeyboardInterrupt:  # stop this reply, keep the session
                typer.echo()
                messages.pop()
