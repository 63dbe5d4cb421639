"""The encoding defaults that belong to no method: prompt length, batch size and token budget, each
declared here once and read from here (through :mod:`genembed.encoders.settings`, which re-exports them)
by the library, the CLI, evaluation and the server. The defaults of the methods themselves (method,
steps, tau, max_steps) are declared with the methods, in :mod:`genembed.encoders.methods`; ``stop_tol``'s
with its field, :class:`genembed.encoders.settings.EmbedSettings`.

They live in a module of their own, below every encoder module, because the prompt builder
(:mod:`genembed.encoders.prompts`) needs the length too and the settings module imports it.
"""

from __future__ import annotations

__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_BATCH_TOKENS", "DEFAULT_MAX_LENGTH"]

# tokens per prompt (instruction and template included) before a text is cut from its end; also the
# tokens of a document the rerankers keep and the server's longest prompt
DEFAULT_MAX_LENGTH = 512
# texts per forward pass when encoding (changes no embedding; sentence-transformers' default too)
DEFAULT_BATCH_SIZE = 32
# short texts fill a batch beyond the batch size while their padded tokens fit this budget
# (``EmbedSettings.batch_tokens``, :func:`genembed.encoders.batching.length_sorted_batches`). Off by default:
# on the 2-core EPYC here 256 stsb-dev sentences ran at -8 % (K=1) to +5 % (K=5) texts/s with a 2,048-token
# budget against 32 texts per batch (docs/performance.md)
DEFAULT_BATCH_TOKENS = 0
