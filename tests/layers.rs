//! The library's layering: which top-level modules of `src/` (a file or a folder) import which,
//! read from the source as the compiler would walk it (from `src/lib.rs` through its `mod`
//! declarations), with test-only code (`#[cfg(test)]` items and the files they load),
//! comments and string literals left out. An import is a path through `crate::` (`use
//! crate::rank::Catalog;`, `crate::text::terms(…)`, `use crate::{a, b};`).
//!
//! The modules of [`LAYERED`] are part of no import circle, and no circle appears beyond the
//! known ones of [`KNOWN_CIRCLES`]. Below the top level, a folder module (`src/auto_k/`) and its
//! children import each other one way too, beyond [`KNOWN_FOLDER_CIRCLES`]: there `super::x`,
//! `self::x` and `child::x` paths count as well (see [`folder_graphs`]); the fixtures under
//! `tests/data/layers/` show a circle found and a clean folder passing. `cargo test --test integration layers:: -- --nocapture` prints the graph
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
    "transitions",
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

/// One module of the library that has a file of its own: its path from the crate root (`[]`
/// for `lib.rs`, `["auto_k", "fleet"]` for `src/auto_k/fleet.rs`), what its file holds, and the
/// names of its (non-test) child modules.
struct ModuleFile {
    path: Vec<String>,
    parsed: Parsed,
    children: BTreeSet<String>,
}

/// Every module of the crate whose sources are in `src` with a file of its own, walking from
/// `src/lib.rs` as the compiler would; and the files read.
fn module_files(src: &Path) -> (Vec<ModuleFile>, Files) {
    let mut out = Vec::new();
    let mut files = Files::default();
    walk(&src.join("lib.rs"), Vec::new(), &mut out, &mut files);
    (out, files)
}

/// Each top-level module of the library and the top-level modules it imports (itself left
/// out), walking from `src/lib.rs`; and the files read.
fn graph() -> (BTreeMap<String, BTreeSet<String>>, Files) {
    let (modules, files) = module_files(&src());
    let root = &modules[0];
    let mut graph: BTreeMap<String, BTreeSet<String>> = root
        .children
        .iter()
        .map(|name| (name.clone(), BTreeSet::new()))
        .collect();
    for module in &modules[1..] {
        let name = &module.path[0];
        let uses = graph.get_mut(name).unwrap();
        uses.extend(
            imports(&module.parsed.code)
                .into_iter()
                .filter(|m| m != name && root.children.contains(m)),
        );
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

/// Adds the module of `file` (at `path`) and its (non-test) submodules to `out`.
fn walk(file: &Path, path: Vec<String>, out: &mut Vec<ModuleFile>, files: &mut Files) {
    let source =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    files.read.insert(file.to_path_buf());
    let parsed = parse(&source);
    let parent = file.parent().unwrap();
    // `lib.rs` and a `mod.rs` keep their children beside them; `a.rs` keeps them in `a/`.
    let children_dir = if path.is_empty() || file.file_name().is_some_and(|n| n == "mod.rs") {
        parent.to_path_buf()
    } else {
        parent.join(file.file_stem().unwrap())
    };
    let mut children: Vec<(String, PathBuf)> = parsed
        .modules
        .iter()
        .map(|(name, p)| {
            let child = match p {
                Some(p) => parent.join(p),
                None => module_file(&children_dir, name),
            };
            (name.clone(), child)
        })
        .collect();
    for (name, p) in &parsed.test_modules {
        files.tests.insert(match p {
            Some(p) => parent.join(p),
            None => module_file(&children_dir, name),
        });
    }
    if parsed.by_macro {
        let declared = |name: &str| {
            parsed.modules.iter().any(|(n, _)| n == name)
                || parsed.test_modules.iter().any(|(n, _)| n == name)
        };
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&children_dir)
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
                children.push((name, file));
            }
        }
    }
    let names = children.iter().map(|(n, _)| n.clone()).collect();
    out.push(ModuleFile {
        path: path.clone(),
        parsed,
        children: names,
    });
    for (name, child) in children {
        let mut child_path = path.clone();
        child_path.push(name);
        walk(&child, child_path, out, files);
    }
}

/// One path a module's code names, resolved from the crate root (`super::Table` in
/// `auto_k::fleet` is `["auto_k", "Table"]`).
struct Reference {
    target: Vec<String>,
    /// The name a `use` binds it to (`X` for `use a::X;`, `Y` for `use a::X as Y;`).
    binding: Option<String>,
    /// Named by a `pub use` (or `pub(…) use`): a re-export, which makes the module depend on
    /// the item only if its own code names it too.
    re_export: bool,
}

/// A path written from `current`, made absolute: `crate::a::b`, `super::x` (one `super` per
/// step up), `self::x`, or `child::x` for a child module of `current`; none for any other path
/// (another crate's, a local's, `std::…`).
fn resolve(
    segments: &[String],
    current: &[String],
    children: &BTreeSet<String>,
) -> Option<Vec<String>> {
    let first = segments.first()?;
    let mut out: Vec<String> = current.to_vec();
    let rest = match first.as_str() {
        "crate" => {
            out.clear();
            &segments[1..]
        }
        "self" => &segments[1..],
        "super" => {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            for _ in 0..ups {
                out.pop()?;
            }
            &segments[ups..]
        }
        name if children.contains(name) => segments,
        _ => return None,
    };
    out.extend(rest.iter().cloned());
    Some(out)
}

/// The paths of the use tree (or plain path) at `i`, each after `prefix`, with the name each
/// binds; and the index just past the tree. `a::{b, c::d as e, self}` gives `a::b` (b),
/// `a::c::d` (e) and `a` (a); a glob (`a::*`) gives `a` and binds nothing.
fn use_tree(
    code: &[Token],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match code.get(i) {
            Some(Token::Ident(name)) if name == "self" && !path.is_empty() => i += 1,
            Some(Token::Ident(name)) => {
                path.push(name.clone());
                i += 1;
            }
            Some(Token::Punct('$')) => i += 1,
            Some(Token::Punct('{')) => {
                let end = group_end(code, i);
                let mut j = i + 1;
                while j < end - 1 {
                    if is_punct(code.get(j), ',') {
                        j += 1;
                    } else {
                        let next = use_tree(code, j, &path, out);
                        j = next.max(j + 1);
                    }
                }
                return end;
            }
            Some(Token::Punct('*')) => {
                out.push((path, None));
                return i + 1;
            }
            _ => break,
        }
        if is_punct(code.get(i), ':') && is_punct(code.get(i + 1), ':') {
            i += 2;
        } else {
            break;
        }
    }
    let mut binding = path.last().cloned();
    if ident(code.get(i)) == Some("as") {
        binding = ident(code.get(i + 1)).map(str::to_owned);
        i += 2;
    }
    if !path.is_empty() {
        out.push((path, binding));
    }
    i
}

/// Whether the `use` at `i` is a re-export: `pub use`, `pub(crate) use`, `pub(super) use`.
fn is_re_export(code: &[Token], i: usize) -> bool {
    if i >= 1 && ident(code.get(i - 1)) == Some("pub") {
        return true;
    }
    if i >= 2 && is_punct(code.get(i - 1), ')') {
        let open = (0..i - 1)
            .rev()
            .find(|&j| is_punct(code.get(j), '('))
            .unwrap_or(0);
        return open >= 1 && ident(code.get(open - 1)) == Some("pub");
    }
    false
}

/// The paths into the crate that `module`'s code names, in `use` items and in code, resolved.
/// An inline module (`mod x { … }`, not a test one) moves what `super::` and `self::` mean.
fn references(module: &ModuleFile) -> Vec<Reference> {
    let code = &module.parsed.code;
    let mut out = Vec::new();
    // The inline modules the index is in, and where each ends.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut i = 0;
    while i < code.len() {
        while inline.last().is_some_and(|(_, end)| *end <= i) {
            inline.pop();
        }
        let mut current = module.path.clone();
        current.extend(inline.iter().map(|(n, _)| n.clone()));
        let children = if inline.is_empty() {
            module.children.clone()
        } else {
            BTreeSet::new()
        };
        if ident(code.get(i)) == Some("mod") && is_punct(code.get(i + 2), '{') {
            if let Some(name) = ident(code.get(i + 1)) {
                inline.push((name.to_owned(), group_end(code, i + 2)));
                i += 2;
                continue;
            }
        }
        let after_path_sep =
            i >= 2 && is_punct(code.get(i - 1), ':') && is_punct(code.get(i - 2), ':');
        let mut found = Vec::new();
        let re_export;
        if ident(code.get(i)) == Some("use") {
            re_export = is_re_export(code, i);
            let start = if is_punct(code.get(i + 1), ':') {
                i + 3
            } else {
                i + 1
            };
            i = use_tree(code, start, &[], &mut found).max(i + 1);
        } else if !after_path_sep
            && is_punct(code.get(i + 1), ':')
            && is_punct(code.get(i + 2), ':')
            && ident(code.get(i))
                .is_some_and(|n| ["crate", "self", "super"].contains(&n) || children.contains(n))
        {
            re_export = false;
            i = use_tree(code, i, &[], &mut found).max(i + 1);
            // A path in code binds no name.
            found.iter_mut().for_each(|(_, binding)| *binding = None);
        } else {
            i += 1;
            continue;
        }
        for (segments, binding) in found {
            if let Some(target) = resolve(&segments, &current, &children) {
                out.push(Reference {
                    target,
                    binding,
                    re_export,
                });
            }
        }
    }
    out
}

/// The name of `module`'s node among the modules of `folder`: the folder's own (`a`) when
/// `module` is the folder, else its child's that holds it (`a::b` for `a::b` and `a::b::c`).
fn node(folder: &[String], module: &[String], children: &BTreeSet<String>) -> String {
    match module.get(folder.len()) {
        Some(child) if children.contains(child) => {
            [folder, std::slice::from_ref(child)].concat().join("::")
        }
        _ => folder.join("::"),
    }
}

/// The imports between a folder module and its children, and among its children: one graph
/// for every folder module below the top level: `auto_k → auto_k::fleet` when `auto_k/mod.rs` names
/// `fleet::FleetCalibration`, `auto_k::fleet → auto_k` when `fleet.rs` imports `super::Table`.
///
/// A child's node holds its own children: an import from `a/b/c.rs` into `a/mod.rs`'s items is
/// `a::b → a`. A name the parent imports and its children take through `super::` counts for
/// the module that defines it (`super::Grant` in `access/judge.rs` is `access::grant`, through
/// `access/mod.rs`'s `pub use grant::Grant`). A re-export (`pub use child::X`) alone is no
/// import: the parent only names the item for others; it is one if the parent's own code
/// names `X` too. Declaring a child (`mod child;`) is none either.
fn folder_graphs(modules: &[ModuleFile]) -> Vec<BTreeMap<String, BTreeSet<String>>> {
    let by_path: BTreeMap<&[String], &ModuleFile> =
        modules.iter().map(|m| (m.path.as_slice(), m)).collect();
    let references: Vec<Vec<Reference>> = modules.iter().map(references).collect();
    // What each module's `use` items bind: `super::X` from a child is the item `X` names.
    let mut aliases: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (module, refs) in modules.iter().zip(&references) {
        for r in refs {
            if let Some(binding) = &r.binding {
                aliases
                    .entry(module.path.clone())
                    .or_default()
                    .insert(binding.clone(), r.target.clone());
            }
        }
    }
    // A name `module` binds with a `use` (no child module of the same name).
    let alias = |module: &[String], name: &str| -> Option<&Vec<String>> {
        if by_path.get(module)?.children.contains(name) {
            return None;
        }
        aliases.get(module)?.get(name)
    };
    // `["access", "Grant"]` → `["access", "grant", "Grant"]`, through as many `use`s as it takes.
    let canonical = |target: &[String]| -> Vec<String> {
        let mut target = target.to_vec();
        for _ in 0..16 {
            let Some((n, via)) = (1..target.len())
                .rev()
                .find_map(|n| Some((n, alias(&target[..n], &target[n])?)))
            else {
                break;
            };
            if via[..] == target[..=n] {
                break;
            }
            target = [via.clone(), target[n + 1..].to_vec()].concat();
        }
        target
    };
    let mut graphs = Vec::new();
    for folder in modules
        .iter()
        .filter(|m| !m.path.is_empty() && !m.children.is_empty())
    {
        let name = |path: &[String]| node(&folder.path, path, &folder.children);
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        graph.entry(name(&folder.path)).or_default();
        for child in &folder.children {
            graph
                .entry(name(&[folder.path.clone(), vec![child.clone()]].concat()))
                .or_default();
        }
        for (module, refs) in modules.iter().zip(&references) {
            if !module.path.starts_with(&folder.path) {
                continue;
            }
            let from = name(&module.path);
            for r in refs {
                let target = canonical(&r.target);
                if !target.starts_with(&folder.path) {
                    continue;
                }
                let to = name(&target);
                let named_by_own_code = || {
                    let binding = r.binding.as_deref().unwrap_or_default();
                    module
                        .parsed
                        .code
                        .iter()
                        .filter(|t| ident(Some(t)) == Some(binding))
                        .count()
                        > 1
                };
                if from != to && (!r.re_export || named_by_own_code()) {
                    graph.get_mut(&from).unwrap().insert(to);
                }
            }
        }
        graphs.push(graph);
    }
    graphs
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

/// The circles between a folder module and its children (or among its children) that are
/// known, each with why it stays: every circle [`folder_circles`] finds must lie within one.
const KNOWN_FOLDER_CIRCLES: &[(&[&str], &str)] = &[
    (
        &["access::grant", "access::judge", "access::policy"],
        "a policy's grants are judged, and the judge and grants read the policy back",
    ),
    (
        &["auto_k", "auto_k::fleet"],
        "AutoKConfig holds a fleet::FleetCalibration; fleet.rs reads AutoKConfig, Table, Histogram",
    ),
    (
        &[
            "config",
            "config::embeddings",
            "config::gating",
            "config::mcp",
            "config::search",
            "config::shadow",
        ],
        "Config holds each section's type; each section parses with config/mod.rs's helpers",
    ),
    (
        &[
            "dialects",
            "dialects::anthropic",
            "dialects::bedrock",
            "dialects::codec",
            "dialects::gemini",
            "dialects::ollama",
            "dialects::openai_chat",
            "dialects::openai_responses",
            "dialects::shared",
        ],
        "the Dialect enum dispatches to each codec, which implements the traits dialects/ defines",
    ),
    (
        &[
            "lifecycle",
            "lifecycle::body",
            "lifecycle::gating",
            "lifecycle::hosts",
            "lifecycle::response",
            "lifecycle::search",
            "lifecycle::steps",
            "lifecycle::stream",
            "lifecycle::worker",
        ],
        "lifecycle/mod.rs's stream state is driven by the steps, which read and write it",
    ),
    (
        &[
            "mcp::exchange",
            "mcp::exchange::find",
            "mcp::exchange::list",
        ],
        "listing tools offers find_tools, whose answer is a list, over exchange/mod.rs's types",
    ),
    (
        &[
            "offline::eval::grammars::agent_products",
            "offline::eval::grammars::agent_products::handbacks",
        ],
        "the grammar's handbacks are written in the parent's vocabulary, which the parent lists",
    ),
    (
        &["sse", "sse::eventstream"],
        "sse.rs decodes AWS event streams through eventstream.rs, which yields sse.rs's frames",
    ),
];

/// The folder-level graphs of the crate in `src` (see [`folder_graphs`]), all in one map for
/// printing, and their circles (each within one folder).
fn folder_circles(src: &Path) -> (BTreeMap<String, BTreeSet<String>>, Vec<BTreeSet<String>>) {
    let (modules, _) = module_files(src);
    let mut all = BTreeMap::new();
    let mut found = Vec::new();
    for graph in folder_graphs(&modules) {
        found.extend(circles(&graph));
        for (module, uses) in graph {
            all.entry(module).or_insert_with(BTreeSet::new).extend(uses);
        }
    }
    (all, found)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/layers")
        .join(name)
        .join("src")
}

fn set(xs: &[&str]) -> BTreeSet<String> {
    xs.iter().map(|x| x.to_string()).collect()
}

#[test]
fn folder_modules_and_their_children_import_one_way() {
    let (graph, circles) = folder_circles(&src());
    print(&graph);
    let mut wrong = Vec::new();
    for c in &circles {
        println!(
            "circle: {}",
            c.iter().cloned().collect::<Vec<_>>().join(" ↔ ")
        );
        if !KNOWN_FOLDER_CIRCLES
            .iter()
            .any(|(known, _)| c.iter().all(|m| known.contains(&m.as_str())))
        {
            wrong.push(format!("a new import circle: {c:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `tests/data/layers/cycle/`: `a/mod.rs` holds a field of `b::Inner` while `a/b.rs` imports
/// `super::Outer`; `a/c.rs` and `a/d.rs` import each other, one through `crate::a::d`, the
/// other through `super::c`.
#[test]
fn a_circle_between_a_folder_and_its_children_is_found() {
    let (graph, circles) = folder_circles(&fixture("cycle"));
    print(&graph);
    assert_eq!(circles.len(), 2, "{circles:?}");
    assert!(circles.contains(&set(&["a", "a::b"])), "{circles:?}");
    assert!(circles.contains(&set(&["a::c", "a::d"])), "{circles:?}");
}

/// `tests/data/layers/clean/`: `a/mod.rs` declares `b` and `c`, re-exports `b::Inner` without
/// using it, and defines `Shared`; `b.rs` imports `super::Shared`, `c.rs` imports
/// `super::Inner` (which is `b`'s) and `self::` and `crate::` paths of its own.
#[test]
fn a_folder_whose_children_import_one_way_passes() {
    let (graph, circles) = folder_circles(&fixture("clean"));
    print(&graph);
    assert!(circles.is_empty(), "{circles:?}");
    assert_eq!(graph["a"], set(&[]));
    assert_eq!(graph["a::b"], set(&["a"]));
    assert_eq!(graph["a::c"], set(&["a::b"]));
}
