//! Just enough PromQL for what Prometheus cannot say of the dashboard: which selectors each
//! query reads, so that every toolsift series is selected by the plugin variable, and which
//! series a query that returns nothing must still find. A tokenizer that tells functions,
//! keywords and aggregation modifiers from metric names, and reads each selector's label
//! matchers, the labels grouped or matched on, and the labels `label_replace` makes. An
//! identifier it does not know as a function fails, as a misspelt function would in Prometheus.

use std::collections::BTreeSet;

/// The functions and aggregation operators the shipped expressions may use.
const FUNCTIONS: &[&str] = &[
    "abs",
    "absent",
    "avg",
    "avg_over_time",
    "ceil",
    "clamp_max",
    "clamp_min",
    "count",
    "delta",
    "deriv",
    "floor",
    "histogram_quantile",
    "increase",
    "irate",
    "label_replace",
    "max",
    "max_over_time",
    "min",
    "min_over_time",
    "rate",
    "round",
    "sum",
    "sum_over_time",
    "topk",
];

/// Binary set operators and modifiers: never metric names.
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset"];

/// Modifiers followed by a list of labels: grouping (`by`, `without`) or vector matching.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    Ident(String),
    Str(String),
    Number(f64),
    /// A range or subquery, `[5m]` or `[5m:]`.
    Range(String),
    /// `{…}`: the label matchers of a selector.
    Matchers(Vec<Matcher>),
    Op(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Matcher {
    pub label: String,
    /// `=`, `!=`, `=~` or `!~`.
    pub op: String,
    pub value: String,
}

/// A series selector: its metric name (none when `__name__` is matched instead) and matchers.
#[derive(Debug, Clone, PartialEq)]
pub struct Selector {
    pub name: Option<String>,
    pub matchers: Vec<Matcher>,
}

impl Selector {
    pub fn text(&self) -> String {
        let matchers: Vec<String> = self
            .matchers
            .iter()
            .map(|m| format!("{}{}{:?}", m.label, m.op, m.value))
            .collect();
        format!(
            "{}{{{}}}",
            self.name.as_deref().unwrap_or(""),
            matchers.join(", ")
        )
    }
}

/// What an expression reads.
#[derive(Debug, Default)]
pub struct Analysis {
    pub selectors: Vec<Selector>,
    /// Labels of `by (…)`, `on (…)`, `ignoring (…)`, `group_left (…)`, `group_right (…)`.
    pub grouping: BTreeSet<String>,
    /// Labels `label_replace` writes.
    pub made: BTreeSet<String>,
    pub functions: BTreeSet<String>,
}

pub fn tokenize(expr: &str) -> Vec<Token> {
    let chars: Vec<char> = expr.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || ".eE".contains(chars[i])) {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            tokens.push(Token::Number(
                text.parse()
                    .unwrap_or_else(|_| panic!("number {text} in {expr}")),
            ));
        } else if c == '"' {
            let (text, next) = string_at(&chars, i, expr);
            tokens.push(Token::Str(text));
            i = next;
        } else if c == '[' {
            let end = i + chars[i..]
                .iter()
                .position(|&c| c == ']')
                .unwrap_or_else(|| panic!("unclosed [ in {expr}"));
            let range: String = chars[i + 1..end].iter().collect();
            let duration = regex_lite::Regex::new(r"^\d+[smhdwy](:(\d+[smhdwy])?)?$").unwrap();
            assert!(duration.is_match(&range), "range [{range}] in {expr}");
            tokens.push(Token::Range(range));
            i = end + 1;
        } else if c == '{' {
            let (matchers, next) = matchers_at(&chars, i + 1, expr);
            tokens.push(Token::Matchers(matchers));
            i = next;
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let op = if ["==", "!=", ">=", "<="].contains(&two.as_str()) {
                two
            } else if "+-*/%^<>(),".contains(c) {
                c.to_string()
            } else {
                panic!("unexpected {c:?} in {expr}");
            };
            i += op.chars().count();
            tokens.push(Token::Op(op));
        }
    }
    tokens
}

/// The string literal opening at `chars[at]` (a `"`), unescaped, and the index after it.
fn string_at(chars: &[char], at: usize, expr: &str) -> (String, usize) {
    let mut text = String::new();
    let mut i = at + 1;
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\\' && i + 1 < chars.len() {
            i += 1;
        }
        text.push(chars[i]);
        i += 1;
    }
    assert!(i < chars.len(), "unclosed string in {expr}");
    (text, i + 1)
}

/// The matchers from `chars[at]` to the closing `}`, and the index after it.
fn matchers_at(chars: &[char], at: usize, expr: &str) -> (Vec<Matcher>, usize) {
    let mut matchers = Vec::new();
    let mut i = at;
    loop {
        while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
            i += 1;
        }
        assert!(i < chars.len(), "unclosed {{ in {expr}");
        if chars[i] == '}' {
            return (matchers, i + 1);
        }
        let start = i;
        while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        let label: String = chars[start..i].iter().collect();
        assert!(!label.is_empty(), "a matcher without a label in {expr}");
        while chars[i].is_whitespace() {
            i += 1;
        }
        let op_start = i;
        while "=!~".contains(chars[i]) {
            i += 1;
        }
        let op: String = chars[op_start..i].iter().collect();
        assert!(
            ["=", "!=", "=~", "!~"].contains(&op.as_str()),
            "matcher operator {op:?} in {expr}"
        );
        while chars[i].is_whitespace() {
            i += 1;
        }
        assert_eq!(chars[i], '"', "matcher value not a string in {expr}");
        let (value, next) = string_at(chars, i, expr);
        matchers.push(Matcher { label, op, value });
        i = next;
    }
}

/// What `expr` reads. Grafana's variables must have been substituted.
pub fn analyse(expr: &str) -> Analysis {
    // `$1` in `label_replace`'s replacement is PromQL's; `$name`, `${name}` are Grafana's.
    let variable = regex_lite::Regex::new(r"\$[A-Za-z_{]").unwrap();
    assert!(!variable.is_match(expr), "unsubstituted variable in {expr}");
    let tokens = tokenize(expr);
    let mut depth: i32 = 0;
    for token in &tokens {
        match token {
            Token::Op(o) if o == "(" => depth += 1,
            Token::Op(o) if o == ")" => depth -= 1,
            _ => {}
        }
        assert!(depth >= 0, "a ) before its ( in {expr}");
    }
    assert_eq!(depth, 0, "unbalanced parentheses in {expr}");
    let mut out = Analysis::default();
    let mut i = 0;
    while i < tokens.len() {
        // A function's arguments follow it, or an aggregation's `by (…)` comes first.
        let next_is_paren = match tokens.get(i + 1) {
            Some(Token::Op(o)) => o == "(",
            Some(Token::Ident(w)) => w == "by" || w == "without",
            _ => false,
        };
        match &tokens[i] {
            Token::Ident(word) if LABEL_LISTS.contains(&word.as_str()) => {
                i += 1;
                if !matches!(tokens.get(i), Some(Token::Op(o)) if o == "(") {
                    // `group_left` may stand without a list.
                    continue;
                }
                i += 1;
                while let Some(token) = tokens.get(i) {
                    i += 1;
                    match token {
                        Token::Ident(label) => {
                            if word != "without" {
                                out.grouping.insert(label.clone());
                            }
                        }
                        Token::Op(o) if o == "," => {}
                        Token::Op(o) if o == ")" => break,
                        other => panic!("{other:?} in the label list of {word} in {expr}"),
                    }
                }
                continue;
            }
            Token::Ident(word) if KEYWORDS.contains(&word.as_str()) => {}
            Token::Ident(word) if next_is_paren => {
                assert!(
                    FUNCTIONS.contains(&word.as_str()),
                    "unknown function {word} in {expr}"
                );
                out.functions.insert(word.clone());
                if word == "label_replace" {
                    out.made
                        .insert(label_replace_target(&tokens[i + 1..], expr));
                }
            }
            Token::Ident(word) => {
                let matchers = match tokens.get(i + 1) {
                    Some(Token::Matchers(m)) => {
                        i += 1;
                        m.clone()
                    }
                    _ => Vec::new(),
                };
                out.selectors.push(Selector {
                    name: Some(word.clone()),
                    matchers,
                });
            }
            Token::Matchers(matchers) => {
                assert!(
                    matchers.iter().any(|m| m.label == "__name__"),
                    "a selector without a metric name or __name__ in {expr}"
                );
                out.selectors.push(Selector {
                    name: None,
                    matchers: matchers.clone(),
                });
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The label `label_replace(v, "dst", …)` writes: its second argument. `tokens` start at its
/// opening parenthesis.
fn label_replace_target(tokens: &[Token], expr: &str) -> String {
    let mut depth = 0;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::Op(o) if o == "(" => depth += 1,
            Token::Op(o) if o == ")" => depth -= 1,
            Token::Op(o) if o == "," && depth == 1 => match tokens.get(i + 1) {
                Some(Token::Str(label)) => return label.clone(),
                other => panic!("label_replace's target label is {other:?} in {expr}"),
            },
            _ => {}
        }
    }
    panic!("label_replace without arguments in {expr}")
}
