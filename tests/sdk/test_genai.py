"""The official `google-genai` SDK (Gemini API) through the gateway, in filter and search mode,
whole (`generate_content`) and streamed (`generate_content_stream`, which reads `?alt=sse`)."""

import pytest
from google import genai
from google.genai import types

from conftest import QUESTION, WANT, functions, received_tools, scripted

MODEL = "gemini-2.5-flash"


def client(gw, headers=None):
    # Keep the client referenced while it is used: it closes its HTTP client when collected.
    return genai.Client(api_key="gemini-test", http_options=types.HttpOptions(
        base_url=gw.url, headers=headers or {}, timeout=60_000,
        retry_options=types.HttpRetryOptions(attempts=1)))


def config():
    declarations = [types.FunctionDeclaration(
        name=f["name"], description=f.get("description", ""),
        parameters_json_schema=f.get("parameters", {"type": "object"})) for f in functions()]
    # The SDK would otherwise call the functions itself (automatic function calling).
    return types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=declarations)],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))


def test_filter_whole(filter_gw):
    sdk = client(filter_gw)
    response = sdk.models.generate_content(model=MODEL, contents=QUESTION, config=config())
    assert response.sdk_http_response.headers["x-toolsift"] == "kept=5 total=80"
    assert WANT in received_tools(response.text)


def test_filter_stream(filter_gw):
    sdk = client(filter_gw)
    chunks = list(sdk.models.generate_content_stream(model=MODEL, contents=QUESTION, config=config()))
    assert chunks[0].sdk_http_response.headers["x-toolsift"] == "kept=5 total=80"
    text = "".join(chunk.text or "" for chunk in chunks)
    assert WANT in received_tools(text)
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP


@pytest.mark.parametrize("script", ["search", "text-first"])
@pytest.mark.parametrize("streamed", [False, True])
def test_search(search_gw, streamed, script):
    sdk = client(search_gw, scripted(script))
    if streamed:
        chunks = list(sdk.models.generate_content_stream(model=MODEL, contents=QUESTION, config=config()))
    else:
        chunks = [sdk.models.generate_content(model=MODEL, contents=QUESTION, config=config())]
    assert chunks[0].sdk_http_response.headers["x-toolsift"].endswith("search=search")
    calls = [call.name for chunk in chunks for call in chunk.function_calls or []]
    assert calls == [WANT]
    if script == "text-first":
        text = "".join(part.text for chunk in chunks for part in chunk.candidates[0].content.parts
                       if part.text)
        assert text.startswith("Let me look that up.")
    # The usage of both rounds, on the last chunk.
    assert chunks[-1].usage_metadata.candidates_token_count >= 20
