"""Envoy's /stats/prometheus text (standard input) read with prometheus_client's own parser,
written out as JSON: one object per sample, {"name", "labels", "value"}. tests/observability.rs
checks the dashboard's and the alert rules' expressions against it; a text the parser refuses
fails the test.

Counters are named as Envoy exposes them, which is how Prometheus stores them: the parser
appends `_total` to a counter's samples (its OpenMetrics form), and strips it from the
family's name when the exposed name had it. A counter is reported under its family's name, so
an exposed name ending in `_total` would be reported without it and a query of it would fail
here, on the safe side; the dashboard and rules query none.
"""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families

samples = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        name = family.name if family.type == "counter" else sample.name
        samples.append({"name": name, "labels": sample.labels, "value": sample.value})
json.dump(samples, sys.stdout)
