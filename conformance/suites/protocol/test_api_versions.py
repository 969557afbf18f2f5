"""ApiVersions sanity on the wire (raw protocol client)."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from clients import wire
from reference_impl.protocol import framing, payloads

CORE_APIS = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 18: "ApiVersions"}


def api_versions_scenario(target, ids):
    with target.raw_client() as c:
        c.api_versions(3)  # negotiates down when the broker is older
        resp = c.api_versions_response(c.api_versions_version)
    keys = [int(k.api_key) for k in resp.api_keys]
    return {
        "error_code": int(resp.error_code),
        "keys": keys,
        "ranges": {str(int(k.api_key)): [int(k.min_version), int(k.max_version)] for k in resp.api_keys},
    }


@pytest.mark.requirement("PROTO.APIVER.001")
def test_api_versions_lists_each_api_once_with_valid_ranges(differential):
    # Which APIs exist beyond the core ones is implementation scope, not semantics.
    res = differential.run(api_versions_scenario, ignore_keys=("ranges", "keys"))
    obs = res.target
    assert obs["error_code"] == 0
    assert len(obs["keys"]) == len(set(obs["keys"])), "an api key is listed twice"
    for key, (lo, hi) in obs["ranges"].items():
        assert 0 <= lo <= hi, f"api key {key}: min {lo} > max {hi}"
    missing = [name for key, name in CORE_APIS.items() if key not in obs["keys"]]
    assert not missing, f"core APIs not advertised: {missing}"
    assert obs["ranges"]["18"][0] == 0


def _unknown_api_versions_frame(correlation_id: int) -> bytes:
    # Header v2 (ApiVersions >= 3 is flexible): key, version 999, correlation id,
    # client id, empty tagged fields; the body is never parsed by the broker.
    client_id = b"kipcheck"
    header = struct.pack(">hhih", 18, 999, correlation_id, len(client_id)) + client_id + b"\x00"
    return framing.size_prefixed(header + b"\x00\x00\x00")


@pytest.mark.requirement("PROTO.APIVER.003")
def test_too_new_api_versions_answered_with_v0_unsupported_version(target):
    with target.raw_client() as c:
        raw = c.send_frame(_unknown_api_versions_frame(4242))
    # Header v0 (just the correlation id) then the v0 body: decode_response enforces
    # the whole frame parses that way with nothing left over.
    correlation_id, body = framing.decode_response(raw, 18, 0)
    assert correlation_id == 4242
    assert body.error_code == ErrorCode.unsupported_version
    advertised = {int(k.api_key) for k in body.api_keys}
    assert 18 in advertised, "the v0 answer must at least list ApiVersions itself"


@pytest.mark.requirement("PROTO.APIVER.004")
def test_api_versions_responses_use_header_v0(target):
    with target.raw_client() as c:
        c.api_versions(3)
        version = c.api_versions_version  # 3 (flexible) unless the broker is older
        request = payloads.build(framing.request_schema(18, version), **_api_versions_fields())
        raw_ok = c.send_frame(framing.encode_request(request, 77, "kipcheck"))
        raw_unsupported = c.send_frame(_unknown_api_versions_frame(78))
    # A header v1 would put a tagged-field count byte after the correlation id; with
    # header v0 the error code (int16) follows it directly.
    for raw, correlation_id, expected_error in ((raw_ok, 77, 0), (raw_unsupported, 78, 35)):
        assert struct.unpack_from(">i", raw, 0)[0] == correlation_id
        assert struct.unpack_from(">h", raw, 4)[0] == expected_error, "ApiVersions response header is not v0"
    framing.decode_response(raw_ok, 18, version)  # strict: the whole frame is header v0 + body


@pytest.mark.requirement("PROTO.APIVER.002")
def test_every_advertised_api_versions_and_metadata_version_answers_in_kind(target):
    with target.raw_client() as c:
        ranges = c.api_versions()
        checked = []
        for key, build_fields in ((18, _api_versions_fields), (3, _metadata_fields)):
            lo, hi = ranges[key]
            for version in range(lo, hi + 1):
                try:
                    cls = framing.request_schema(key, version)
                except framing.UnsupportedApi:
                    continue  # newer than kio knows; nothing to build it with
                resp = c.send(payloads.build(cls, **build_fields()))  # checks correlation id
                assert int(resp.__version__) == version
                if key == 18:
                    assert resp.error_code == 0, f"ApiVersions v{version}: {resp.error_code!r}"
                checked.append((key, version))
    assert checked, "no advertised version could be exercised"


def _api_versions_fields():
    return {"client_software_name": "kipcheck", "client_software_version": "0.1.0"}


def _metadata_fields():
    return {
        "topics": (),
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }


@pytest.mark.requirement("PROTO.BAD.003")
def test_unadvertised_version_of_other_api_closes_connection(target):
    with target.raw_client() as c:
        _, hi = c.api_versions()[3]
        header = struct.pack(">hhih", 3, hi + 50, 9, 3) + b"kip" + b"\x00"
        c.send_frame(framing.size_prefixed(header + b"\x00" * 8), expect_response=False)
        assert c.is_closed_by_peer(timeout=10), "broker answered or kept a connection it cannot parse"
    with target.raw_client() as fresh:
        assert wire.Req(fresh, 18, 3).version >= 0  # other connections still served
