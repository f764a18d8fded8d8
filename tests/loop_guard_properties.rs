//! The loop guard's key for call arguments, as a property: the same arguments written
//! differently (key order, whitespace, `1` / `1.0` / `1e0`) are one key; different arguments
//! never are.

use proptest::prelude::*;
use serde_json::{Map, Number, Value};
use toolsift::loop_guard::arguments_key;

/// JSON values whose numbers are integers or non-integral binary fractions: two such values
/// are equal as `Value`s exactly when they mean the same.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-1000i64..1000).prop_map(Value::from),
        (-1000i64..1000).prop_map(|n| Value::Number(Number::from_f64(n as f64 + 0.25).unwrap())),
        "[a-z é\"\\\\]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-d]{1,2}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// `value` written by another writer: `choices` picks key order, spacing and number forms.
fn write(value: &Value, choices: &mut impl Iterator<Item = u8>, out: &mut String) {
    fn pick(choices: &mut impl Iterator<Item = u8>, n: u8) -> u8 {
        choices.next().unwrap_or(0) % n
    }
    let space = |out: &mut String, c: u8| out.push_str(["", " ", "\n  ", "\t"][c as usize]);
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            if pick(choices, 2) == 1 {
                members.reverse();
            }
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                space(out, pick(choices, 4));
                out.push_str(&Value::String(k.clone()).to_string());
                space(out, pick(choices, 4));
                out.push(':');
                write(v, choices, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    space(out, pick(choices, 4));
                }
                write(v, choices, out);
            }
            out.push(']');
        }
        Value::Number(n) if n.is_i64() => {
            let i = n.as_i64().unwrap();
            match pick(choices, 3) {
                0 => out.push_str(&i.to_string()),
                1 => out.push_str(&format!("{i}.0")),
                _ => out.push_str(&format!("{i}e0")),
            }
        }
        other => out.push_str(&other.to_string()),
    }
}

fn written(value: &Value, seed: &[u8]) -> String {
    let mut out = String::new();
    let mut choices = seed.iter().copied().cycle();
    write(value, &mut choices, &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn one_meaning_one_key(v in value(), a in prop::collection::vec(any::<u8>(), 1..16),
                           b in prop::collection::vec(any::<u8>(), 1..16)) {
        let (x, y) = (written(&v, &a), written(&v, &b));
        prop_assert_eq!(arguments_key(&x), arguments_key(&y), "{} / {}", x, y);
        prop_assert_eq!(arguments_key(&x), arguments_key(&v.to_string()));
    }

    #[test]
    fn different_arguments_never_share_a_key(v in value(), w in value(),
                                             a in prop::collection::vec(any::<u8>(), 1..16)) {
        prop_assume!(v != w);
        prop_assert_ne!(arguments_key(&written(&v, &a)), arguments_key(&w.to_string()));
    }
}
