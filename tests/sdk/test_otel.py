"""OpenTelemetry: the shipped docs/examples/envoy-otel.yaml, its Envoy sending each request's
access log as an OTLP log record over gRPC to a real OTLP receiver started here (`grpcio` and
`opentelemetry-proto`'s `LogsService`), the requests made by the official SDKs. Each record's
attributes are checked against the request it came from and what its answer's `x-toolsift`
said: filter mode in four dialects, a refusal, a shadowed request, search mode, a loop and a
made-up tool."""

import json
import os
import subprocess
import threading
import time
from concurrent import futures

import anthropic
import grpc
import openai
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

import conftest
import test_anthropic
import test_bedrock
import test_genai
from conftest import QUESTION, WANT, Gateway, catalog, scripted

SOURCE = "docs/examples/envoy-otel.yaml"
COLLECTOR_PORT = 4317
DENIED = "delete_file"
ACCESS = {"access": {"identity": [{"header": "x-group"}], "default": "allow",
                     "rules": [{"when": ["*"], "deny": ["*delete*"]}]}}


class Receiver(logs_service_pb2_grpc.LogsServiceServicer):
    """An OTLP/gRPC logs receiver: every log record Envoy exports, in order, as
    (body, {attribute: value})."""

    def __init__(self):
        self.records = []
        # Each export as the OpenTelemetry Collector's file exporter writes it: one line of
        # OTLP JSON (protobuf's JSON mapping), for `toolsift calibrate`.
        self.lines = []
        self.changed = threading.Condition()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def Export(self, request, context):
        with self.changed:
            self.lines.append(json_format.MessageToJson(request, indent=None))
            for resource in request.resource_logs:
                for scope in resource.scope_logs:
                    for record in scope.log_records:
                        attributes = {a.key: a.value.string_value for a in record.attributes}
                        self.records.append((record.body.string_value, attributes))
            self.changed.notify_all()
        return logs_service_pb2.ExportLogsServiceResponse()

    def next(self, seen, timeout=15):
        """The first record after the `seen` first ones, once Envoy has sent it."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while len(self.records) <= seen:
                left = deadline - time.monotonic()
                assert left > 0, f"no OTLP record after {seen}: {self.records}"
                self.changed.wait(left)
            return self.records[seen]


@pytest.fixture(scope="module")
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.server.stop(0)


class OtelGateway(Gateway):
    """envoy-otel.yaml's gateway, its collector the test's receiver; `exchange` makes one
    request and returns its record."""

    def __init__(self, config, scratch, receiver):
        super().__init__(config, scratch, source=SOURCE, ports={COLLECTOR_PORT: receiver.port})
        self.receiver = receiver

    def exchange(self, call):
        seen = len(self.receiver.records)
        result = call()
        return result, self.receiver.next(seen)


def gateway(config, tmp_path_factory, receiver, name):
    # The shipped plugin configuration has `gen_ai: true`; the tests' replace it whole.
    return OtelGateway({"top_k": 5, "min_tools": 20, "gen_ai": True, **config},
                       tmp_path_factory.mktemp(name), receiver)


@pytest.fixture(scope="module")
def filter_otel(tmp_path_factory, receiver):
    gw = gateway({**ACCESS, "loop_guard": {}}, tmp_path_factory, receiver, "otel-filter")
    yield gw
    gw.close()


def said(headers):
    return headers["x-toolsift"]


def assert_decision(attributes, header):
    """The `toolsift.*` attributes say what `x-toolsift` said."""
    fields = dict(item.split("=", 1) for item in header.split(" "))
    assert attributes["toolsift.tools.kept"] == fields["kept"]
    assert attributes["toolsift.tools.received"] == fields["total"]
    assert attributes["toolsift.tools.denied"] == fields.get("denied", "-")


def test_filter_mode_and_a_refused_call(filter_otel):
    # The model calls a tool the caller may not use beside one it may: the call is refused.
    headers = {"x-group": "dev", "x-demo-model": "scripted", "x-demo-want": WANT,
               "x-demo-call": f"{DENIED},{WANT}"}
    sdk, seen = conftest.openai_client(filter_otel, headers)
    messages = [{"role": "user", "content": QUESTION}]
    completion, (body, attributes) = filter_otel.exchange(
        lambda: sdk.chat.completions.create(model="gpt-4o", messages=messages, tools=catalog()))
    assert [call.function.name for call in completion.choices[0].message.tool_calls] == [WANT]
    header = said(seen.headers)
    assert body.startswith(header + " tokens="), (body, header)
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "gpt-4o"
    assert attributes["toolsift.outcome"] == "filtered"
    assert_decision(attributes, header)
    before, after = int(attributes["toolsift.tokens.before"]), int(attributes["toolsift.tokens.after"])
    assert before > after > 0, attributes
    verdicts = attributes["toolsift.access.verdicts"].split(",")
    assert f"deny:call:default:{DENIED}" in verdicts or any(
        v.startswith("deny:call:") and v.endswith(f":{DENIED}") for v in verdicts), verdicts
    assert any(v.startswith("deny:tools:") for v in verdicts), verdicts
    assert attributes["http.response.status_code"] == "200"
    assert attributes["url.path"] == "/v1/chat/completions"
    for unset in ("toolsift.shadow.calls", "toolsift.loop", "toolsift.unknown_tools", "toolsift.search"):
        assert attributes[unset] == "-", (unset, attributes)


def test_a_request_refused_whole(filter_otel):
    # Every tool the request carries is one the caller may not see.
    only_denied = [t for t in catalog() if "delete" in t["function"]["name"]]
    assert only_denied
    sdk, seen = conftest.openai_client(filter_otel, {"x-group": "dev"})

    def refused():
        with pytest.raises(openai.APIStatusError) as error:
            sdk.chat.completions.create(model="gpt-4o-mini", tools=only_denied,
                                        messages=[{"role": "user", "content": QUESTION}])
        return error.value

    error, (body, attributes) = filter_otel.exchange(refused)
    assert error.status_code == 403
    assert attributes["toolsift.outcome"] == "refused", (body, attributes)
    assert attributes["http.response.status_code"] == "403"
    assert attributes["gen_ai.request.model"] == "gpt-4o-mini"
    assert "deny:request:" in attributes["toolsift.access.verdicts"] or attributes[
        "toolsift.tools.denied"] == str(len(only_denied)), attributes


def test_each_dialect_names_its_provider_operation_and_model(filter_otel):
    caller = {"x-group": "dev"}
    claude = anthropic.Anthropic(api_key="sk-ant-test", base_url=filter_otel.url, max_retries=0,
                                 default_headers=caller)
    _, (_, attributes) = filter_otel.exchange(lambda: claude.messages.create(
        **test_anthropic.MESSAGE, tools=test_anthropic.tools()))
    assert (attributes["gen_ai.provider.name"], attributes["gen_ai.operation.name"],
            attributes["gen_ai.request.model"]) == ("anthropic", "chat", "claude-opus-4-7")
    assert attributes["toolsift.outcome"] == "filtered"

    gemini = test_genai.client(filter_otel, caller)
    _, (_, attributes) = filter_otel.exchange(lambda: gemini.models.generate_content(
        model=test_genai.MODEL, contents=QUESTION, config=test_genai.config()))
    assert (attributes["gen_ai.provider.name"], attributes["gen_ai.operation.name"],
            attributes["gen_ai.request.model"]) == ("gcp.gemini", "generate_content", test_genai.MODEL)

    bedrock = test_bedrock.client(filter_otel, signed=False, headers=caller)
    _, (_, attributes) = filter_otel.exchange(lambda: bedrock.converse(**test_bedrock.request()))
    # The SDK percent-encodes the id in the path (`%3A`); the attribute is the id.
    assert (attributes["gen_ai.provider.name"], attributes["gen_ai.operation.name"],
            attributes["gen_ai.request.model"]) == ("aws.bedrock", "chat", test_bedrock.MODEL)
    assert ":" in test_bedrock.MODEL


def test_a_loop_and_a_made_up_tool(filter_otel):
    sdk, seen = conftest.openai_client(filter_otel, {"x-group": "dev"})

    def call(name, id):
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": name, "arguments": '{"city":"Paris"}'}}]}

    def result(id):
        return {"role": "tool", "tool_call_id": id, "content": "sunny"}

    looping = [{"role": "user", "content": QUESTION}, call(WANT, "c1"), result("c1"),
               call(WANT, "c2"), result("c2")]
    _, (_, attributes) = filter_otel.exchange(
        lambda: sdk.chat.completions.create(model="gpt-4o", messages=looping, tools=catalog()))
    assert attributes["toolsift.loop"] == f"evicted:{WANT}", attributes
    assert "loop=" in said(seen.headers)

    made_up = [{"role": "user", "content": QUESTION}, call("get_weather_now", "c1"), result("c1")]
    _, (_, attributes) = filter_otel.exchange(
        lambda: sdk.chat.completions.create(model="gpt-4o", messages=made_up, tools=catalog()))
    assert attributes["toolsift.unknown_tools"] == "get_weather_now", attributes


def test_a_shadowed_request(tmp_path_factory, receiver):
    gw = gateway({"shadow": {"sample": 1}}, tmp_path_factory, receiver, "otel-shadow")
    try:
        sdk, seen = conftest.openai_client(gw, {"x-demo-model": "scripted", "x-demo-want": WANT,
                                                "x-demo-call": WANT})
        completion, (body, attributes) = gw.exchange(lambda: sdk.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": QUESTION}], tools=catalog()))
        assert completion.choices[0].message.tool_calls[0].function.name == WANT
        # Shadowed: every tool went to the model, and the call's rank is measured.
        assert attributes["toolsift.tools.received"] == "80"
        calls = attributes["toolsift.shadow.calls"]
        assert calls.startswith(f"{WANT}@"), (body, attributes)
        rank = int(calls.split("@")[1])
        assert attributes["toolsift.shadow.missed"] == ("0" if rank <= 5 else "1")
        assert attributes["toolsift.shadow.top_k"] == "5"
        # `toolsift calibrate` reads the records as the Collector's file exporter writes them.
        exported = tmp_path_factory.mktemp("otel-calibrate") / "otlp.jsonl"
        exported.write_text("\n".join(receiver.lines) + "\n")
        binary = conftest.REPO / os.environ.get("TOOLSIFT_BIN_DIR", "target/release") / "toolsift"
        run = subprocess.run([binary, "calibrate", "--max-k", "64", exported],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        calibration = json.loads(run.stdout)
        assert calibration["pooled"] == {"calls": 1, "slots": [[rank, 1]]}, calibration
        assert calibration["from"]["shadowed"] == 1, calibration
        assert calibration["catalogs"][0]["catalog"] == body.split("catalog=")[1].split(" ")[0]
    finally:
        gw.close()


def test_search_mode(tmp_path_factory, receiver):
    gw = gateway({"mode": "search"}, tmp_path_factory, receiver, "otel-search")
    try:
        sdk, seen = conftest.openai_client(gw, scripted())
        completion, (body, attributes) = gw.exchange(lambda: sdk.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": QUESTION}], tools=catalog()))
        assert [c.function.name for c in completion.choices[0].message.tool_calls] == [WANT]
        assert attributes["toolsift.outcome"] == "search=search", (body, attributes)
        # Search mode's loop as it ended: its rounds and what `find_tools` found.
        search = dict(item.split("=", 1) for item in attributes["toolsift.search"].split(" "))
        assert search["rounds"] == "1" and WANT in search["found"].split(","), attributes
        assert attributes["gen_ai.request.model"] == "gpt-4o"
    finally:
        gw.close()
