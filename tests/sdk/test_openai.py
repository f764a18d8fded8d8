"""The official `openai` SDK (Chat Completions and Responses) through the gateway, in filter and
search mode, whole and streamed; its parsers and stream accumulators judge the answers."""

import openai
import pytest

from conftest import QUESTION, WANT, Recorder, catalog, functions, received_tools, scripted


def client(gw):
    recorder = Recorder()
    http_client = openai.DefaultHttpxClient(event_hooks={"response": [recorder.hook]})
    sdk = openai.OpenAI(api_key="sk-test", base_url=f"{gw.url}/v1", max_retries=0, timeout=60,
                        http_client=http_client)
    return sdk, recorder


def responses_tools():
    return [{"type": "function", **f} for f in functions()]


def call_names(items):
    return [item.name for item in items if item.type == "function_call"]


# --- Chat Completions ---------------------------------------------------------------------------

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": QUESTION}]}


def test_chat_filter_whole(filter_gw):
    sdk, seen = client(filter_gw)
    completion = sdk.chat.completions.create(**CHAT, tools=catalog())
    assert seen.header("x-toolsift") == "kept=5 total=80"
    tools = received_tools(completion.choices[0].message.content)
    assert len(tools) == 5 and WANT in tools


def test_chat_filter_stream(filter_gw):
    sdk, seen = client(filter_gw)
    with sdk.chat.completions.stream(**CHAT, tools=catalog()) as stream:
        completion = stream.get_final_completion()
    assert seen.header("x-toolsift") == "kept=5 total=80"
    assert WANT in received_tools(completion.choices[0].message.content)


@pytest.mark.parametrize("script", ["search", "text-first"])
@pytest.mark.parametrize("streamed", [False, True])
def test_chat_search(search_gw, streamed, script):
    sdk, seen = client(search_gw)
    args = dict(**CHAT, tools=catalog(), extra_headers=scripted(script))
    if streamed:
        with sdk.chat.completions.stream(**args, stream_options={"include_usage": True}) as stream:
            completion = stream.get_final_completion()
    else:
        completion = sdk.chat.completions.create(**args)
    assert seen.header("x-toolsift").endswith("search=search")
    message = completion.choices[0].message
    # Each call once, the meta-tool never.
    assert [call.function.name for call in message.tool_calls] == [WANT]
    assert completion.choices[0].finish_reason == "tool_calls"
    if script == "text-first":
        # Streamed, the first round's text went out before its find_tools call; the second
        # round's answer follows it.
        assert message.content.startswith("Let me look that up.")
    # The usage of both rounds.
    assert completion.usage.completion_tokens >= 20


# --- Responses ----------------------------------------------------------------------------------

RESPONSES = {"model": "gpt-5", "input": QUESTION}


def test_responses_filter_whole(filter_gw):
    sdk, seen = client(filter_gw)
    response = sdk.responses.create(**RESPONSES, tools=responses_tools())
    assert seen.header("x-toolsift") == "kept=5 total=80"
    assert WANT in received_tools(response.output_text)


def test_responses_filter_stream(filter_gw):
    sdk, seen = client(filter_gw)
    with sdk.responses.stream(**RESPONSES, tools=responses_tools()) as stream:
        response = stream.get_final_response()
    assert seen.header("x-toolsift") == "kept=5 total=80"
    assert WANT in received_tools(response.output_text)


def answer_call(sdk, response, call):
    """The client's next turn: the call's output, continuing the conversation stored under the
    id the client got. The provider must accept it (it checks that the call is in the
    conversation that id names)."""
    return sdk.responses.create(
        model="gpt-5",
        previous_response_id=response.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}],
        tools=responses_tools(),
        extra_headers=scripted("answer"),
    )


@pytest.mark.parametrize("script", ["search", "text-first"])
@pytest.mark.parametrize("streamed", [False, True])
def test_responses_search(search_gw, streamed, script):
    sdk, seen = client(search_gw)
    args = dict(**RESPONSES, tools=responses_tools(), extra_headers=scripted(script))
    if streamed:
        # Raises "Lifecycle response identity changed" if response.completed carries another
        # id than response.created.
        with sdk.responses.stream(**args) as stream:
            response = stream.get_final_response()
    else:
        response = sdk.responses.create(**args)
    assert seen.header("x-toolsift").endswith("search=search")
    assert call_names(response.output) == [WANT]
    if script == "text-first":
        assert response.output_text.startswith("Let me look that up.")
    [call] = [item for item in response.output if item.type == "function_call"]
    follow_up = answer_call(sdk, response, call)
    assert follow_up.status == "completed"
    assert follow_up.output_text
