//! The library's layering: which top-level modules of `src/` (a file or a folder) import which,
//! read from the source as the compiler would walk it (from `src/lib.rs` through its `mod`
//! declarations), with test-only code (`#[cfg(test)]` items and the files they load),
//! comments and string literals left out. An import is a path through `crate::` (`use
//! crate::rank::Catalog;`, `crate::text::terms(…)`, `use crate::{a, b};`).
//!
//! The modules of [`LAYERED`] are part of no import circle, and no circle appears beyond the
//! known ones of [`KNOWN_CIRCLES`]. `cargo test --test integration layers:: -- --nocapture` prints the graph
//! and its circles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules that must be part of no import circle: the core, from the request's bytes to the
/// rewritten ones, and what it stands on.
const LAYERED: &[&str] = &[
    "access",
    "config",
    "custom",
    "dialects",
    "followup",
    "fusion",
    "gating",
    "glob",
    "index",
    "json",
    "lifecycle",
    "loop_guard",
    "metadata",
    "offline",
    "pairs",
    "pipeline",
    "rank",
    "rewrite",
    "select",
    "shadow",
    "sse",
    "text",
    "weak_query",
];

/// The circles allowed elsewhere: each circle found must lie within one of these (a circle that
/// grows, or a new one, fails). None today: every module's imports point one way.
const KNOWN_CIRCLES: &[&[&str]] = &[];

/// One token of Rust source, as far as imports need: identifiers (keywords included) and
/// single punctuation characters (`::` is two `:`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Punct(char),
    /// A string, character or number literal (its text is never needed).
    Literal(String),
}

/// The tokens of `source`, without comments (doc comments too), with literals' contents kept
/// apart so a path written in a string is no import.
fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(end) = raw_string_end(&chars, i) {
            out.push(Token::Literal(chars[i..end].iter().collect()));
            i = end;
        } else if c == '"' || (c == 'b' && at(i + 1) == '"') || (c == 'c' && at(i + 1) == '"') {
            let start = i;
            i += if c == '"' { 1 } else { 2 };
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Token::Literal(
                chars[start..i.min(chars.len())].iter().collect(),
            ));
        } else if c == '\'' || (c == 'b' && at(i + 1) == '\'') {
            // A character literal ('a', '\n', '\u{1F600}', b'x'), or a lifetime ('a).
            let q = if c == '\'' { i } else { i + 1 };
            if at(q + 1) == '\\' {
                let mut j = q + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                out.push(Token::Literal(
                    chars[i..=j.min(chars.len() - 1)].iter().collect(),
                ));
                i = j + 1;
            } else if at(q + 2) == '\'' {
                out.push(Token::Literal(chars[i..q + 3].iter().collect()));
                i = q + 3;
            } else {
                // A lifetime: its name follows as an identifier.
                out.push(Token::Punct('\''));
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Literal(chars[start..i].iter().collect()));
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// Where the raw string (`r"…"`, `r#"…"#`, `br"…"`, `cr#"…"#`) starting at `i` ends, if one does.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    // Not the tail of an identifier (`for"` is no raw string, nor is `bar#"`).
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if matches!(chars.get(j), Some('b' | 'c')) {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    loop {
        if j >= chars.len() {
            return Some(chars.len());
        }
        if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t {
        Some(Token::Ident(s)) => Some(s),
        _ => None,
    }
}

fn is_punct(t: Option<&Token>, c: char) -> bool {
    t == Some(&Token::Punct(c))
}

/// The index just past the token group that opens at `i` (`(`, `[` or `{`).
fn group_end(tokens: &[Token], i: usize) -> usize {
    let mut depth = 0i32;
    let mut j = i;
    while j < tokens.len() {
        match &tokens[j] {
            Token::Punct('(' | '[' | '{') => depth += 1,
            Token::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    tokens.len()
}

/// The index just past the item that starts at `i` (attributes already taken): up to its `;`,
/// or its body's `}` (and a `;` right after it).
fn item_end(tokens: &[Token], mut i: usize) -> usize {
    while i < tokens.len() {
        match &tokens[i] {
            Token::Punct(';') => return i + 1,
            Token::Punct('{') => {
                let end = group_end(tokens, i);
                return if is_punct(tokens.get(end), ';') {
                    end + 1
                } else {
                    end
                };
            }
            Token::Punct('(' | '[') => i = group_end(tokens, i),
            _ => i += 1,
        }
    }
    tokens.len()
}

/// What one file holds for the layering: the tokens outside `#[cfg(test)]` items, and its
/// `mod name;` declarations (with a `#[path]` if any) outside them.
struct Parsed {
    code: Vec<Token>,
    modules: Vec<(String, Option<String>)>,
    /// The `mod name;` declared under `#[cfg(test)]`.
    test_modules: Vec<(String, Option<String>)>,
    /// A macro declares modules (`$(pub mod $module;)+`): every file and folder beside the
    /// children that is no test module is one.
    by_macro: bool,
}

fn parse(source: &str) -> Parsed {
    let all = tokens(source);
    let mut code = Vec::new();
    let mut modules = Vec::new();
    let mut test_modules = Vec::new();
    let mut by_macro = false;
    let mut i = 0;
    // Attributes read since the last item began: `cfg(test)`, and a `path = "…"`.
    let mut test_only = false;
    let mut path = None;
    while i < all.len() {
        if is_punct(all.get(i), '#') && is_punct(all.get(i + 1), '[') {
            let end = group_end(&all, i + 1);
            let inner = &all[i + 2..end - 1];
            let cfg_test = [
                Token::Ident("cfg".into()),
                Token::Punct('('),
                Token::Ident("test".into()),
                Token::Punct(')'),
            ];
            if inner == cfg_test {
                test_only = true;
            }
            if let [Token::Ident(p), Token::Punct('='), Token::Literal(l)] = inner {
                if p == "path" {
                    path = Some(l.trim_matches('"').to_owned());
                }
            }
            i = end;
            continue;
        }
        if is_punct(all.get(i), '#') && is_punct(all.get(i + 1), '!') {
            // An inner attribute (`#![allow(…)]`).
            i = group_end(&all, i + 2);
            continue;
        }
        if test_only {
            let end = item_end(&all, i);
            if let Some(at) = (i..end).find(|&j| ident(all.get(j)) == Some("mod")) {
                if let (Some(name), true) = (ident(all.get(at + 1)), is_punct(all.get(at + 2), ';'))
                {
                    test_modules.push((name.to_owned(), path.clone()));
                }
            }
            i = end;
            test_only = false;
            path = None;
            continue;
        }
        // `mod name;`, after any visibility.
        if ident(all.get(i)) == Some("mod") {
            if let (Some(name), true) = (ident(all.get(i + 1)), is_punct(all.get(i + 2), ';')) {
                modules.push((name.to_owned(), path.take()));
            }
            by_macro |= is_punct(all.get(i + 1), '$');
        }
        if matches!(all.get(i), Some(Token::Punct(';' | '{' | '}'))) {
            path = None;
        }
        code.push(all[i].clone());
        i += 1;
    }
    Parsed {
        code,
        modules,
        test_modules,
        by_macro,
    }
}

/// The top-level modules `code` imports through `crate::` (or `$crate::`).
fn imports(code: &[Token]) -> BTreeSet<String> {
    imports_through(code, "crate")
}

/// The first names of the paths `code` imports through `root::` (`crate`, `super`).
fn imports_through(code: &[Token], root: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, t) in code.iter().enumerate() {
        if t != &Token::Ident(root.into())
            || !is_punct(code.get(i + 1), ':')
            || !is_punct(code.get(i + 2), ':')
        {
            continue;
        }
        match code.get(i + 3) {
            Some(Token::Ident(name)) => {
                out.insert(name.clone());
            }
            Some(Token::Punct('{')) => {
                // `crate::{a, b::c, d::{e, f}}`: the first name of each path in the group.
                let end = group_end(code, i + 3);
                let mut j = i + 4;
                let mut first = true;
                while j < end - 1 {
                    match &code[j] {
                        Token::Ident(name) if first => {
                            out.insert(name.clone());
                            first = false;
                            j += 1;
                        }
                        Token::Punct('{') => j = group_end(code, j),
                        Token::Punct(',') => {
                            first = true;
                            j += 1;
                        }
                        _ => j += 1,
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The files a walk read, and those it left out as test-only.
#[derive(Default)]
struct Files {
    read: BTreeSet<PathBuf>,
    tests: BTreeSet<PathBuf>,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Each top-level module of the library and the top-level modules it imports (itself left
/// out), walking from `src/lib.rs`; and the files read.
fn graph() -> (BTreeMap<String, BTreeSet<String>>, Files) {
    let src = src();
    let root = parse(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let top: BTreeSet<String> = root.modules.iter().map(|(n, _)| n.clone()).collect();
    let mut graph = BTreeMap::new();
    let mut files = Files::default();
    files.read.insert(src.join("lib.rs"));
    for (name, path) in &root.modules {
        let file = match path {
            Some(p) => src.join(p),
            None => module_file(&src, name),
        };
        let mut uses = BTreeSet::new();
        walk(&file, &mut uses, &mut files);
        uses.retain(|m| m != name && top.contains(m));
        graph.insert(name.clone(), uses);
    }
    (graph, files)
}

/// The file of module `name` declared in a file whose children live in `dir`.
fn module_file(dir: &Path, name: &str) -> PathBuf {
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

/// Adds what `file` and its (non-test) submodules import to `uses`.
fn walk(file: &Path, uses: &mut BTreeSet<String>, files: &mut Files) {
    let source =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    files.read.insert(file.to_path_buf());
    let parsed = parse(&source);
    uses.extend(imports(&parsed.code));
    let parent = file.parent().unwrap();
    // A `mod.rs` keeps its children beside it; `a.rs` keeps them in `a/`.
    let children = if file.file_name().is_some_and(|n| n == "mod.rs") {
        parent.to_path_buf()
    } else {
        parent.join(file.file_stem().unwrap())
    };
    for (name, path) in &parsed.modules {
        let child = match path {
            Some(p) => parent.join(p),
            None => module_file(&children, name),
        };
        walk(&child, uses, files);
    }
    for (name, path) in &parsed.test_modules {
        files.tests.insert(match path {
            Some(p) => parent.join(p),
            None => module_file(&children, name),
        });
    }
    if parsed.by_macro {
        let declared = |name: &str| {
            parsed.modules.iter().any(|(n, _)| n == name)
                || parsed.test_modules.iter().any(|(n, _)| n == name)
        };
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&children)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for entry in entries {
            let name = entry.file_stem().unwrap().to_string_lossy().into_owned();
            let file = if entry.is_dir() {
                entry.join("mod.rs")
            } else if entry.extension().is_some_and(|x| x == "rs") && name != "mod" {
                entry.clone()
            } else {
                continue;
            };
            if file.exists() && !declared(&name) {
                walk(&file, uses, files);
            }
        }
    }
}

/// The import circles: strongly connected components of more than one module (Tarjan's).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !graph.contains_key(w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn print(graph: &BTreeMap<String, BTreeSet<String>>) {
    for (module, uses) in graph {
        let uses: Vec<&str> = uses.iter().map(String::as_str).collect();
        println!("{module:>11} → {}", uses.join(", "));
    }
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The proxy-wasm adapter's modules import one way too: each of `src/filter/`'s files names
/// its siblings through `super::`, and one that names the parent's own items (`super::Item`)
/// points back up at `mod.rs`, which declares them all.
#[test]
fn the_adapter_is_part_of_no_import_circle() {
    let dir = src().join("filter");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let name = |f: &PathBuf| f.file_stem().unwrap().to_string_lossy().into_owned();
    let children: BTreeSet<String> = files.iter().map(name).filter(|n| n != "mod").collect();
    let mut graph = BTreeMap::new();
    graph.insert("mod".to_owned(), children.clone());
    for file in files.iter().filter(|f| name(f) != "mod") {
        let parsed = parse(&std::fs::read_to_string(file).unwrap());
        let uses: BTreeSet<String> = imports_through(&parsed.code, "super")
            .into_iter()
            .map(|n| {
                if children.contains(&n) {
                    n
                } else {
                    "mod".to_owned()
                }
            })
            .filter(|n| *n != name(file))
            .collect();
        graph.insert(name(file), uses);
    }
    print(&graph);
    let circles = circles(&graph);
    assert!(
        circles.is_empty(),
        "import circles in src/filter: {circles:?}"
    );
}

#[test]
fn every_file_of_the_library_is_read() {
    let (_, files) = graph();
    let mut all = Vec::new();
    rust_files(&src(), &mut all);
    let missed: Vec<String> = all
        .iter()
        .filter(|f| !f.starts_with(src().join("bin")))
        .filter(|f| !files.read.contains(*f) && !files.tests.contains(*f))
        .map(|f| f.display().to_string())
        .collect();
    assert!(missed.is_empty(), "files the walk never read: {missed:?}");
    assert!(files.tests.iter().all(|f| !files.read.contains(f)));
}

#[test]
fn the_core_is_part_of_no_import_circle() {
    let (graph, _) = graph();
    print(&graph);
    for m in LAYERED {
        assert!(
            graph.contains_key(*m),
            "`{m}` is no top-level module of src/"
        );
    }
    let circles = circles(&graph);
    for c in &circles {
        println!(
            "circle: {}",
            c.iter().cloned().collect::<Vec<_>>().join(" ↔ ")
        );
    }
    let mut wrong = Vec::new();
    for c in &circles {
        if let Some(m) = LAYERED.iter().find(|m| c.contains(**m)) {
            wrong.push(format!("{m} is in the import circle {c:?}"));
        } else if !KNOWN_CIRCLES
            .iter()
            .any(|known| c.iter().all(|m| known.contains(&m.as_str())))
        {
            wrong.push(format!("a new import circle: {c:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_reader_sees_what_the_compiler_sees() {
    let parsed = parse(
        r####"
        //! Docs name crate::doc_only and [`crate::linked`].
        use crate::{a, b::c, d::{e, f}, self as _};
        use crate::g::H;
        /* crate::commented /* nested */ crate::still */
        fn f<'a>(x: &'a str) -> char { let _ = "crate::in_string"; let _ = r#"crate::raw"#; crate::h::call(); '"' }
        #[cfg(test)]
        mod tests { use crate::test_only; }
        #[cfg(test)]
        #[path = "t.rs"]
        mod t;
        #[cfg(not(test))]
        mod real;
        #[path = "other.rs"]
        pub(crate) mod elsewhere;
        macro_rules! m { () => { $crate::i::j } }
        macro_rules! mods { ($($m:ident),+) => { $(pub mod $m;)+ } }
        "####,
    );
    let found: Vec<String> = imports(&parsed.code).into_iter().collect();
    assert_eq!(found, ["a", "b", "d", "g", "h", "i", "self"]);
    assert_eq!(
        parsed.modules,
        [
            ("real".to_owned(), None),
            ("elsewhere".to_owned(), Some("other.rs".to_owned()))
        ]
    );
    assert_eq!(
        parsed.test_modules,
        [("t".to_owned(), Some("t.rs".to_owned()))]
    );
    assert!(parsed.by_macro);
    let mut g = BTreeMap::new();
    let set = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
    g.insert("a".to_owned(), set(&["b"]));
    g.insert("b".to_owned(), set(&["c"]));
    g.insert("c".to_owned(), set(&["a", "d"]));
    g.insert("d".to_owned(), set(&[]));
    assert_eq!(circles(&g), [set(&["a", "b", "c"])]);
}
