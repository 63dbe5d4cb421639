from __future__ import annotations

import pytest

from genembed.generation.detokenize import IncrementalDetokenizer, StopScanner, stream_pieces

MULTIBYTE = "héllo 🙂 wörld, 日本語 text — done"


def test_incremental_pieces_never_break_characters(tiny):
    tok = tiny.tokenizer
    ids = tok(MULTIBYTE, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(MULTIBYTE.split())  # multi-byte characters span several tokens here
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.push(i) for i in ids] + [detok.flush()]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == MULTIBYTE
    assert "" in pieces  # some tokens completed no character and were held back


def test_flush_returns_a_cut_character(tiny):
    tok = tiny.tokenizer
    ids = tok("a🙂", add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(tok)
    streamed = "".join(detok.push(i) for i in ids[:-1])
    assert streamed == "a"
    assert detok.flush() == tok.decode(ids[:-1])[1:]  # the incomplete bytes, as decode() shows them


def test_special_tokens_are_skipped(tiny):
    tok = tiny.tokenizer
    ids = [tok.convert_tokens_to_ids("<|im_start|>"), *tok("hi there", add_special_tokens=False)["input_ids"]]
    assert "".join(stream_pieces(tok, ids)) == "hi there"


@pytest.mark.parametrize(
    ("pieces", "stops", "expected"),
    [
        (["Hello wor", "ld. Bye"], ["."], "Hello world"),
        (["Hello ", "EN", "D and more"], ["END"], "Hello "),  # the stop string spans pieces
        (["a", "b", "c", "x", "y"], ["cx", "bcz"], "ab"),
        (["no stop here"], ["zzz"], "no stop here"),
        (["almost EN"], ["END"], "almost EN"),  # held back, then flushed at the end
        (["x"], [], "x"),
    ],
)
def test_stop_scanner(pieces, stops, expected):
    scanner, out = StopScanner(stops), []
    for piece in pieces:
        out.append(scanner.feed(piece))
        if scanner.stopped:
            break
    if not scanner.stopped:
        out.append(scanner.flush())
    assert "".join(out) == expected


def test_stop_scanner_holds_back_only_possible_stop_prefixes():
    scanner = StopScanner(["</answer>"])
    assert scanner.feed("The result </an") == "The result "
    assert scanner.feed("other") == "</another"
    assert not scanner.stopped


def test_stream_pieces_stops_consuming_tokens(tiny):
    tok = tiny.tokenizer
    ids = tok("one two. three four", add_special_tokens=False)["input_ids"]
    consumed = []

    def tokens():
        for i in ids:
            consumed.append(i)
            yield i

    assert "".join(stream_pieces(tok, tokens(), stop=["."])) == "one two"
    assert len(consumed) < len(ids)
