from __future__ import annotations

import pytest
import torch

from genembed.encoders import generate_soft_tokens
from genembed.encoders.core import embed_prepared
from genembed.encoders.prefix_cache import compute_prefix_states
from genembed.encoders.prompts import encode_prompts
from genembed.encoders.settings import EmbedSettings, RunOptions
from genembed.encoders.shared_prefix import embed_by_prefix, prefix_groups, rows_after_prefix
from genembed.training.forward import tokenize_texts

ASK = "Retrieve semantically similar text."
CLASSIFY = "Classify the emotion expressed in the given text."
# three instructions interleaved (one of them none), texts of different lengths, one empty text
ROWS = [
    ("a short one", ASK),
    ("a much longer text that needs left padding in its batch of mixed prompts", CLASSIFY),
    ("the second text under the first instruction, a little longer", ASK),
    ("no instruction here", ""),
    ("", ASK),
    ("happy", CLASSIFY),
    ("a third text that asks for similar ones", ASK),
]


def _batch(tiny, rows=ROWS, fmt="chat"):
    texts, instructions = zip(*rows, strict=True)
    return tokenize_texts(tiny.tokenizer, list(texts), list(instructions), prompt_format=fmt, max_length=64)


def embed_shared_prefixes(model, batch, *, steps, tau=1.0, stop_tol=None):
    """Hidden states h_1..h_K with each group's prefix computed once (the training path's sharing)."""

    def group(rows, prefix_ids):
        prefix = None if prefix_ids is None else compute_prefix_states(model, prefix_ids)
        out = generate_soft_tokens(
            model, rows.input_ids, rows.attention_mask, steps=steps, tau=tau, stop_tol=stop_tol, prefix=prefix
        )
        return out.hidden, out.steps_used

    return embed_by_prefix(batch, group, share_single=False)


def test_rows_group_by_the_tokens_before_their_text(tiny):
    groups = prefix_groups(_batch(tiny))
    assert [rows for rows, _ in groups] == [[0, 2, 6], [1, 5], [3], [4]]
    for rows, prefix_len in groups:
        text, instruction = ROWS[rows[0]]
        prompt = encode_prompts(tiny.tokenizer, [text], instruction=instruction, prompt_format="chat")[0]
        assert prefix_len == (prompt.text_start if text else 0)  # an empty text is pooled whole: no prefix
    assert groups[0][1] > groups[2][1] > 0  # an instruction's prefix is longer than the bare template


@pytest.mark.parametrize("fmt", ["chat", "plain"])
def test_shared_prefixes_give_the_unshared_hidden_states_in_row_order(tiny, fmt):
    batch = _batch(tiny, fmt=fmt)
    with torch.no_grad():
        plain = generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=4)
        hidden, used = embed_shared_prefixes(tiny.model, batch, steps=4)
    assert hidden.shape == plain.hidden.shape == (len(ROWS), 4, tiny.model.config.hidden_size)
    torch.testing.assert_close(hidden, plain.hidden, rtol=1e-4, atol=1e-5)
    assert torch.equal(used, plain.steps_used)


def test_adaptive_steps_stop_where_the_unshared_path_stops(tiny):
    batch = _batch(tiny)
    with torch.no_grad():
        plain = generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=8, stop_tol=0.9)
        hidden, used = embed_shared_prefixes(tiny.model, batch, steps=8, stop_tol=0.9)
    assert torch.equal(used, plain.steps_used)
    assert plain.steps_used.min() < 8  # the tolerance stops some rows early
    torch.testing.assert_close(hidden, plain.hidden, rtol=1e-4, atol=1e-5)


def test_gradients_through_a_shared_prefix_equal_the_unshared_ones(tiny):
    batch = _batch(tiny)
    weight = tiny.model.model.layers[0].self_attn.q_proj.weight
    grads = []
    for share in (False, True):
        tiny.model.zero_grad()
        hidden = embed_prepared(tiny.model, batch, EmbedSettings(steps=3), share_prefix=share).steps
        (hidden * torch.linspace(-1, 1, hidden.shape[-1])).sum().backward()
        grads.append(weight.grad.clone())
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)


def test_the_prefix_is_computed_once_per_group(tiny):
    batch = _batch(tiny)
    seen = []
    handle = tiny.model.model.layers[0].self_attn.q_proj.register_forward_hook(
        lambda m, i, o: seen.append(i[0].shape[:2])
    )
    try:
        with torch.no_grad():  # the training path: prefixes computed for this batch
            embed_prepared(tiny.model, batch, EmbedSettings(steps=2), share_prefix=True)
    finally:
        handle.remove()
    # per group of several rows: the prefix at batch 1, the rest, 2 soft tokens; the single rows (one without
    # an instruction, one empty text) together: prefill, 2 steps
    (ask, ask_len), (classify, classify_len) = prefix_groups(batch)[:2]
    assert seen[0] == (1, ask_len) and seen[1][0] == len(ask)
    assert seen[4] == (1, classify_len) and seen[5][0] == len(classify)
    assert seen[8][0] == 2 and len(seen) == 4 + 4 + 3


def test_embed_prepared_shares_prefixes_when_the_settings_ask(tiny):
    batch = _batch(tiny)
    with torch.no_grad():
        plain = embed_prepared(tiny.model, batch, EmbedSettings(steps=3)).steps
        shared = embed_prepared(tiny.model, batch, EmbedSettings(steps=3), share_prefix=True).steps
    torch.testing.assert_close(shared, plain, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"method": "mean"}, "soft-token method"),
        ({"attention": "bidirectional"}, "causal attention"),
        ({"use_cache": False}, "use_cache=True"),
    ],
)
def test_settings_refuse_a_shared_prefix_where_it_does_not_apply(fields, message):
    with pytest.raises(ValueError, match=message):
        RunOptions(share_prefix=True).check(EmbedSettings(**fields))


def test_a_prefix_as_long_as_a_prompt_is_refused(tiny):
    batch = _batch(tiny, rows=[("one", ASK), ("two", ASK)])
    length = int(batch.attention_mask.sum(dim=1).min())
    with pytest.raises(ValueError, match="no token after it"):
        rows_after_prefix(batch, [0, 1], length)
    rest, ids = rows_after_prefix(batch, [0, 1], 3)
    prefix = compute_prefix_states(tiny.model, ids)
    with pytest.raises(ValueError, match="cached path"):
        generate_soft_tokens(tiny.model, rest.input_ids, rest.attention_mask, steps=2, prefix=prefix, use_cache=False)
    with pytest.raises(ValueError, match="causal attention"):
        generate_soft_tokens(
            tiny.model, rest.input_ids, rest.attention_mask, steps=2, prefix=prefix, attention="bidirectional"
        )


def test_rows_after_a_prefix_keep_their_tokens_and_text(tiny):
    batch = _batch(tiny)
    rows, prefix_len = prefix_groups(batch)[0]
    rest, ids = rows_after_prefix(batch, rows, prefix_len)
    for row, rest_row in zip(rows, range(len(rows)), strict=True):
        text, instruction = ROWS[row]
        prompt = encode_prompts(tiny.tokenizer, [text], instruction=instruction, prompt_format="chat", max_length=64)[0]
        assert list(ids) == prompt.ids[:prefix_len]
        real = rest.attention_mask[rest_row].bool()
        assert rest.input_ids[rest_row][real].tolist() == prompt.ids[prefix_len:]
        texts = rest.input_ids[rest_row][rest.text_mask[rest_row].bool()].tolist()
        assert texts == prompt.ids[prompt.text_start : prompt.text_end]
    assert rest.attention_mask[:, -1].all() and not rest.attention_mask[:, 0].all()  # left-padded, trimmed
