"""Server settings: limits, batching, authentication, named instructions, CORS and centering, with
defaults that suit a laptop CPU."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..encoders.defaults import DEFAULT_BATCH_SIZE, DEFAULT_MAX_LENGTH
from ..encoders.methods import DEFAULT_MAX_STEPS, DEFAULT_STEPS, METHODS
from ..encoders.prompts import PROMPT_FORMATS
from ..generation.sampling import SamplingOptions

__all__ = ["CENTERING_LIMITS", "LIMITS", "ServeSettings"]

# the limits a request is held to, each a positive int field of ServeSettings (the `serve` options of the
# same names default to None: these fields' defaults)
LIMITS = (
    "max_steps",
    "max_inputs",
    "max_input_tokens",
    "max_request_tokens",
    "max_batch_tokens",
    "max_batch_requests",
    "max_queue",
    "max_new_tokens",
    "max_prompt_tokens",
)

# the centring budget and bound (genembed.serve.centers), shown with the limits in /info
CENTERING_LIMITS = ("max_centering", "max_centering_queue", "max_centering_wait")


@dataclass(frozen=True)
class ServeSettings:
    """What the HTTP server allows and how it batches.

    Requests over a ``max_*`` limit get HTTP 413 (``max_steps`` and ``dimensions`` over the model's
    width get 422: they are bad values, not too much work).
    """

    port: int = 8000  # where `genembed serve` (run_server) listens
    model_id: str | None = None  # name in responses and /v1/models (default: the loaded model's name)
    api_key: str | None = None  # when set, /v1/* needs "Authorization: Bearer <key>"
    method: str | None = None  # embedding method: a name in genembed.encoders.methods.METHODS; None: the model's
    prompt_format: str | None = None  # a name in PROMPT_FORMATS; None: the model's own, else the method's
    default_steps: int = DEFAULT_STEPS  # GIRCSE soft tokens K when a request does not say
    max_steps: int = DEFAULT_MAX_STEPS  # highest `steps` a request may ask for
    max_inputs: int = 256  # texts per embeddings request, documents per rerank request
    max_input_tokens: int = DEFAULT_MAX_LENGTH  # tokens per prompt (text + instruction + template); longer -> 413
    max_request_tokens: int = 32768  # prompt tokens per request, all inputs together
    max_batch_tokens: int = 8192  # micro-batch budget: requests join a batch while their tokens fit
    max_batch_requests: int = 64  # requests per micro-batch; 1 turns micro-batching off
    encode_batch_size: int = DEFAULT_BATCH_SIZE  # texts per forward pass inside a micro-batch
    max_queue: int = 256  # waiting embedding requests (and, separately, chat/rerank requests) before 429
    max_new_tokens: int = 512  # chat: highest max_tokens a request may ask for
    default_max_new_tokens: int = SamplingOptions.max_new_tokens  # chat: max_tokens when a request does not say
    max_prompt_tokens: int = 2048  # chat: tokens of the formatted conversation
    # named instructions (prompt_name / input_type / task -> instruction), over the model's and the
    # defaults in genembed.serve.instructions; e.g. {"query": "Given a question, retrieve answers."}
    instructions: dict[str, str] = field(default_factory=dict)
    # token-array embedding inputs are ids of this tiktoken encoding (e.g. "cl100k_base", what
    # LangChain's OpenAIEmbeddings sends); None: ids of the served model's own tokenizer
    token_encoding: str | None = None
    rerank_scoring: str = "query_likelihood"  # rerank scoring when a request does not say
    cors_origins: tuple[str, ...] = ()  # browser origins allowed to call the API ("*" for any); none by default
    # with a centering model (genembed.encoders.centering): center only the named instructions (stored
    # with the model or computed at start-up); a request's own instruction is then embedded uncentered
    center_named_only: bool = False
    # centers of other instructions kept in memory (LRU); None: the model's center cache keeps its size
    # (genembed.encoders.centering.DEFAULT_CACHE_SIZE unless changed)
    center_cache_size: int | None = None
    # the centring budget (genembed.serve.centers): new instructions centred at once, and how many more
    # wait for their turn before a request with yet another one is answered 429 with Retry-After
    max_centering: int = 1
    max_centering_queue: int = 2
    # seconds a request waits for a new instruction's center at most: a request whose center is expected
    # later under the current load gets 429 with Retry-After at once (the center is computed all the same),
    # one still waiting at this bound gets 429 then (genembed.serve.centers)
    max_centering_wait: float = 15.0

    def __post_init__(self) -> None:
        for name in (*LIMITS, "default_steps", "encode_batch_size", "default_max_new_tokens", "max_centering"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ServeSettings.{name} must be a positive int, got {value!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"ServeSettings.port must be an int in 0..65535, got {self.port!r}")
        for name in ("center_cache_size", "max_centering_queue"):
            value = getattr(self, name)
            if name == "center_cache_size" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"ServeSettings.{name} must be an int >= 0, got {value!r}")
        wait = self.max_centering_wait
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 < wait < float("inf"):
            raise ValueError(f"ServeSettings.max_centering_wait must be a positive number of seconds, got {wait!r}")
        if self.default_steps > self.max_steps:
            raise ValueError(f"default_steps ({self.default_steps}) exceeds max_steps ({self.max_steps})")
        if self.default_max_new_tokens > self.max_new_tokens:
            raise ValueError(
                f"default_max_new_tokens ({self.default_max_new_tokens}) exceeds max_new_tokens ({self.max_new_tokens})"
            )
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api_key must not be empty (use None for no key)")
        from ..generation.rerank import SCORINGS

        if self.method is not None and self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.prompt_format is not None and self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format must be one of {PROMPT_FORMATS}, got {self.prompt_format!r}")
        if self.rerank_scoring not in SCORINGS:
            raise ValueError(f"rerank_scoring must be one of {SCORINGS}, got {self.rerank_scoring!r}")
        for name, instruction in self.instructions.items():
            if not isinstance(name, str) or not name or not isinstance(instruction, str):
                raise ValueError(f"instructions must map names to strings, got {name!r}: {instruction!r}")
        if isinstance(self.cors_origins, str) or not all(isinstance(o, str) and o for o in self.cors_origins):
            raise ValueError(f"cors_origins must be a tuple of origins, got {self.cors_origins!r}")
