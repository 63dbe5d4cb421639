"""Request and response bodies in the shapes existing clients speak: OpenAI (embeddings, chat, models)
and Cohere/Jina (rerank). Unknown request fields are ignored, as OpenAI's own server does for most."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

__all__ = [
    "ChatChoice",
    "ChatChunk",
    "ChatChunkChoice",
    "ChatCompletion",
    "ChatMessage",
    "ChatRequest",
    "ChatUsage",
    "Delta",
    "EmbeddingData",
    "EmbeddingRequest",
    "EmbeddingResponse",
    "EmbeddingUsage",
    "Health",
    "InspectRequest",
    "InspectResponse",
    "ModelCard",
    "ModelList",
    "RerankDocument",
    "RerankRequest",
    "RerankResponse",
    "RerankResult",
    "RerankUsage",
    "SoftTokenStepOut",
    "TextPart",
    "TokenProb",
]


def _utf8(text: str) -> str:
    # JSON may carry lone surrogates ("\ud800"); tokenizers cannot take them, so refuse them here.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text is not valid Unicode (lone surrogate at position {exc.start})") from exc
    return text


Text = Annotated[str, AfterValidator(_utf8)]
ModelName = Annotated[str | None, Field(description="Accepted and ignored: the server serves one model.")]


# ---- embeddings (OpenAI) ----


class EmbeddingRequest(BaseModel):
    input: Text | Annotated[list[Text], Field(min_length=1)] = Field(
        description="One text, or a list of texts (each one embedding, in order)."
    )
    model: ModelName = None
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="`base64`: each embedding as little-endian float32 bytes, base64-encoded."
    )
    dimensions: int | None = Field(None, ge=1, description="Keep the first n dimensions and renormalize.")
    user: str | None = None
    instruction: Text | None = Field(None, description="genembed: what the embedding should capture.")
    steps: int | None = Field(None, ge=1, description="genembed: GIRCSE soft tokens K (server default if unset).")


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


class TextPart(BaseModel):
    type: Literal["text"]
    text: Text


class ChatMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant"]
    content: Text | list[TextPart] | None = None
    name: str | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatRequest(BaseModel):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    model: ModelName = None
    max_tokens: int | None = Field(None, ge=1, description="Tokens to generate at most (server default if unset).")
    max_completion_tokens: int | None = Field(None, ge=1, description="Newer name of max_tokens; wins if both set.")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0 (the default here, unlike OpenAI) is greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=1, description="Only one choice is supported.")
    stop: Text | Annotated[list[Text], Field(max_length=4)] | None = None
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


class RerankDocument(BaseModel):
    text: Text


class RerankRequest(BaseModel):
    query: Annotated[Text, Field(min_length=1, description="The query (not empty: reranking scores it).")]
    documents: Annotated[list[Text | RerankDocument], Field(min_length=1)]
    model: ModelName = None
    top_n: int | None = Field(None, ge=1, description="Return only the n most relevant documents.")
    return_documents: bool = Field(True, description="Include each document's text in its result.")
    instruction: Text | None = Field(None, description="genembed: the relevance task, e.g. for reranking prompts.")


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankUsage(BaseModel):
    total_tokens: int


class RerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage


# ---- soft tokens (genembed) ----


class InspectRequest(BaseModel):
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


# ---- models and health ----


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
