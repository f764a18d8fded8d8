"""Access rules judged by the official SDKs: the model calls a tool its caller may not use
(the demo upstream's scripted model, `x-demo-call`), and what reaches the client is a text
answer in the dialect's own shape, which each SDK's parser and stream accumulator must accept:
no call of the denied tool, and the other call kept beside it.

The caller's identity is a header here (`x-group`); tests/access.rs runs Envoy's jwt_authn."""

import anthropic
import boto3
import openai
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from google import genai
from google.genai import types

import conftest
from conftest import QUESTION, Gateway, catalog, functions

DENIED = "delete_file"
ALLOWED = "get_current_weather"
ACCESS = {
    "debug": True,
    "access": {
        "identity": [{"header": "x-group"}],
        "default": "allow",
        "rules": [{"when": ["*"], "deny": ["*delete*"]}],
    },
}
CALLER = {"x-group": "dev", "x-demo-model": "scripted", "x-demo-want": ALLOWED,
          "x-demo-call": f"{DENIED},{ALLOWED}"}


@pytest.fixture(scope="module")
def access_gw(tmp_path_factory):
    gateway = Gateway(ACCESS, tmp_path_factory.mktemp("access"))
    yield gateway
    gateway.close()


def openai_client(gw):
    return conftest.openai_client(gw, CALLER)


def assert_refused(text):
    assert f"`{DENIED}`" in text and "not available" in text, text


@pytest.mark.parametrize("streamed", [False, True])
def test_chat(access_gw, streamed):
    sdk, seen = openai_client(access_gw)
    args = dict(model="gpt-4o", messages=[{"role": "user", "content": QUESTION}], tools=catalog())
    if streamed:
        with sdk.chat.completions.stream(**args) as stream:
            completion = stream.get_final_completion()
    else:
        completion = sdk.chat.completions.create(**args)
    message = completion.choices[0].message
    assert [call.function.name for call in message.tool_calls] == [ALLOWED]
    assert_refused(message.content)
    assert "denied=1" in seen.header("x-toolsift")


@pytest.mark.parametrize("streamed", [False, True])
def test_responses(access_gw, streamed):
    sdk, _ = openai_client(access_gw)
    tools = [{"type": "function", **f} for f in functions()]
    args = dict(model="gpt-5", input=QUESTION, tools=tools)
    if streamed:
        # The SDK rebuilds the output from the events: items, output_index and sequence_number
        # must stay consistent with the refusal's message item put in.
        with sdk.responses.stream(**args) as stream:
            response = stream.get_final_response()
    else:
        response = sdk.responses.create(**args)
    calls = [item.name for item in response.output if item.type == "function_call"]
    assert calls == [ALLOWED]
    assert_refused(response.output_text)


@pytest.mark.parametrize("streamed", [False, True])
def test_anthropic(access_gw, streamed):
    sdk = anthropic.Anthropic(api_key="sk-ant-test", base_url=access_gw.url, max_retries=0,
                              timeout=60, default_headers=CALLER)
    tools = [{"name": f["name"], "description": f.get("description", ""),
              "input_schema": f.get("parameters", {"type": "object"})} for f in functions()]
    args = dict(model="claude-opus-4-7", max_tokens=512, tools=tools,
                messages=[{"role": "user", "content": QUESTION}])
    if streamed:
        with sdk.messages.stream(**args) as stream:
            message = stream.get_final_message()
    else:
        message = sdk.messages.create(**args)
    assert [b.name for b in message.content if b.type == "tool_use"] == [ALLOWED]
    assert_refused("".join(b.text for b in message.content if b.type == "text"))


@pytest.mark.parametrize("streamed", [False, True])
def test_gemini(access_gw, streamed):
    sdk = genai.Client(api_key="gemini-test", http_options=types.HttpOptions(
        base_url=access_gw.url, headers=CALLER, timeout=60_000,
        retry_options=types.HttpRetryOptions(attempts=1)))
    declarations = [types.FunctionDeclaration(
        name=f["name"], description=f.get("description", ""),
        parameters_json_schema=f.get("parameters", {"type": "object"})) for f in functions()]
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=declarations)],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    args = dict(model="gemini-2.5-flash", contents=QUESTION, config=config)
    if streamed:
        chunks = list(sdk.models.generate_content_stream(**args))
        parts = [p for c in chunks for p in c.candidates[0].content.parts]
    else:
        parts = sdk.models.generate_content(**args).candidates[0].content.parts
    assert [p.function_call.name for p in parts if p.function_call] == [ALLOWED]
    assert_refused("".join(p.text for p in parts if p.text))


@pytest.mark.parametrize("streamed", [False, True])
def test_bedrock(access_gw, streamed):
    """boto3's converse and converse_stream (unsigned: the route would sign). The stream's
    messages are read by botocore's event-stream parser, which checks both CRCs of each: the
    messages toolsift wrote again must be valid."""
    sdk = boto3.client("bedrock-runtime", endpoint_url=access_gw.url, region_name="us-east-1",
                       aws_access_key_id="AKIDTEST", aws_secret_access_key="secret",
                       config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1},
                                     read_timeout=60))
    sdk.meta.events.register("before-send.bedrock-runtime.*",
                             lambda request, **_: request.headers.update(CALLER))
    tools = [{"toolSpec": {"name": f["name"], "description": f.get("description") or f["name"],
                           "inputSchema": {"json": f.get("parameters", {"type": "object"})}}}
             for f in functions()]
    args = dict(modelId="anthropic.claude-3-5-sonnet-20240620-v1:0",
                messages=[{"role": "user", "content": [{"text": QUESTION}]}],
                toolConfig={"tools": tools})
    if streamed:
        events = list(sdk.converse_stream(**args)["stream"])
        assert "messageStart" in events[0] and "metadata" in events[-1], events
        starts = [e["contentBlockStart"]["start"] for e in events if "contentBlockStart" in e]
        calls = [s["toolUse"]["name"] for s in starts if "toolUse" in s]
        text = "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events
                       if "contentBlockDelta" in e)
        stop = [e["messageStop"]["stopReason"] for e in events if "messageStop" in e]
        assert stop == ["tool_use"], events
    else:
        response = sdk.converse(**args)
        content = response["output"]["message"]["content"]
        calls = [block["toolUse"]["name"] for block in content if "toolUse" in block]
        text = "".join(block.get("text", "") for block in content)
    assert calls == [ALLOWED]
    assert_refused(text)
