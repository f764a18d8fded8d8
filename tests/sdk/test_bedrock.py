"""The official `boto3` SDK (Bedrock Runtime `converse` and `converse_stream`) through the gateway.

boto3 signs every request with SigV4, payload hash included, and the demo upstream checks the
signature as Bedrock does: a signed request must pass through toolsift unchanged
(`x-toolsift: skipped=signed`). A client that sends unsigned requests (the route adds the
credentials after toolsift) is filtered and searched like any other."""

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config

from conftest import QUESTION, WANT, functions, received, received_tools, scripted

# The demo upstream's own credentials (src/bin/toolsift-demo-upstream/sigv4.rs).
ACCESS_KEY_ID = "AKIDTOOLSIFTDEMO"
SECRET_ACCESS_KEY = "toolsift-demo-secret-access-key"
MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"


def client(gw, signed, headers=None):
    config = Config(retries={"max_attempts": 1}, read_timeout=60)
    if not signed:
        config = config.merge(Config(signature_version=UNSIGNED))
    sdk = boto3.client("bedrock-runtime", endpoint_url=gw.url, region_name="us-east-1",
                       aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY,
                       config=config)

    def add_headers(request, **_):
        # After signing: the demo's script headers are not part of the signature.
        request.headers.update(headers or {})

    sdk.meta.events.register("before-send.bedrock-runtime.*", add_headers)
    return sdk


def request():
    tools = [{"toolSpec": {"name": f["name"], "description": f.get("description") or f["name"],
                           "inputSchema": {"json": f.get("parameters", {"type": "object"})}}}
             for f in functions()]
    return {"modelId": MODEL, "messages": [{"role": "user", "content": [{"text": QUESTION}]}],
            "toolConfig": {"tools": tools}}


def header(response, name):
    return response["ResponseMetadata"]["HTTPHeaders"].get(name)


def stream_text(response):
    """The text of a converse_stream answer, read event by event by botocore's parser (which
    checks the event-stream CRCs)."""
    events = list(response["stream"])
    assert "messageStart" in events[0] and "metadata" in events[-1], events
    return "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events
                   if "contentBlockDelta" in e)


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("mode", ["filter", "search"])
def test_signed_requests_pass_through_unchanged(filter_gw, search_gw, mode, streamed):
    gw = filter_gw if mode == "filter" else search_gw
    sdk = client(gw, signed=True)
    before = gw.stat("toolsift.skipped.signed")
    # A body or signed header changed on the way would be a 403 (botocore raises ClientError).
    if streamed:
        response = sdk.converse_stream(**request())
        text = stream_text(response)
    else:
        response = sdk.converse(**request())
        text = response["output"]["message"]["content"][0]["text"]
    assert header(response, "x-toolsift").endswith("skipped=signed")
    assert received(text)[0] == 80
    assert gw.stat("toolsift.skipped.signed") == before + 1


def test_unsigned_filter_whole(filter_gw):
    response = client(filter_gw, signed=False).converse(**request())
    assert header(response, "x-toolsift") == "kept=5 total=80"
    assert WANT in received_tools(response["output"]["message"]["content"][0]["text"])
    assert response["stopReason"] == "end_turn"


def test_unsigned_filter_stream(filter_gw):
    response = client(filter_gw, signed=False).converse_stream(**request())
    assert header(response, "x-toolsift") == "kept=5 total=80"
    assert WANT in received_tools(stream_text(response))


def test_unsigned_search_whole(search_gw):
    response = client(search_gw, signed=False, headers=scripted()).converse(**request())
    assert header(response, "x-toolsift").endswith("search=search")
    content = response["output"]["message"]["content"]
    assert [block["toolUse"]["name"] for block in content if "toolUse" in block] == [WANT]
    assert response["stopReason"] == "tool_use"
    assert response["usage"]["outputTokens"] >= 20


def test_unsigned_search_stream_is_filtered(search_gw):
    """Search mode cannot hold Bedrock's binary stream: the request is filtered instead."""
    before = search_gw.stat("toolsift.search.unsupported")
    response = client(search_gw, signed=False).converse_stream(**request())
    assert header(response, "x-toolsift") == "kept=5 total=80"
    assert WANT in received_tools(stream_text(response))
    assert search_gw.stat("toolsift.search.unsupported") == before + 1
