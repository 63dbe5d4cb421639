"""A folder's tokenizer.json splits text as saved, even where transformers' class would build its own."""

from __future__ import annotations

import json

from tokenizers import Tokenizer

from genembed.backbone.tokenizer import load_tokenizer


def _folder_with(tmp_path, tiny, model_type: str):
    tiny.tokenizer.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    return tmp_path


def test_qwen2_folder_keeps_its_saved_split(tmp_path, tiny):
    from transformers import AutoTokenizer

    folder = _folder_with(tmp_path, tiny, "qwen2")  # a plain byte-level split, not Qwen2's regex
    saved = Tokenizer.from_file(str(folder / "tokenizer.json"))
    text = "one\n\ntwo   three\n\n\nfour"
    assert type(AutoTokenizer.from_pretrained(folder)).__name__ == "Qwen2Tokenizer"
    auto = AutoTokenizer.from_pretrained(folder).backend_tokenizer
    loaded = load_tokenizer(folder)
    assert loaded(text, add_special_tokens=False)["input_ids"] == saved.encode(text, add_special_tokens=False).ids
    state = {part: getattr(saved, part).__getstate__() for part in ("pre_tokenizer",)}
    assert auto.pre_tokenizer.__getstate__() != state["pre_tokenizer"]  # Qwen2's own regex: what the fix is for
    assert loaded.backend_tokenizer.pre_tokenizer.__getstate__() == state["pre_tokenizer"]
    assert type(loaded).__name__ == "Qwen2Tokenizer" and loaded.eos_token == tiny.tokenizer.eos_token


def test_a_folder_whose_file_agrees_is_loaded_as_transformers_does(tmp_path, tiny):
    from transformers import AutoTokenizer

    folder = _folder_with(tmp_path, tiny, "llama")
    text = "one\n\ntwo   three"
    want = AutoTokenizer.from_pretrained(folder)(text)["input_ids"]
    assert load_tokenizer(folder)(text)["input_ids"] == want
