"""Every patch of a library's internals runs only on the version it was written for, and on any
other leaves the library's own behaviour (adapters/library_patches.py). The versions are held to
uv.lock's; each botocore and pynamodb patch is run both ways here, moto's in
tests/integration/test_library_patches.py. Oracle for "the library's own behaviour": the library
itself, unpatched (its own session, its own serializer and parser)."""

from __future__ import annotations

import json
import logging
import tomllib
from pathlib import Path
from typing import Any

import botocore.config
import botocore.session
import pynamodb.connection.base
import pytest
from botocore.awsrequest import AWSResponse
from pynamodb.connection import Connection

from infercrane.adapters import library_patches
from infercrane.adapters.aws_session import shared_session
from infercrane.adapters.dynamo import base

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def other_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every library reports a version no patch was written for (and warnings start afresh)."""
    monkeypatch.setattr(library_patches, "installed", lambda library: "0.0.1")
    monkeypatch.setattr(library_patches, "_warned", set())


def test_each_patched_library_was_written_for_the_version_uv_lock_pins():
    # `make lock` moving one fails here until its patches are checked again on the new version.
    locked: dict[str, list[str]] = {}
    for package in tomllib.loads((REPO / "uv.lock").read_text())["package"]:
        locked.setdefault(package["name"], []).append(package["version"])
    assert {name: locked.get(name) for name in library_patches.WRITTEN_FOR} == {
        name: [version] for name, version in library_patches.WRITTEN_FOR.items()}


def test_on_the_version_written_for_a_patch_may_run():
    for library in library_patches.WRITTEN_FOR:
        assert library_patches.mismatch(library) is None
        assert library_patches.may_patch(f"a {library} patch", library, "nothing")


def test_on_another_version_a_patch_is_skipped_with_one_warning_saying_which_why_and_what_is_lost(
        other_version, caplog):
    caplog.set_level(logging.WARNING, logger="infercrane.patches")
    assert not library_patches.may_patch("moto's widget", "moto", "widgets wobble")
    assert not library_patches.may_patch("moto's widget", "moto", "widgets wobble")
    [record] = caplog.records
    message = record.getMessage()
    for part in ("moto's widget", "moto 0.0.1 is installed", "written for "
                 + library_patches.WRITTEN_FOR["moto"], "widgets wobble"):
        assert part in message


def test_a_library_that_is_not_installed_counts_as_another_version(monkeypatch):
    monkeypatch.setattr(library_patches.metadata, "version", _not_installed)
    monkeypatch.setattr(library_patches, "_versions", {})
    assert "(not installed)" in str(library_patches.mismatch("pynamodb"))


def _not_installed(name: str) -> str:
    raise library_patches.metadata.PackageNotFoundError(name)


# -- pynamodb: connections share the process's botocore session -------------------------------
def test_pynamodb_connections_share_the_process_session_on_the_version_written_for(monkeypatch):
    monkeypatch.setattr(pynamodb.connection.base, "get_session", base._PYNAMODB_GET_SESSION)
    assert base.share_session()
    assert Connection(region="us-east-1").session is shared_session()


def test_on_another_pynamodb_each_connection_keeps_a_session_of_its_own(monkeypatch,
                                                                        other_version):
    monkeypatch.setattr(pynamodb.connection.base, "get_session", base._PYNAMODB_GET_SESSION)
    assert not base.share_session()
    one, two = Connection(region="us-east-1").session, Connection(region="us-east-1").session
    assert isinstance(one, botocore.session.Session)
    assert one is not shared_session() and one is not two  # pynamodb's own get_session()


# -- botocore: batch bodies by json.dumps, Query items by json.loads ----------------------------
class _Conn:
    """What the store hands the installers: a pynamodb connection's botocore client."""

    def __init__(self, client: Any) -> None:
        self.connection = type("C", (), {"client": client})()


def _client(answer: bytes, sent: list[bytes]) -> Any:
    """A client as pynamodb makes them (no parameter validation) that answers `answer` to every
    request and records each body it would have sent."""
    client = botocore.session.get_session().create_client(
        "dynamodb", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="k", aws_secret_access_key="s",
        config=botocore.config.Config(parameter_validation=False, retries={"max_attempts": 1}))

    def respond(request: Any, **_: Any) -> AWSResponse:
        sent.append(request.body)
        return AWSResponse(request.url, 200, {"Content-Type": "application/x-amz-json-1.0"},
                           _Raw(answer))

    client.meta.events.register("before-send.dynamodb", respond)
    return client


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


BATCH = {"RequestItems": {"T": [{"PutRequest": {"Item": {
    "pk": {"S": "t#d"}, "sk": {"S": "0001"}, "n": {"N": "1.5"}, "ok": {"BOOL": True},
    "l": {"L": [{"S": "ünïcødé"}, {"M": {"k": {"SS": ["a"]}}}]}}}}]}}


@pytest.mark.parametrize("patched", [True, False], ids=["patched", "other-botocore"])
def test_a_batch_write_sends_the_bytes_botocore_makes_either_way(patched, request):
    if not patched:
        request.getfixturevalue("other_version")
    sent: list[bytes] = []
    client = _client(b'{"UnprocessedItems": {}}', sent)
    own = type(client._serializer)
    base.plain_json_batch_requests(_Conn(client))
    assert client.batch_write_item(**BATCH)["UnprocessedItems"] == {}
    # Oracle: botocore's own serializer (a fresh, unpatched client) given the same parameters.
    oracle: list[bytes] = []
    _client(b'{"UnprocessedItems": {}}', oracle).batch_write_item(**BATCH)
    assert sent == oracle
    assert json.loads(sent[0]) == BATCH
    assert isinstance(client._serializer, base._PlainJsonSerializer) is patched
    assert patched or type(client._serializer) is own


QUERY_PAGE = {"Count": 2, "ScannedCount": 2, "Items": [
    {"pk": {"S": "p"}, "sk": {"S": "1"}, "n": {"N": "12345678901234567890"}},
    {"pk": {"S": "p"}, "sk": {"S": "2"}, "m": {"M": {"q": {"S": 'a "quoted" text'}}}}],
    "LastEvaluatedKey": {"pk": {"S": "p"}, "sk": {"S": "2"}}}


@pytest.mark.parametrize("patched", [True, False], ids=["patched", "other-botocore"])
def test_a_query_page_reads_as_botocore_parses_it_either_way(patched, request):
    if not patched:
        request.getfixturevalue("other_version")
    client = _client(json.dumps(QUERY_PAGE).encode(), [])
    took: list[bool] = []
    base.parse_query_items_as_json(_Conn(client))
    client.meta.events.register(  # after ours: did it hand the Items over unparsed?
        "before-parse.dynamodb.Query",
        lambda customized_response_dict, **_: took.append("Items" in customized_response_dict))
    page = client.query(TableName="T", KeyConditionExpression="pk = :p",
                        ExpressionAttributeValues={":p": {"S": "p"}})
    page.pop("ResponseMetadata")
    assert page == QUERY_PAGE  # botocore's own parse of this page is the page itself
    assert took == [patched]
