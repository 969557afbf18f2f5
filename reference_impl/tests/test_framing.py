"""Unit tests for wire framing: header versions, size prefixes, codec round trips."""

import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from reference_impl.protocol import framing
from reference_impl.protocol.api_keys import ApiKey


def test_request_round_trip_uses_flexible_header_v2():
    req = ApiVersionsRequest(client_software_name="c", client_software_version="1")
    frame = framing.encode_request(req, correlation_id=7, client_id="me")
    (size,) = struct.unpack(">i", frame[:4])
    assert size == len(frame) - 4
    decoded = framing.decode_request(frame[4:])
    assert decoded.header.api_key == ApiKey.API_VERSIONS and decoded.header.api_version == 3
    assert decoded.header.correlation_id == 7 and decoded.header.client_id == "me"
    assert decoded.body == req


def test_api_versions_response_always_uses_header_v0():
    assert framing.response_header_version(18, 3) == 0
    assert framing.response_header_version(3, 12) == 1  # flexible Metadata
    assert framing.response_header_version(3, 8) == 0  # pre-flexible Metadata


def test_trailing_garbage_is_rejected():
    req = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    frame = framing.encode_request(req, 1)[4:] + b"\x00junk"
    with pytest.raises(framing.PayloadDecodeError, match="unexpected bytes"):
        framing.decode_request(frame)


def test_unknown_api_key_is_unsupported():
    with pytest.raises(framing.UnsupportedApi):
        framing.request_schema(9999, 0)


@pytest.mark.parametrize("size", [-1, -(2**31), framing.DEFAULT_MAX_FRAME_BYTES + 1])
def test_frame_reader_rejects_impossible_sizes(size):
    reader = framing.FrameReader()
    with pytest.raises(framing.FrameError):
        reader.feed(struct.pack(">i", size) + b"x")


def test_frame_reader_splits_and_buffers_partial_frames():
    reader = framing.FrameReader()
    data = struct.pack(">i", 3) + b"abc" + struct.pack(">i", 2) + b"d"
    assert reader.feed(data) == [b"abc"]
    assert reader.pending_bytes == 5
    assert reader.feed(b"e") == [b"de"]
    assert reader.pending_bytes == 0
