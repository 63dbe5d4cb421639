"""Every encoding default, declared here once: the method and its steps, tau and the adaptive stop, prompt
length, batch size and token budget. The library, the CLI, evaluation, training and the server read
them from here (or through :mod:`genembed.encoders.methods` and :mod:`genembed.encoders.settings`, which
re-export the ones they use, for the code that imported them there).

They live in a module of their own, below every encoder module (it imports nothing), because the method
table (:mod:`genembed.encoders.methods`), the prompt builder (:mod:`genembed.encoders.prompts`) and the
settings (:mod:`genembed.encoders.settings`) all need them.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_BATCH_TOKENS",
    "DEFAULT_MAX_LENGTH",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_METHOD",
    "DEFAULT_STEPS",
    "DEFAULT_STOP_TOL",
    "DEFAULT_TAU",
]

# the embedding method (a name in genembed.encoders.methods.METHODS): gircse, what the shipped adapter
# was trained for
DEFAULT_METHOD = "gircse"
# soft tokens K when none are asked for (what the shipped adapter was trained with)
DEFAULT_STEPS = 5
# soft-token softmax temperature (GIRCSE's)
DEFAULT_TAU = 1.0
# adaptive steps (``steps="auto"``) stop at this K; the server's highest K
DEFAULT_MAX_STEPS = 20
# adaptive steps stop a text when cos(z_k, z_{k-1}) > this (docs/experiments.md)
DEFAULT_STOP_TOL = 0.999
# tokens per prompt (instruction and template included) before a text is cut from its end; also the
# tokens of a document the rerankers keep and the server's longest prompt
DEFAULT_MAX_LENGTH = 512
# texts per forward pass when encoding (changes no embedding; sentence-transformers' default too)
DEFAULT_BATCH_SIZE = 32
# short texts fill a batch beyond the batch size while their padded tokens fit this budget
# (``RunOptions.batch_tokens``, :func:`genembed.encoders.batching.length_sorted_batches`). Off by default:
# on the 2-core EPYC here 256 stsb-dev sentences ran at -8 % (K=1) to +5 % (K=5) texts/s with a 2,048-token
# budget against 32 texts per batch (docs/performance.md)
DEFAULT_BATCH_TOKENS = 0
