"""The official `anthropic` SDK through the gateway, in filter and search mode, whole and
streamed; `messages.stream(...).get_final_message()` accumulates the content blocks."""

import anthropic
import pytest

from conftest import QUESTION, WANT, Recorder, functions, received_tools, scripted


def client(gw):
    recorder = Recorder()
    http_client = anthropic.DefaultHttpxClient(event_hooks={"response": [recorder.hook]})
    sdk = anthropic.Anthropic(api_key="sk-ant-test", base_url=gw.url, max_retries=0, timeout=60,
                              http_client=http_client)
    return sdk, recorder


def tools():
    return [{"name": f["name"], "description": f.get("description", ""),
             "input_schema": f.get("parameters", {"type": "object"})} for f in functions()]


MESSAGE = {"model": "claude-opus-4-7", "max_tokens": 512,
           "messages": [{"role": "user", "content": QUESTION}]}


def test_filter_whole(filter_gw):
    sdk, seen = client(filter_gw)
    message = sdk.messages.create(**MESSAGE, tools=tools())
    assert seen.header("x-toolsift") == "kept=5 total=80"
    assert WANT in received_tools(message.content[0].text)


def test_filter_stream(filter_gw):
    sdk, seen = client(filter_gw)
    with sdk.messages.stream(**MESSAGE, tools=tools()) as stream:
        message = stream.get_final_message()
    assert seen.header("x-toolsift") == "kept=5 total=80"
    assert WANT in received_tools(message.content[0].text)


@pytest.mark.parametrize("script", ["search", "text-first"])
@pytest.mark.parametrize("streamed", [False, True])
def test_search(search_gw, streamed, script):
    sdk, seen = client(search_gw)
    args = dict(**MESSAGE, tools=tools(), extra_headers=scripted(script))
    if streamed:
        # A second message_start, or block indexes that skip or repeat, break the accumulator.
        with sdk.messages.stream(**args) as stream:
            message = stream.get_final_message()
    else:
        message = sdk.messages.create(**args)
    assert seen.header("x-toolsift").endswith("search=search")
    uses = [block for block in message.content if block.type == "tool_use"]
    assert [use.name for use in uses] == [WANT]
    assert message.stop_reason == "tool_use"
    if script == "text-first":
        assert message.content[0].type == "text"
        assert message.content[0].text.startswith("Let me look that up.")
    # Both rounds' output.
    assert message.usage.output_tokens >= 20
