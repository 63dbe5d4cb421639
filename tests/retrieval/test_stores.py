"""Index locations: parsing, and clear errors for bad URIs, unreachable servers and foreign collections."""

from __future__ import annotations

import pytest

from genembed.retrieval.errors import IndexLoadError, StoreConnectionError
from genembed.retrieval.stores import StoreLocation, open_index, parse_location, store_settings


@pytest.mark.parametrize(
    ("where", "kind", "uri", "embedded"),
    [
        ("my-index", "faiss", "my-index", False),
        ("./idx.db", "milvus", "./idx.db", True),
        ("milvus:./idx.db", "milvus", "./idx.db", True),
        ("http://milvus.local:19530", "milvus", "http://milvus.local:19530", False),
        ("milvus:https://cluster.example:443", "milvus", "https://cluster.example:443", False),
    ],
)
def test_locations(where, kind, uri, embedded):
    location = parse_location(where)
    assert (location.kind, location.uri, location.embedded, location.collection) == (kind, uri, embedded, "genembed")


def test_location_options_and_secrets():
    location = parse_location("http://h:19530", collection="docs_v2", token="root:Milvus", timeout=3)
    assert (location.collection, location.token, location.timeout) == ("docs_v2", "root:Milvus", 3.0)
    assert "Milvus" not in repr(location) and "Milvus" not in str(location)  # the token is never shown
    assert parse_location(location) is location
    assert str(parse_location("milvus:./x.db")) == "milvus:./x.db (collection 'genembed')"


@pytest.mark.parametrize(
    ("where", "match"),
    [
        ("ftp://host/x", r"'ftp://host/x': unsupported scheme 'ftp'"),
        ("http://", r"Milvus URI 'http://' has no host"),
        ("http://host:port", r"Milvus URI 'http://host:port' has a bad port"),
        ("milvus:", r"index location 'milvus:' names no file"),
        ("milvus:./index", r"'milvus:./index': a milvus-lite database path must end in .db"),
        ("  ", "location is empty"),
    ],
)
def test_bad_locations_name_the_uri(where, match):
    with pytest.raises(ValueError, match=match):
        parse_location(where)


def test_bad_collection_name():
    with pytest.raises(ValueError, match="x.db: bad Milvus collection name 'my-docs'"):
        parse_location("x.db", collection="my-docs")


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(StoreConnectionError, match=r"cannot connect to Milvus at http://127\.0\.0\.1:9: .*server"):
        open_index("http://127.0.0.1:9", timeout=2)


def test_missing_folder_and_missing_or_foreign_collections(tmp_path):
    with pytest.raises(StoreConnectionError, match=r"database .*/no/x\.db: the folder .*/no does not exist"):
        open_index(f"milvus:{tmp_path}/no/x.db")
    with pytest.raises(IndexLoadError, match=r"x\.db has no collection 'genembed' \(collections: none\)"):
        open_index(tmp_path / "x.db")
    from pymilvus import MilvusClient

    MilvusClient(str(tmp_path / "x.db")).create_collection("plain", dimension=4)
    with pytest.raises(IndexLoadError, match="is not a genembed index: the collection has no genembed.manifest"):
        open_index(tmp_path / "x.db", collection="plain")


def test_store_settings_are_checked_before_any_work():
    faiss = StoreLocation("faiss", "idx")
    assert store_settings(faiss, 8) == {"faiss": {"factory": "Flat", "search_params": {}}}
    assert store_settings(faiss, 8, index_type="HNSW16", search_params={"efSearch": "64"}) == {
        "faiss": {"factory": "HNSW16", "search_params": {"efSearch": 64}}
    }
    with pytest.raises(ValueError, match="faiss cannot build index 'HNSW-ish'"):
        store_settings(faiss, 8, index_type="HNSW-ish")
    with pytest.raises(ValueError, match="faiss takes build settings in the index description"):
        store_settings(faiss, 8, index_params={"M": 32})
    milvus = parse_location("x.db")
    assert store_settings(milvus, 8, index_type="hnsw", index_params={"M": 8})["milvus"] == {
        "index_type": "HNSW",
        "index_params": {"M": 8},
        "search_params": {},
    }
    with pytest.raises(ValueError, match="unknown Milvus index type 'HNSW32'"):
        store_settings(milvus, 8, index_type="HNSW32")
