"""Index locations: parsing, and clear errors for bad URIs, unreachable servers and foreign collections."""

from __future__ import annotations

import pytest

from genembed.retrieval.errors import IndexLoadError, StoreConnectionError
from genembed.retrieval.stores import STORES, StoreLocation, index_settings, open_index, parse_location, store_class


@pytest.mark.parametrize(
    ("where", "kind", "uri", "collection"),
    [
        ("my-index", "faiss", "my-index", ""),
        ("./idx.db", "milvus", "./idx.db", "genembed"),
        ("milvus:./idx.db", "milvus", "./idx.db", "genembed"),
        ("http://milvus.local:19530", "milvus", "http://milvus.local:19530", "genembed"),
        ("milvus:https://cluster.example:443", "milvus", "https://cluster.example:443", "genembed"),
    ],
)
def test_locations(where, kind, uri, collection):
    location = parse_location(where)
    assert (location.kind, location.uri, location.collection) == (kind, uri, collection)
    assert store_class(kind).__name__ == {"faiss": "FaissStore", "milvus": "MilvusStore"}[kind]


def test_a_folder_ignores_a_collection_and_unknown_stores_are_named():
    assert parse_location("my-index", collection="docs") == StoreLocation("faiss", "my-index")
    with pytest.raises(ValueError, match="unknown vector store 'qdrant'; known stores: milvus, faiss"):
        store_class("qdrant")


def test_every_registered_store_has_the_protocol():
    from genembed.retrieval.store import VectorStore

    wanted = {n for n in dir(VectorStore) if not n.startswith("_")} - {"where", "manifest"}  # instance attributes
    assert {"claim", "open", "create", "add", "upsert", "delete", "search", "save", "describe"} <= wanted
    for kind in STORES:
        cls = store_class(kind)
        missing = {n for n in wanted | {"__len__"} if not hasattr(cls, n)}
        assert not missing, f"{cls.__name__} lacks {sorted(missing)}"


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


def test_index_settings_are_checked_before_any_work():
    faiss = StoreLocation("faiss", "idx")
    assert index_settings(faiss, 8) == {"faiss": {"factory": "Flat", "search_params": {}}}
    assert index_settings(faiss, 8, index_type="HNSW16", search_params={"efSearch": "64"}) == {
        "faiss": {"factory": "HNSW16", "search_params": {"efSearch": 64}}
    }
    with pytest.raises(ValueError, match="faiss cannot build index 'HNSW-ish'"):
        index_settings(faiss, 8, index_type="HNSW-ish")
    with pytest.raises(ValueError, match="faiss takes build settings in the index description"):
        index_settings(faiss, 8, index_params={"M": 32})
    milvus = parse_location("x.db")
    assert index_settings(milvus, 8, index_type="hnsw", index_params={"M": 8})["milvus"] == {
        "index_type": "HNSW",
        "index_params": {"M": 8},
        "search_params": {},
    }
    with pytest.raises(ValueError, match="unknown Milvus index type 'HNSW32'"):
        index_settings(milvus, 8, index_type="HNSW32")
