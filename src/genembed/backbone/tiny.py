"""A tiny random Llama-architecture model with a small byte-level BPE tokenizer, built in memory.

Used by the test suite and for trying the API without the real backbone: same code paths (RoPE,
GQA, tied embeddings, chat template), no downloads, milliseconds per forward pass.
"""

from __future__ import annotations

from typing import Any

__all__ = ["tiny_backbone"]

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the stage.",
    "Given a question, retrieve passages that answer it.",
    "Retrieve semantically similar text.",
    "Classify the emotion expressed in the given text.",
    "What is the capital of France? Paris is the capital of France.",
    "I love this movie, it is wonderful and moving.",
    "The product broke after two days, very disappointing.",
]
_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tiny_backbone(seed: int = 0, *, hidden_size: int = 32, num_layers: int = 2, vocab_size: int = 384) -> Any:
    """Build a :class:`~genembed.backbone.loading.Backbone` with random weights.

    Args:
        seed: torch seed for the weights (the tokenizer is deterministic).
        hidden_size: model width (4 query heads, 2 key/value heads).
        num_layers: decoder layers.
        vocab_size: BPE vocabulary size (256 byte symbols + merges + 3 specials).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from .loading import Backbone

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = _CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    # Random init gives near-uniform next-token distributions; a 3x embedding scale makes soft tokens
    # several times more peaked than uniform while different texts keep clearly different embeddings.
    with torch.no_grad():
        embed = model.model.embed_tokens.weight
        embed[config.pad_token_id].normal_(0.0, config.initializer_range)  # trained models have no zero row
        embed.mul_(3.0)
    return Backbone(model=model, tokenizer=tokenizer, name=f"tiny-llama-{seed}")
