"""Request and response bodies in the shapes existing clients speak: OpenAI (embeddings, chat, models),
Cohere (embed, rerank) and Jina (rerank). Unknown request fields are ignored, as OpenAI's own server
does for most.

Request bodies are validated strictly, as the OpenAPI document states them: ``0`` is not a boolean
and ``"3"`` or ``3.0`` is not an integer."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, WrapValidator

from ..generation.sampling import SamplingOptions

__all__ = [
    "BilledUnits",
    "CohereEmbedByTypeResponse",
    "CohereEmbedFloatsResponse",
    "CohereEmbedMeta",
    "CohereEmbedRequest",
    "CohereEmbeddings",
    "ChatChoice",
    "ChatChunk",
    "ChatChunkChoice",
    "ChatCompletion",
    "ChatMessage",
    "ChatRequest",
    "ChatUsage",
    "DECODING_FIELDS",
    "Delta",
    "EmbeddingData",
    "EmbeddingRequest",
    "EmbeddingResponse",
    "EmbeddingUsage",
    "ErrorDetail",
    "ErrorResponse",
    "Health",
    "Info",
    "InspectRequest",
    "InspectResponse",
    "ModelCard",
    "ModelList",
    "RerankDocument",
    "RerankMeta",
    "RerankRequest",
    "RerankResponse",
    "RerankResult",
    "RerankUsage",
    "SoftTokenStepOut",
    "TextPart",
    "TokenProb",
    "TokenizeData",
    "TokenizeRequest",
    "TokenizeResponse",
    "V2CohereEmbedRequest",
    "V2RerankRequest",
    "V2RerankResponse",
]


def _utf8(text: str) -> str:
    # JSON may carry lone surrogates ("\ud800"); tokenizers cannot take them, so refuse them here.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text is not valid Unicode (lone surrogate at position {exc.start})") from exc
    return text


def _non_empty(message: str) -> AfterValidator:
    """A validator refusing an empty string with ``message``."""

    def check(text: str) -> str:
        if not text:
            raise ValueError(message)
        return text

    return AfterValidator(check)


Text = Annotated[str, AfterValidator(_utf8)]
# an empty input, alone or in a list, is a mistake (nothing to embed): refused as OpenAI does, naming its index
InputText = Annotated[Text, _non_empty("an empty input has nothing to embed; send at least one character")]
StopText = Annotated[Text, _non_empty("a stop string must have at least one character")]


def _steps(value: Any, handler: Any) -> Any:
    # the union's own errors ("Input should be 'auto'") would not say that integers are taken too
    try:
        return handler(value)
    except ValidationError:
        raise ValueError(f"steps must be an integer >= 1 or 'auto', got {value!r}") from None


Steps = Annotated[Annotated[int, Field(ge=1)] | Literal["auto"] | None, WrapValidator(_steps)]
ModelName = Annotated[str | None, Field(description="Accepted and ignored: the server serves one model.")]
TokenId = Annotated[int, Field(ge=0)]
TokenIds = Annotated[list[TokenId], Field(min_length=1)]


class _Request(BaseModel):
    model_config = ConfigDict(strict=True)


# ---- errors (OpenAI shape, every status) ----


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    error: ErrorDetail


# ---- embeddings (OpenAI) ----

_SIDE = (
    "genembed: set at most one of instruction, prompt_name, input_type and task; the last three name an "
    "instruction the server carries (GET /info lists them)."
)


InputType = Literal["search_query", "search_document", "classification", "clustering"]
_INPUT_TYPE = (
    "Cohere: `search_query` embeds with the `query` instruction, `search_document` with the `document` one "
    "(none by default), `classification` and `clustering` with theirs (GET /info lists them)."
)


class EmbeddingRequest(_Request):
    input: (
        InputText
        | Annotated[list[InputText], Field(min_length=1)]
        | TokenIds
        | Annotated[list[TokenIds], Field(min_length=1)]
    ) = Field(
        description="One text, a list of texts, or token ids (one list, or a list of lists) of the served "
        "model's tokenizer (or of the server's --token-encoding); each gives one embedding, in order."
    )
    model: ModelName = None
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="`base64`: each embedding as little-endian float32 bytes, base64-encoded."
    )
    dimensions: int | None = Field(None, ge=1, description="Keep the first n dimensions and renormalize.")
    user: str | None = None
    instruction: Text | None = Field(None, description="genembed: what the embedding should capture. " + _SIDE)
    prompt_name: Text | None = Field(None, description="sentence-transformers: a named instruction, e.g. `query`.")
    input_type: InputType | None = Field(None, description=_INPUT_TYPE)
    task: Literal["retrieval.query", "retrieval.passage", "text-matching", "classification", "separation"] | None = (
        Field(
            None,
            description="Jina: `retrieval.query` embeds with the `query` instruction, `retrieval.passage` with none.",
        )
    )
    steps: Steps = Field(
        None,
        description="genembed: GIRCSE soft tokens K, or `auto` to stop each text once its embedding settles (at most "
        "the server's max_steps); server default if unset.",
    )


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingUsage


# ---- chat (OpenAI) ----

_DEFAULT = SamplingOptions()
# the request fields that are SamplingOptions fields of the same name
DECODING_FIELDS = (
    "temperature",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "stop",
    "seed",
)


class TextPart(_Request):
    type: Literal["text"]
    text: Text


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant"]
    content: Text | list[TextPart] | None = None
    name: str | None = None


class StreamOptions(_Request):
    include_usage: bool = False


class ChatRequest(_Request):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    model: ModelName = None
    max_tokens: int | None = Field(None, ge=1, description="Tokens to generate at most (server default if unset).")
    max_completion_tokens: int | None = Field(None, ge=1, description="Newer name of max_tokens; wins if both set.")
    # decoding: unset fields take genembed's defaults (SamplingOptions, the one decoding configuration)
    temperature: float | None = Field(
        None, ge=0.0, le=2.0, description=f"0 is greedy (the default here, unlike OpenAI's 1): {_DEFAULT.temperature}."
    )
    top_p: float | None = Field(None, gt=0.0, le=1.0, description=f"Nucleus sampling (default {_DEFAULT.top_p}).")
    frequency_penalty: float | None = Field(
        None, ge=-2.0, le=2.0, description=f"OpenAI's: per earlier occurrence (default {_DEFAULT.frequency_penalty})."
    )
    presence_penalty: float | None = Field(
        None,
        ge=-2.0,
        le=2.0,
        description=f"OpenAI's: once per token already used (default {_DEFAULT.presence_penalty}).",
    )
    repetition_penalty: float | None = Field(
        None, gt=0.0, description=f"genembed/vLLM: divide seen tokens' logits (default {_DEFAULT.repetition_penalty})."
    )
    no_repeat_ngram_size: int | None = Field(
        None, ge=0, description=f"genembed: no n-gram twice in the reply (default {_DEFAULT.no_repeat_ngram_size})."
    )
    n: int = Field(1, ge=1, le=1, description="Only one choice is supported.")
    stop: StopText | Annotated[list[StopText], Field(max_length=4)] | None = None
    seed: int | None = Field(None, ge=0, lt=2**63)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


class ChatUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: Literal["stop", "length"] | None = None
    logprobs: None = None


class ChatChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: ChatUsage | None = None


# ---- rerank (Cohere / Jina) ----


class RerankDocument(_Request):
    text: Text


Query = Annotated[
    Text,
    _non_empty("query must be a non-empty string: reranking scores the documents against it"),
    Field(description="The query (not empty: reranking scores it)."),
]
Scoring = Literal["query_likelihood", "yes_no"]
_SCORING = (
    "genembed: `query_likelihood` (relevance_score: the probability that the query was written for this "
    "document rather than another candidate; the candidates' scores sum to 1) or `yes_no` (P(yes) / "
    "(P(yes) + P(no)) to 'Is the document relevant to the query?', for each document on its own). "
    "Server default if unset."
)


_TRUNCATION = (
    "`true` (default, as Cohere and Jina do): a document too long for the server's max_input_tokens with the "
    "query is cut from its end to fit; `false`: such a document is refused with 413."
)


class RerankRequest(_Request):
    query: Query
    documents: Annotated[list[Text | RerankDocument], Field(min_length=1)]
    model: ModelName = None
    top_n: int | None = Field(None, ge=1, description="Return only the n most relevant documents.")
    return_documents: bool = Field(True, description="Include each document's text in its result.")
    instruction: Text | None = Field(None, description="genembed: the relevance task, e.g. for reranking prompts.")
    scoring: Scoring | None = Field(None, description=_SCORING)
    truncation: bool = Field(True, description=_TRUNCATION)


class RerankResult(BaseModel):
    index: int
    relevance_score: float = Field(ge=0.0, le=1.0)
    document: RerankDocument | None = None


class RerankUsage(BaseModel):
    total_tokens: int


class ApiVersion(BaseModel):
    version: str


class RerankMeta(BaseModel):
    api_version: ApiVersion
    warnings: list[str] = Field(description="What the server did that the request did not ask for.")


class RerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage
    meta: RerankMeta | None = Field(
        None, description="Cohere v1's meta, sent when there are warnings (e.g. documents cut to fit)."
    )


class V2RerankRequest(_Request):
    model: ModelName = None
    query: Query
    documents: Annotated[list[Text], Field(min_length=1)]
    top_n: int | None = Field(None, ge=1, description="Return only the n most relevant documents.")
    max_tokens_per_doc: int | None = Field(
        None,
        ge=1,
        description="Documents are cut to this many tokens (and, with `truncation`, to what fits the server's "
        "max_input_tokens with the query).",
    )
    instruction: Text | None = Field(None, description="genembed: the relevance task, e.g. for reranking prompts.")
    scoring: Scoring | None = Field(None, description=_SCORING)
    truncation: bool = Field(True, description=_TRUNCATION)


class V2RerankResult(BaseModel):
    index: int
    relevance_score: float = Field(ge=0.0, le=1.0)


class MetaTokens(BaseModel):
    input_tokens: int


class V2RerankMeta(BaseModel):
    api_version: ApiVersion
    tokens: MetaTokens
    warnings: list[str] | None = Field(None, description="What the server did that the request did not ask for.")


class V2RerankResponse(BaseModel):
    id: str
    results: list[V2RerankResult]
    meta: V2RerankMeta


# ---- embeddings (Cohere v1 / v2) ----

CohereEmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]
_EMBEDDING_TYPES = (
    "`float` (the default), `int8`/`uint8` (each dimension scaled over this request's texts, as "
    "sentence-transformers' quantize_embeddings does: needs two or more texts), `binary`/`ubinary` (one "
    "bit per dimension, packed), `base64` (float32 bytes, little-endian)."
)
_TRUNCATE = "`END` (default) / `START`: cut a text too long for the server from its end / start; `NONE`: refuse it."


class CohereEmbedRequest(_Request):
    texts: Annotated[list[Text], Field(min_length=1)] = Field(description="The texts, one embedding each.")
    images: list[str] | None = Field(None, description="Not supported: genembed embeds text only.")
    model: ModelName = None
    input_type: InputType | None = Field(None, description=_INPUT_TYPE)
    embedding_types: Annotated[list[CohereEmbeddingType], Field(min_length=1)] | None = Field(
        None, description=_EMBEDDING_TYPES
    )
    truncate: Literal["NONE", "START", "END"] = Field("END", description=_TRUNCATE)


class V2CohereEmbedRequest(CohereEmbedRequest):
    inputs: list[Any] | None = Field(None, description="Not supported: give `texts`.")
    max_tokens: int | None = Field(None, ge=1, description="Tokens per text; longer ones are cut as `truncate` says.")
    output_dimension: int | None = Field(None, ge=1, description="Keep the first n dimensions and renormalize.")
    priority: int | None = Field(None, description="Accepted and ignored.")


class CohereEmbeddings(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    float_: list[list[float]] | None = Field(None, alias="float")
    int8: list[list[int]] | None = None
    uint8: list[list[int]] | None = None
    binary: list[list[int]] | None = None
    ubinary: list[list[int]] | None = None
    base64: list[str] | None = None


class BilledUnits(BaseModel):
    input_tokens: int


class CohereEmbedMeta(BaseModel):
    api_version: ApiVersion
    billed_units: BilledUnits


class CohereEmbedFloatsResponse(BaseModel):
    response_type: Literal["embeddings_floats"] = "embeddings_floats"
    id: str
    embeddings: list[list[float]]
    texts: list[str]
    meta: CohereEmbedMeta


class CohereEmbedByTypeResponse(BaseModel):
    response_type: Literal["embeddings_by_type"] = "embeddings_by_type"
    id: str
    embeddings: CohereEmbeddings
    texts: list[str]
    meta: CohereEmbedMeta


# ---- soft tokens (genembed) ----


class InspectRequest(_Request):
    input: Text
    instruction: Text | None = None
    steps: int | None = Field(None, ge=1, description="Soft tokens K (server default if unset).")
    top: int = Field(8, ge=1, le=50, description="Tokens shown per step.")


class TokenProb(BaseModel):
    token: str
    probability: float


class SoftTokenStepOut(BaseModel):
    step: int
    tokens: list[TokenProb]


class InspectResponse(BaseModel):
    model: str
    steps: list[SoftTokenStepOut]


# ---- tokenize (genembed) ----


class TokenizeRequest(_Request):
    input: Text | Annotated[list[Text], Field(min_length=1)] = Field(description="One text or a list of texts.")
    model: ModelName = None
    add_special_tokens: bool = Field(False, description="Add the tokenizer's special tokens (BOS/EOS), if any.")


class TokenizeData(BaseModel):
    index: int
    ids: list[int]
    tokens: list[str] = Field(description="Each token decoded on its own (a split character shows as U+FFFD).")


class TokenizeResponse(BaseModel):
    model: str
    data: list[TokenizeData]
    usage: RerankUsage


# ---- models, info and health ----


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "genembed"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok", "draining"]
    model: str
    queued_embedding_requests: int
    active_generation_requests: int
    batches: int
    batched_requests: int
    largest_batch: int
    centering_instructions: int = Field(0, description="New instructions whose center is being computed now.")
    queued_centering: int = Field(0, description="New instructions waiting for their center to be computed.")
    background_batches: int = Field(0, description="Batches of calibration texts run (centring new instructions).")


class Info(BaseModel):
    model: str = Field(description="The served model's name.")
    version: str = Field(description="genembed's version.")
    dimension: int = Field(description="Embedding size.")
    method: str = Field(description="Embedding method (gircse, mean, last or grit).")
    default_steps: int = Field(description="GIRCSE soft tokens K when a request does not say.")
    max_steps: int
    instructions: dict[str, str] = Field(description="Named instructions (prompt_name).")
    input_types: dict[str, str] = Field(description="Cohere input_type -> named instruction.")
    tasks: dict[str, str] = Field(description="Jina task -> named instruction.")
    token_encoding: str = Field(description="What token-array inputs are ids of: `model` or a tiktoken encoding.")
    rerank_scorings: list[str]
    default_rerank_scoring: str
    device: str
    dtype: str
    limits: dict[str, int]
    generation_weights: str = Field(description="The weights chat and rerank run on (backbone, adapter).")
    generation_note: str | None = Field(
        None, description="Set when chat replies come from the raw backbone weights while an adapter is loaded."
    )
    family: str | None = Field(None, description="The published model family served (`genembed models`), if any.")
    contract: dict[str, Any] | None = Field(
        None,
        description="The family's embedding contract as served: hub id, prompt format, method (pooling), attention, "
        "query and document instructions, end token and padding in words (docs/families.md).",
    )
