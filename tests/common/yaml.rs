//! YAML as JSON: Kubernetes manifests and Envoy configurations read into `serde_json` values
//! (saphyr, the parser `toolsift check` uses).

use saphyr::{LoadableYamlNode, Scalar, Yaml};
use serde_json::{Value, json};

/// YAML (one document) as JSON; mapping keys must be strings.
pub fn to_json(node: &Yaml) -> Value {
    match node {
        Yaml::Value(Scalar::Null) => Value::Null,
        Yaml::Value(Scalar::Boolean(b)) => json!(b),
        Yaml::Value(Scalar::Integer(i)) => json!(i),
        Yaml::Value(Scalar::FloatingPoint(f)) => json!(f.into_inner()),
        Yaml::Value(Scalar::String(s)) => json!(s),
        Yaml::Sequence(items) => Value::Array(items.iter().map(to_json).collect()),
        Yaml::Mapping(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Yaml::Value(Scalar::String(s)) => s.to_string(),
                        other => panic!("a mapping key that is not a string: {other:?}"),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        other => panic!("unexpected YAML node {other:?}"),
    }
}

/// Every non-empty document of a YAML text, as JSON.
pub fn load_yaml(text: &str) -> Vec<Value> {
    Yaml::load_from_str(text)
        .unwrap()
        .iter()
        .map(to_json)
        .filter(|doc| !doc.is_null())
        .collect()
}

/// The documents of the YAML file at `path` (relative to the repository).
pub fn load_file(path: &str) -> Vec<Value> {
    let path = super::repo().join(path);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    load_yaml(&text)
}
