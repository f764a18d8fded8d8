"""The official `anthropic` SDK through the gateway, in filter and search mode, whole and
streamed; `messages.stream(...).get_final_message()` accumulates the content blocks."""

import anthropic
import pytest

from conftest import QUESTION, WANT, Recorder, functions, received, received_tools, scripted


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


SEARCH_TOOL = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}


@pytest.mark.parametrize("mode", ["filter", "search"])
def test_native_tool_search_passes_untouched(request, mode):
    """A request with Anthropic's own tool search (every tool deferred but one, as Claude Code
    sends its MCP tools), and a later turn whose history holds a `tool_reference` block: the
    upstream gets every tool, in either mode."""
    sdk, seen = client(request.getfixturevalue(f"{mode}_gw"))
    deferred = [dict(t, defer_loading=True) for t in tools()]
    args = dict(**MESSAGE, tools=[SEARCH_TOOL, *deferred],
                extra_headers={"anthropic-beta": "advanced-tool-use-2025-11-20"})
    message = sdk.messages.create(**args)
    assert seen.header("x-toolsift") == "kept=80 total=80 skipped=native_search"
    # The 80 tools and the search tool.
    assert received(message.content[0].text)[0] == 81

    history = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_search", "name": "find_weather_tools",
             "input": {"query": "weather"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_search",
             "content": [{"type": "tool_reference", "tool_name": WANT}]}]},
    ]
    finder = {"name": "find_weather_tools", "description": "Find tools.",
              "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}
    message = sdk.messages.create(model=MESSAGE["model"], max_tokens=512, messages=history,
                                  tools=[finder, *deferred])
    assert seen.header("x-toolsift") == "kept=81 total=81 skipped=native_search"
    assert received(message.content[0].text)[0] == 81
