//! The configuration's schema and the filter's parser agree: configurations generated from
//! `docs/config.schema.json` (valid ones, and valid ones with a single field broken) are
//! accepted by the filter exactly when the schema accepts them. "Accepted" is what Envoy's
//! `on_configure` does with one: `Config::from_json`, then a worker built from it (on the model
//! of Envoy) without an error.
//!
//! The generator walks the schema (types, enums, ranges, lengths, patterns, required keys),
//! drawing strings from a pool of the shapes the configuration's fields take, most of the time
//! within the field's own constraints and otherwise anywhere; the schema's validator, not the
//! generator, decides which configurations are valid. A disagreement is shrunk (members and
//! items taken out while it stays) and printed.
//!
//! A few rules JSON Schema cannot state (a regular expression's syntax, two fields compared,
//! names unique across items) are the parser's alone: `PARSER_ONLY` lists them, and a refusal
//! the schema did not foresee is a disagreement unless it is one of them.
//!
//! `CONFIG_CASES` sets the number of configurations of each kind (default 3,000).

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use toolsift::config::Config;
use toolsift::embeddings::MemoryBytes;
use toolsift::lifecycle::proxy_model::Envoy as Model;
use toolsift::lifecycle::worker::Shared;

use crate::common::repo;

fn cases() -> usize {
    std::env::var("CONFIG_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000)
}

/// The rules only the parser can check, each as the field its error names (`[*]`: any index)
/// and a part of its message: a regular expression's syntax (regex-lite's, which no JSON
/// Schema pattern can describe), names unique across items, one count at least another.
const PARSER_ONLY: &[(&str, &str)] = &[
    ("gating.rules[*].when.regex", ""),
    ("access.rules[*].name", "names another rule too"),
    ("access_shadow.rules[*].name", "names another rule too"),
    ("loop_guard.window", "must be from `repeats`"),
    ("auto_k.max_k", "must be at least `min_k`"),
    // A calibration's counts against each other and against the plugin's `max_k`.
    ("auto_k.calibration.max_k", "but `auto_k.max_k` is"),
    ("auto_k.calibration.pooled.slots[*]", "slots go from 1"),
    ("auto_k.calibration.catalogs[*].slots[*]", "slots go from 1"),
    ("auto_k.calibration.pooled.calls", "but its slots hold"),
    ("auto_k.calibration.catalogs[*].calls", "but its slots hold"),
    (
        "auto_k.calibration.pooled.calls",
        "fewer than its catalogs'",
    ),
    ("auto_k.calibration.catalogs[*].catalog", "is listed twice"),
    (
        "auto_k.calibration.transitions.catalogs[*].catalog",
        "is listed twice",
    ),
];

/// Strings of the shapes the configuration's fields take, valid for some field and not for
/// others: names, globs, paths, header names, JSONPaths, patterns, blanks.
const POOL: &[&str] = &[
    "",
    " ",
    "a",
    "find_tools",
    "search_tools",
    "use_tool",
    "get_*",
    "*",
    "*slack*",
    "bad name",
    "claude-*",
    "gpt-5",
    "advanced-tool-use-2025-11-20",
    "x-session-id",
    "X-Session-Id",
    "authorization",
    ":path",
    "embeddings",
    "text-embedding-3-small",
    "gating_mcp",
    "/mcp",
    "/v1/embeddings",
    "/v1/*",
    "mcp",
    "envoy.filters.http.jwt_authn",
    "groups",
    "realm_access.roles",
    "a..b",
    "tenant:",
    "sre",
    "rule.1",
    "destructiveHint",
    "readOnlyHint: false",
    "deploy",
    "roll back",
    "...",
    "^deploy",
    "(?i)refund",
    "(",
    "$.messages[-1].content",
    "$.tools",
    "$.tools[*].function",
    "$.input[*]",
    "$['x-tools']",
    "$..a",
    "$.a[1:2]",
    "$.a[*].b[*]",
    "tools",
    "name",
    "function.name",
    "['x-name']",
    "[*]",
    "{tool} is gone: answer with what you have",
    "query",
    "ask the platform team",
    "é",
    "\u{a0}",
    "\u{2003}x",
    "\u{feff}",
    "destructiveHint : true",
    "readOnlyHint:maybe",
    ".a",
    "a.",
    " . ",
    "$['a\\'b']",
    "$[\"x\"]",
    "$.a[01]",
    "$.tools.*",
    "$[-0]",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "x_session.id",
];

/// Keys of objects whose members the schema leaves open (tool definitions, `native_search`
/// tools, claimed calls' arguments).
const FREE_KEYS: &[&str] = &["name", "type", "source", "description", "city"];

/// A small seeded generator (xorshift64*): the same seed, the same configurations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// True with probability `percent` / 100.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The schema, its validator, and validators for single strings (a field's pattern and
/// lengths), compiled once each.
struct Schema {
    root: Value,
    validator: jsonschema::Validator,
    strings: std::cell::RefCell<BTreeMap<String, jsonschema::Validator>>,
}

impl Schema {
    fn load() -> Schema {
        let text = std::fs::read_to_string(repo().join("docs/config.schema.json")).unwrap();
        let root: Value = serde_json::from_str(&text).unwrap();
        let validator = jsonschema::validator_for(&root).unwrap();
        Schema {
            root,
            validator,
            strings: Default::default(),
        }
    }

    /// `schema` with `$ref`s followed.
    fn resolve<'a>(&'a self, mut schema: &'a Value) -> &'a Value {
        while let Some(name) = schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
        {
            schema = &self.root["$defs"][name];
        }
        schema
    }

    /// Whether `text` passes the string constraints of `schema` (pattern, lengths).
    fn string_fits(&self, schema: &Value, text: &str) -> bool {
        let mut only = Map::new();
        for key in ["pattern", "minLength", "maxLength", "not"] {
            if let Some(v) = schema.get(key) {
                only.insert(key.to_owned(), v.clone());
            }
        }
        if only.is_empty() {
            return true;
        }
        let key = Value::Object(only.clone()).to_string();
        let mut cache = self.strings.borrow_mut();
        let validator = cache
            .entry(key)
            .or_insert_with(|| jsonschema::validator_for(&Value::Object(only)).unwrap());
        validator.is_valid(&json!(text))
    }

    fn valid(&self, config: &Value) -> bool {
        self.validator.is_valid(config)
    }
}

/// What an object's rules ask of its keys (see [`Gen::keys_of_rules`]).
#[derive(Default)]
struct Keys {
    wanted: Vec<String>,
    unwanted: Vec<String>,
    implied: Vec<(String, Vec<String>)>,
}

/// The keys `schema` requires, its `allOf`'s included.
fn required(schema: &Value) -> Vec<String> {
    let mut keys: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    for part in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        keys.extend(required(part));
    }
    keys
}

/// The types a schema allows.
fn types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

struct Gen<'s> {
    schema: &'s Schema,
    rng: Rng,
    /// The field a configuration is about, as the keys on its path by depth (`""` at an
    /// array's level): always set, the others seldom, so that every section, and every field
    /// deep in one, gets configurations of its own (one valid section among many broken ones
    /// would be rare, and a field three optional levels down rarer still).
    focus: Vec<String>,
}

impl Gen<'_> {
    /// A value for `schema`, within its constraints most of the time.
    fn value(&mut self, schema: &Value, depth: usize) -> Value {
        let schema = self.schema.resolve(schema);
        if let Some(Value::Array(options)) = schema.get("anyOf").or(schema.get("oneOf")) {
            // `anyOf` with its sibling keywords (a description, a default): one branch.
            let option = self.rng.pick(options).clone();
            return self.value(&option, depth);
        }
        if let Some(Value::Array(values)) = schema.get("enum") {
            return if self.rng.chance(92) {
                self.rng.pick(values).clone()
            } else {
                json!("nonsense")
            };
        }
        if let Some(value) = schema.get("const") {
            return value.clone();
        }
        let kinds = types(schema);
        let kind = if kinds.is_empty() {
            "any"
        } else if kinds.contains(&"null") && kinds.len() > 1 && !self.rng.chance(15) {
            *kinds.iter().find(|k| **k != "null").unwrap()
        } else {
            *self.rng.pick(&kinds)
        };
        match kind {
            "null" => Value::Null,
            "boolean" => json!(self.rng.chance(50)),
            "integer" => self.integer(schema),
            "number" => self.number(schema),
            "string" => json!(self.string(schema)),
            "array" => self.array(schema, depth),
            "object" => self.object(schema, depth),
            _ => self.free(depth),
        }
    }

    /// A value for a field on the focus's path: of a branch other than `null` most of the
    /// time (a null section is valid whatever it would hold, so the valid configurations
    /// found first would seldom hold the focus).
    fn present(&mut self, schema: &Value, depth: usize) -> Value {
        let schema = self.schema.resolve(schema);
        if let Some(Value::Array(options)) = schema.get("anyOf").or(schema.get("oneOf")) {
            let present: Vec<Value> = options
                .iter()
                .filter(|o| types(self.schema.resolve(o)) != ["null"])
                .cloned()
                .collect();
            if !present.is_empty() && self.rng.chance(95) {
                let option = self.rng.pick(&present).clone();
                return self.value(&option, depth);
            }
        }
        self.value(schema, depth)
    }

    fn bound(schema: &Value, key: &str, default: f64) -> f64 {
        schema.get(key).and_then(Value::as_f64).unwrap_or(default)
    }

    fn integer(&mut self, schema: &Value) -> Value {
        let min = Self::bound(schema, "minimum", -5.0);
        let max = Self::bound(schema, "maximum", 1e12).min(1e12);
        let n: f64 = if self.rng.chance(95) {
            match self.rng.below(5) {
                0 => min,
                1 => max,
                2 => min + 1.0,
                // Spread over the orders of magnitude of the range.
                _ => {
                    let span = (max - min).max(0.0);
                    let scale = 10f64.powi(self.rng.below(13) as i32).min(span + 1.0);
                    (min + (self.rng.next() % (scale as u64).max(1)) as f64).min(max)
                }
            }
        } else {
            *self
                .rng
                .pick(&[min - 1.0, max + 1.0, 2.5, -1.0, 1e13, 4_294_967_296.0])
        };
        if n.fract() != 0.0 || self.rng.chance(40) {
            json!(n)
        } else {
            json!(n as i64)
        }
    }

    fn number(&mut self, schema: &Value) -> Value {
        // An exclusive bound is drawn like an inclusive one: the bound itself is then a
        // value just past the range, the midpoint and a quarter in are within.
        let min = Self::bound(
            schema,
            "minimum",
            Self::bound(schema, "exclusiveMinimum", -5.0),
        );
        let max = Self::bound(
            schema,
            "maximum",
            Self::bound(schema, "exclusiveMaximum", 1e6),
        );
        let n = if self.rng.chance(95) {
            *self
                .rng
                .pick(&[min, max, (min + max) / 2.0, min + 0.25, 1.0, 60.0])
        } else {
            *self.rng.pick(&[min - 0.5, max + 1.0, -1.0, 1e39])
        };
        json!(n)
    }

    fn string(&mut self, schema: &Value) -> String {
        let mut candidates: Vec<String> = POOL.iter().map(|s| (*s).to_owned()).collect();
        for key in ["default", "examples"] {
            match schema.get(key) {
                Some(Value::String(s)) => candidates.push(s.clone()),
                Some(Value::Array(items)) => {
                    candidates.extend(items.iter().filter_map(Value::as_str).map(str::to_owned))
                }
                _ => {}
            }
        }
        let fitting: Vec<String> = candidates
            .iter()
            .filter(|s| self.schema.string_fits(schema, s))
            .cloned()
            .collect();
        if !fitting.is_empty() && self.rng.chance(95) {
            self.rng.pick(&fitting).clone()
        } else {
            self.rng.pick(&candidates).clone()
        }
    }

    fn array(&mut self, schema: &Value, depth: usize) -> Value {
        // A tuple (`prefixItems`: a transition's `[earlier, next, count]`): each place its own.
        if let Some(Value::Array(places)) = schema.get("prefixItems") {
            let places = places.clone();
            return Value::Array(places.iter().map(|p| self.value(p, depth + 1)).collect());
        }
        // An array on the focus's path holds at least one item.
        let on_focus = self.focus.get(depth).is_some_and(String::is_empty);
        let min = Self::bound(schema, "minItems", if on_focus { 1.0 } else { 0.0 }) as usize;
        let len = if self.rng.chance(95) {
            min + self.rng.below(3)
        } else {
            self.rng.below(3)
        };
        let items = schema.get("items").cloned().unwrap_or(json!({}));
        Value::Array((0..len).map(|_| self.value(&items, depth + 1)).collect())
    }

    fn object(&mut self, schema: &Value, depth: usize) -> Value {
        let mut out = Map::new();
        let Keys {
            mut wanted,
            unwanted,
            implied,
        } = self.keys_of_rules(schema);
        wanted.extend(required(schema));
        if let Some(key) = self.focus.get(depth) {
            wanted.push(key.clone());
        }
        if let Some(Value::Object(properties)) = schema.get("properties") {
            let mut chosen: Vec<&String> = properties
                .keys()
                .filter(|key| {
                    let p = if depth == 0 { 15 } else { 45 };
                    // The focus's key is always there: a configuration without it, easier to
                    // draw valid, would otherwise be found first, and a deep field (a
                    // calibration's transitions) never reached.
                    self.focus.get(depth) == Some(*key)
                        || (wanted.contains(key) && self.rng.chance(95))
                        || (!unwanted.contains(key) && self.rng.chance(p))
                })
                .collect();
            // A rule's `then`: the keys a chosen key needs.
            for (when, then) in &implied {
                if chosen.contains(&when) && self.rng.chance(95) {
                    chosen.extend(properties.keys().filter(|k| then.contains(k)));
                }
            }
            for (key, property) in properties {
                if chosen.contains(&key) {
                    let value = if self.focus.get(depth) == Some(key) {
                        self.present(property, depth + 1)
                    } else {
                        self.value(property, depth + 1)
                    };
                    out.insert(key.clone(), value);
                }
            }
        }
        match schema.get("additionalProperties") {
            Some(Value::Object(_)) | None if schema.get("properties").is_none() => {
                let values = schema
                    .get("additionalProperties")
                    .cloned()
                    .unwrap_or(json!({}));
                let names = schema.get("propertyNames").cloned().unwrap_or(json!({}));
                for _ in 0..self.rng.below(3) {
                    let key = self.string(&names);
                    out.insert(key, self.value(&values, depth + 1));
                }
            }
            Some(Value::Bool(true)) => {
                for _ in 0..self.rng.below(3) {
                    let key = (*self.rng.pick(FREE_KEYS)).to_owned();
                    out.insert(key, self.free(depth + 1));
                }
            }
            _ => {}
        }
        Value::Object(out)
    }

    /// What the rules between an object's keys (its `allOf`) ask of which keys it has: keys
    /// to set (one branch of each `oneOf` and `anyOf`), keys to leave out (the other branches
    /// of a `oneOf`), and the keys a key needs (`if` it is set, `then` these).
    fn keys_of_rules(&mut self, schema: &Value) -> Keys {
        let mut keys = Keys::default();
        let Keys {
            wanted,
            unwanted,
            implied,
        } = &mut keys;
        for rule in schema
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for (key, exclusive) in [("oneOf", true), ("anyOf", false)] {
                if let Some(Value::Array(branches)) = rule.get(key) {
                    let pick = self.rng.below(branches.len());
                    for (i, branch) in branches.iter().enumerate() {
                        if i == pick {
                            wanted.extend(required(branch));
                        } else if exclusive {
                            unwanted.extend(required(branch));
                        }
                    }
                }
            }
            if let (Some(when), Some(then)) = (rule.get("if"), rule.get("then")) {
                for key in required(when) {
                    implied.push((key, required(then)));
                }
            }
        }
        unwanted.retain(|k| !wanted.contains(k));
        keys
    }

    /// Any JSON value (a member the schema leaves open).
    fn free(&mut self, depth: usize) -> Value {
        match self.rng.below(if depth > 4 { 4 } else { 6 }) {
            0 => Value::Null,
            1 => json!(self.rng.chance(50)),
            2 => json!(self.rng.below(100)),
            3 => json!(*self.rng.pick(POOL)),
            4 => json!([self.free(depth + 1)]),
            _ => json!({*self.rng.pick(FREE_KEYS): self.free(depth + 1)}),
        }
    }

    /// A configuration the schema accepts (after at most 1,000 tries: `None` past them).
    fn valid(&mut self) -> Option<Value> {
        let keys: Vec<String> = self.schema.root["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        // Half the time a top-level section, half the time any field of the schema.
        let field = if self.rng.chance(50) {
            self.rng.pick(&keys).clone()
        } else {
            let mut all = Vec::new();
            schema_fields(self.schema, &self.schema.root, "", 0, &mut all);
            self.rng.pick(&all).clone()
        };
        self.focus = field
            .split('.')
            .flat_map(|part| match part.strip_suffix("[*]") {
                Some(array) => vec![array.to_owned(), String::new()],
                None => vec![part.to_owned()],
            })
            .collect();
        (0..1_000).find_map(|_| {
            let config = self.value(&self.schema.root.clone(), 0);
            self.schema.valid(&config).then_some(config)
        })
    }

    /// `config` with one field broken: a value of another type, out of range or of another
    /// shape, an unknown member, a required one taken out, an array emptied.
    fn broken(&mut self, config: &Value) -> Value {
        let mut config = config.clone();
        let mut places = Vec::new();
        paths(&config, &mut Vec::new(), &mut places);
        let place = self.rng.pick(&places).clone();
        let target = pointer_mut(&mut config, &place);
        let replacement = match self.rng.below(7) {
            0 => json!("five"),
            1 => json!(2.5),
            2 => json!(-1),
            3 => json!({"unknown_field": 1}),
            4 => json!([]),
            5 => json!(*self.rng.pick(POOL)),
            _ => Value::Null,
        };
        match (target, self.rng.below(4)) {
            (Value::Object(map), 0) => {
                map.insert("unknown_field".into(), json!(1));
            }
            (Value::Object(map), 1) if !map.is_empty() => {
                let key = map.keys().nth(self.rng.below(map.len())).unwrap().clone();
                map.remove(&key);
            }
            // A section as an array of its values: serde's derive reads a struct that way.
            (target @ Value::Object(_), 2) => {
                let values = target.as_object().unwrap().values().cloned().collect();
                *target = Value::Array(values);
            }
            // A name as an object (`{"search": null}`): serde's derive reads an enum that way.
            (target @ Value::String(_), 3) => {
                let name = target.as_str().unwrap().to_owned();
                *target = json!({name: null});
            }
            (Value::Number(n), _) if self.rng.chance(50) => {
                let v = n.as_f64().unwrap_or(0.0);
                *pointer_mut(&mut config, &place) =
                    json!(
                        *self
                            .rng
                            .pick(&[v + 0.5, v - 1.0, v * 1000.0 + 1.0, -v - 1.0])
                    );
            }
            (target, _) => *target = replacement,
        }
        config
    }
}

/// One step of a path into a JSON value.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// Every place in `value` (the root too).
fn paths(value: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(at.clone());
    match value {
        Value::Object(map) => {
            for (key, member) in map {
                at.push(Step::Key(key.clone()));
                paths(member, at, out);
                at.pop();
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push(Step::Index(i));
                paths(item, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn pointer_mut<'a>(value: &'a mut Value, path: &[Step]) -> &'a mut Value {
    path.iter().fold(value, |v, step| match step {
        Step::Key(key) => &mut v[key.as_str()],
        Step::Index(i) => &mut v[*i],
    })
}

/// What the filter makes of a configuration: `Ok` when Envoy's `on_configure` would accept it,
/// or the parser's error.
fn filter_accepts(config: &Value) -> Result<(), String> {
    let parsed = Config::from_json(config.to_string().as_bytes()).map_err(|e| e.0)?;
    Shared::new(&Model::new("llm"), parsed, MemoryBytes::default(), 0)
        .map(drop)
        .map_err(|status| format!("the worker refused it: {status:?}"))
}

/// A field as its error names it, its indexes as `[*]`: `access.rules[2].name` →
/// `access.rules[*].name`.
fn field_shape(field: &str) -> String {
    let mut out = String::new();
    let mut in_index = false;
    for c in field.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[*]");
            }
            ']' => in_index = false,
            c if !in_index => out.push(c),
            _ => {}
        }
    }
    out
}

/// Whether a refusal is one of the rules only the parser can check.
fn parser_only(error: &str) -> bool {
    let Some(field) = error
        .split("field `")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
    else {
        return false;
    };
    let field = field_shape(field);
    PARSER_ONLY
        .iter()
        .any(|(shape, why)| field == *shape && error.contains(why))
}

/// Whether the schema and the filter disagree on `config`; the disagreement in words.
fn disagreement(schema: &Schema, config: &Value) -> Option<String> {
    let valid = schema.valid(config);
    match (valid, filter_accepts(config)) {
        (true, Ok(())) | (false, Err(_)) => None,
        (true, Err(e)) if parser_only(&e) => None,
        (true, Err(e)) => Some(format!("the schema accepts it, the filter refuses it: {e}")),
        (false, Ok(())) => {
            let why: Vec<String> = schema
                .validator
                .iter_errors(config)
                .map(|e| format!("{} at `{}`", e, e.instance_path()))
                .collect();
            Some(format!(
                "the filter accepts it, the schema refuses it: {}",
                why.join("; ")
            ))
        }
    }
}

/// `config` with members and items taken out while the disagreement stays.
fn shrink(schema: &Schema, mut config: Value) -> Value {
    let same_side = |config: &Value, valid: bool| {
        disagreement(schema, config).is_some() && schema.valid(config) == valid
    };
    let valid = schema.valid(&config);
    loop {
        let mut places = Vec::new();
        paths(&config, &mut Vec::new(), &mut places);
        let smaller = places.iter().filter(|p| !p.is_empty()).find_map(|place| {
            let mut candidate = config.clone();
            let (last, parent) = place.split_last()?;
            match (pointer_mut(&mut candidate, parent), last) {
                (Value::Object(map), Step::Key(key)) => {
                    map.remove(key);
                }
                (Value::Array(items), Step::Index(i)) => {
                    items.remove(*i);
                }
                _ => return None,
            }
            same_side(&candidate, valid).then_some(candidate)
        });
        match smaller {
            Some(candidate) => config = candidate,
            None => return config,
        }
    }
}

#[test]
fn the_filter_accepts_exactly_the_configurations_the_schema_accepts() {
    let schema = Schema::load();
    let mut generator = Gen {
        schema: &schema,
        rng: Rng(0x5eed_c0f1_9000_0048),
        focus: Vec::new(),
    };
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut found: BTreeMap<String, (String, Value)> = BTreeMap::new();
    for _ in 0..cases() {
        let Some(valid) = generator.valid() else {
            panic!("no valid configuration in 1,000 tries: the generator is off the schema");
        };
        let broken = generator.broken(&valid);
        for config in [valid, broken] {
            *seen
                .entry(if schema.valid(&config) {
                    "valid"
                } else {
                    "invalid"
                })
                .or_default() += 1;
            if let Some(why) = disagreement(&schema, &config) {
                let small = shrink(&schema, config);
                let why = disagreement(&schema, &small).unwrap_or(why);
                // One report per kind: the same words with other numbers are one.
                let kind: String = why.chars().filter(|c| !c.is_ascii_digit()).collect();
                found.entry(kind).or_insert((why, small));
            }
        }
    }
    let report: Vec<String> = found
        .values()
        .map(|(why, config)| format!("{config}\n    {why}"))
        .collect();
    assert!(
        report.is_empty(),
        "{} disagreements between docs/config.schema.json and the filter ({seen:?}):\n{}",
        report.len(),
        report.join("\n")
    );
    // Both kinds, in numbers.
    assert!(seen["valid"] >= cases(), "{seen:?}");
    assert!(seen["invalid"] >= cases() / 2, "{seen:?}");
}

/// Every field of the schema, as a path (`search.memory.ttl_seconds`, `access.rules[*].when`).
fn schema_fields(schema: &Schema, node: &Value, at: &str, depth: usize, out: &mut Vec<String>) {
    let node = schema.resolve(node);
    if depth > 8 {
        return;
    }
    for key in ["anyOf", "oneOf"] {
        for option in node
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            schema_fields(schema, option, at, depth + 1, out);
        }
    }
    if let Some(Value::Object(properties)) = node.get("properties") {
        for (key, property) in properties {
            let here = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            if !out.contains(&here) {
                out.push(here.clone());
            }
            schema_fields(schema, property, &here, depth + 1, out);
        }
    }
    if let Some(items) = node.get("items") {
        schema_fields(schema, items, &format!("{at}[*]"), depth + 1, out);
    }
}

/// The fields a configuration sets, as [`schema_fields`] writes them.
fn config_fields(config: &Value, at: &str, out: &mut std::collections::BTreeSet<String>) {
    match config {
        Value::Object(map) => {
            for (key, value) in map {
                let here = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                out.insert(here.clone());
                config_fields(value, &here, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                config_fields(item, &format!("{at}[*]"), out);
            }
        }
        _ => {}
    }
}

/// The generator reaches every field of the schema with a value the schema accepts, and its
/// broken configurations reach the parser's checks of many fields: the property above covers
/// the configuration, not a corner of it.
#[test]
fn the_generator_reaches_every_field() {
    let schema = Schema::load();
    let mut all = Vec::new();
    schema_fields(&schema, &schema.root, "", 0, &mut all);
    assert!(all.len() > 150, "{} fields", all.len());
    let mut generator = Gen {
        schema: &schema,
        rng: Rng(0x5eed_c0f1_9000_0048),
        focus: Vec::new(),
    };
    let mut reached = std::collections::BTreeSet::new();
    let mut refused = std::collections::BTreeSet::new();
    for _ in 0..cases() {
        let valid = generator.valid().unwrap();
        config_fields(&valid, "", &mut reached);
        if let Err(e) = filter_accepts(&generator.broken(&valid)) {
            let field = e.split("field `").nth(1).and_then(|r| r.split('`').next());
            refused.insert(field_shape(field.unwrap_or("(none)")));
        }
    }
    let missed: Vec<&String> = all.iter().filter(|f| !reached.contains(*f)).collect();
    assert!(
        missed.is_empty(),
        "fields no valid configuration set: {missed:#?}"
    );
    println!(
        "{} fields reached; refusals named {} fields",
        all.len(),
        refused.len()
    );
    assert!(refused.len() >= 100, "{refused:#?}");
}

/// The disagreements the generator found, each as a configuration and whether both must accept
/// it; then the rules only the parser checks, which the schema accepts.
#[test]
fn disagreements_found_stay_fixed() {
    let schema = Schema::load();
    let cases: &[(&str, bool)] = &[
        // Counts written as doubles, as Istio's pluginConfig hands them over (issue 48).
        (r#"{"loop_guard": {"repeats": 3.0, "window": 10.0}}"#, true),
        (
            r#"{"suggestions": {"k": 2.0, "tools": [{"name": "a"}]}}"#,
            true,
        ),
        (
            r#"{"suggestions": {"mcp": {"cluster": "s", "refresh_seconds": 60.0, "timeout_ms": 1e3}}}"#,
            true,
        ),
        (
            r#"{"access": {"unknown_paths": "deny", "unknown_paths_status": 403.0}}"#,
            true,
        ),
        // An optional count may be null.
        (r#"{"max_tool_tokens": null, "embeddings": null}"#, true),
        // Ranges the parser checked and the schema did not say.
        (r#"{"top_k": 0.0}"#, false),
        (r#"{"unknown_tools": {"max_rounds": 42}}"#, false),
        (r#"{"catalog_cache_bytes": 1000}"#, false),
        // Counts beyond what the filter holds.
        (r#"{"top_k": 7565801717}"#, false),
        (r#"{"min_score": 1e39}"#, false),
        // A section as an array (serde's positional form of a struct).
        (r#"{"search": []}"#, false),
        (r#"{"channel_weights": [1, 0.5, 0.25, 1]}"#, false),
        (r#"{"access": {"rules": [[["a"], ["x"]]]}}"#, false),
        // A name as an object (serde's map form of an enum).
        (r#"{"mode": {"search": null}}"#, false),
        (
            r#"{"auto_k": {"keep": 0.5, "beyond": {"find_tools": null}}, "shadow": {"sample": 1}}"#,
            false,
        ),
        (
            r#"{"auto_k": {"keep": 0.5, "beyond": "find_tools"}, "shadow": {"sample": 1}}"#,
            true,
        ),
        // Rules between fields.
        (r#"{"ranking": "hybrid"}"#, false),
        (r#"{"access": {"rules": [{"when": ["*"]}]}}"#, false),
        (
            r#"{"access": {}, "access_shadow": {"mode": "audit"}}"#,
            false,
        ),
        (r#"{"access": {"unknown_paths_status": 404}}"#, false),
        (
            r#"{"access": {"identity": [{"header": "x-groups", "claim": "groups"}]}}"#,
            false,
        ),
        (
            r#"{"search": {"memory": {"session": {"provider_fields": false}}}}"#,
            false,
        ),
        (
            r#"{"gating": {"rules": [{"when": {"words": ["deploy"]}}]}}"#,
            false,
        ),
        // Patterns: blank as Rust's trim sees it (U+FEFF is no space to it), header names,
        // claim paths, words, inline tools.
        (
            r#"{"embeddings": {"cluster": "\ufeff", "model": "m"}}"#,
            true,
        ),
        (
            r#"{"embeddings": {"cluster": "\u00a0", "model": "m"}}"#,
            false,
        ),
        (
            r#"{"embeddings": {"cluster": "e", "model": "m", "headers": {"bad header": "x"}}}"#,
            false,
        ),
        (
            r#"{"access": {"identity": [{"metadata": "m", "claim": "a..b"}]}}"#,
            false,
        ),
        (
            r#"{"gating": {"rules": [{"when": {"words": ["..."]}, "exclude": ["a"]}]}}"#,
            false,
        ),
        (
            r#"{"suggestions": {"tools": [{"name": "a", "source": null}]}}"#,
            false,
        ),
        // JSONPaths as the parser reads them.
        (
            r#"{"custom": {"paths": ["/x"], "tools_path": "$..tools", "query_path": "$.q"}}"#,
            false,
        ),
        (
            r#"{"custom": {"paths": ["/x"], "tools_path": "$.a[*].b[*]", "query_path": "$.q"}}"#,
            false,
        ),
        (
            r#"{"custom": {"paths": ["/x"], "tools_path": "$.t[99999999999999999999]", "query_path": "$.q"}}"#,
            true,
        ),
    ];
    for (text, valid) in cases {
        let config: Value = serde_json::from_str(text).unwrap();
        assert_eq!(schema.valid(&config), *valid, "the schema on {text}");
        assert_eq!(
            filter_accepts(&config).is_ok(),
            *valid,
            "the filter on {text}: {:?}",
            filter_accepts(&config)
        );
    }
    let parser_only_cases = [
        r#"{"gating": {"rules": [{"when": {"regex": "("}, "exclude": ["a"]}]}}"#,
        r#"{"access": {"rules": [{"name": "sre", "when": ["*"], "allow": ["a"]}, {"name": "sre", "when": ["*"], "deny": ["b"]}]}}"#,
        r#"{"access": {}, "access_shadow": {"rules": [{"name": "x", "when": ["*"], "allow": ["a"]}, {"name": "x", "when": ["*"], "deny": ["b"]}]}}"#,
        r#"{"loop_guard": {"repeats": 5, "window": 3}}"#,
        r#"{"shadow": {"sample": 0.1}, "auto_k": {"keep": 0.9, "min_k": 9, "max_k": 3}}"#,
    ];
    for text in parser_only_cases {
        let config: Value = serde_json::from_str(text).unwrap();
        assert!(schema.valid(&config), "the schema on {text}");
        let refused = filter_accepts(&config).unwrap_err();
        assert!(parser_only(&refused), "{text}: {refused}");
    }
}
