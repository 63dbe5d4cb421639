"""Named instructions (sentence-transformers' ``prompts``) and which instruction an encode call uses.

A model carries ``prompts: dict[str, str | None]``, starting as :data:`NAMED_INSTRUCTIONS`. In genembed a
prompt is an *instruction*: it goes where ``instruction=`` goes, inside the prompt format
(:mod:`genembed.encoders.prompts`), not glued in front of the text. ``""`` means no instruction;
``None`` (a published checkpoint's classification and clustering) means the task needs the caller's own
instruction ("Classify the emotion of the text"), and without one the text is embedded with none.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "DEFAULT_QUERY_INSTRUCTION",
    "DEFAULT_RERANK_INSTRUCTION",
    "NAMED_INSTRUCTIONS",
    "check_prompts",
    "default_prompts",
    "resolve_instruction",
]

# The default instructions, written here only. Queries: what the shipped adapter was trained with, and
# query-likelihood reranking's task description; yes/no reranking: its question's preamble.
DEFAULT_QUERY_INSTRUCTION = "Given a query, retrieve relevant passages."
DEFAULT_RERANK_INSTRUCTION = "Judge whether the document is relevant to the query."


# The one table of named instructions: the prompts a model starts with (encode(prompt_name=...),
# encode_query/encode_document), the names a server answers (prompt_name, Cohere's input_type, Jina's task;
# genembed.serve.instructions) and the instructions whose centers ship beside the bundled adapters
# (experiments/make_centers.py computed centers.safetensors for exactly these). Change one and run
# `make centers`.
NAMED_INSTRUCTIONS: dict[str, str] = {
    "query": DEFAULT_QUERY_INSTRUCTION,
    "document": "",
    "classification": "Classify the given text.",
    "clustering": "Identify the main topic of the given text.",
    "text-matching": "Retrieve semantically similar text.",
}


def default_prompts() -> dict[str, str | None]:
    """The named instructions a model starts with: a copy of :data:`NAMED_INSTRUCTIONS` (the query
    instruction the shipped adapter was trained with, documents as they are, and general instructions for
    classification, clustering and text matching)."""
    return dict(NAMED_INSTRUCTIONS)


def check_prompts(prompts: Mapping[str, str | None]) -> dict[str, str | None]:
    """A copy of ``prompts`` after checking names are strings and values strings or None."""
    if not isinstance(prompts, Mapping):
        raise TypeError(f"prompts must be a dict of name -> instruction, got {type(prompts).__name__}")
    for name, value in prompts.items():
        if not isinstance(name, str) or not (value is None or isinstance(value, str)):
            raise TypeError(f"prompts[{name!r}] must map a string to a string or None, got {value!r}")
    return dict(prompts)


def resolve_instruction(
    prompts: Mapping[str, str | None],
    *,
    prompt: str | None = None,
    prompt_name: str | None = None,
    default_prompt_name: str | None = None,
) -> str:
    """The instruction one encode call uses.

    As in sentence-transformers, an explicit ``prompt`` (genembed's ``instruction``) wins over
    ``prompt_name``, and ``default_prompt_name`` applies only when neither is given.

    Raises:
        ValueError: ``prompt_name`` is not in ``prompts`` (the message lists the known names).
    """
    if prompt_name is not None and prompt_name not in prompts:
        raise ValueError(f"unknown prompt_name {prompt_name!r}; this model's prompts are {sorted(prompts)}")
    if prompt is not None:
        return prompt
    name = prompt_name if prompt_name is not None else default_prompt_name
    return (prompts.get(name) or "") if name is not None else ""
