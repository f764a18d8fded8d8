//! The book (docs/book/, mdBook) and README.md: every relative link resolves, and every
//! `#anchor` names a heading of the page it points to, as mdBook (and GitHub) derive heading
//! ids. mdBook has no link checker of its own; `make docs` builds the book, this reads its
//! sources. A book page is one SUMMARY.md lists (mdBook renders no other), `{{#include …}}`
//! read in; a link may not leave the book's `src/` (the HTML would not have the file).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use crate::common::repo;

fn src() -> PathBuf {
    repo().join("docs/book/src")
}

/// `path` with `.` and `..` taken out (no file system access).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The page's text with its `{{#include FILE}}` lines replaced by FILE's text.
fn expanded(page: &Path) -> String {
    let text = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
    let mut out = String::new();
    for line in text.lines() {
        match line
            .trim()
            .strip_prefix("{{#include ")
            .and_then(|l| l.strip_suffix("}}"))
        {
            Some(file) => {
                let included = normalise(&page.parent().unwrap().join(file.trim()));
                out.push_str(&std::fs::read_to_string(&included).unwrap_or_else(|e| {
                    panic!("{}: include {}: {e}", page.display(), included.display())
                }));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push(line);
        }
    }
    out
}

/// `line` without its code spans (a link written in backticks is no link).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The id a heading gets: its text as rendered (links' text, no code or emphasis marks),
/// lower-cased, letters, digits, `-` and `_` kept, white space as `-`.
fn heading_id(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // [text](target) → text
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if close < end => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.trim()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_lowercase().next()?),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// The ids of the headings of a page's (expanded) text; a repeated one gets `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let id = heading_id(line[hashes..].trim());
        let n = seen.entry(id.clone()).or_insert(0);
        out.insert(match *n {
            0 => id,
            n => format!("{id}-{n}"),
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links and images of `text` (`[x](target)`, `![x](target)`), with
/// their line, outside code.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            out.push((n + 1, target.to_owned()));
            rest = &after[end.min(after.len())..];
        }
    }
    out
}

/// The pages SUMMARY.md lists, relative to `src/`.
fn summary_pages() -> Vec<PathBuf> {
    let summary = std::fs::read_to_string(src().join("SUMMARY.md")).unwrap();
    links(&summary)
        .into_iter()
        .map(|(_, target)| PathBuf::from(target))
        .collect()
}

/// Every `.md` file below `dir`.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// Where `target`, a link on `page`, goes wrong (`None`: it resolves). `root`: the folder the
/// link may not leave; `pages`: the pages a `.md` link may point to, with their anchors.
fn broken(
    page: &Path,
    target: &str,
    root: &Path,
    pages: &BTreeMap<PathBuf, BTreeSet<String>>,
) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        normalise(&page.parent().unwrap().join(path))
    };
    if !file.starts_with(root) {
        return Some(format!("{target}: leaves {}", root.display()));
    }
    if file.extension().is_some_and(|e| e == "md") {
        let Some(ids) = pages.get(&file) else {
            return Some(format!("{target}: no such page"));
        };
        if let Some(anchor) = anchor {
            if !ids.contains(anchor) {
                return Some(format!("{target}: no heading `#{anchor}` there"));
            }
        }
    } else if !file.exists() {
        return Some(format!("{target}: no such file"));
    }
    None
}

/// Every book page with its headings' ids.
fn book_pages() -> BTreeMap<PathBuf, BTreeSet<String>> {
    summary_pages()
        .into_iter()
        .map(|p| {
            let path = src().join(&p);
            let ids = anchors(&expanded(&path));
            (path, ids)
        })
        .collect()
}

#[test]
fn every_page_is_in_the_summary_and_every_summary_entry_exists() {
    let listed: BTreeSet<PathBuf> = summary_pages().into_iter().map(|p| src().join(p)).collect();
    assert!(listed.len() >= 30, "{} pages", listed.len());
    for page in &listed {
        assert!(
            page.exists(),
            "SUMMARY.md lists {} (no such file)",
            page.display()
        );
    }
    let mut files = Vec::new();
    markdown_files(&src(), &mut files);
    for file in files {
        if file.ends_with("SUMMARY.md") {
            continue;
        }
        assert!(
            listed.contains(&file),
            "{} is not in SUMMARY.md: mdBook would not render it",
            file.display()
        );
    }
}

#[test]
fn every_link_of_the_book_resolves() {
    let pages = book_pages();
    let mut wrong = Vec::new();
    let mut count = 0;
    for page in pages.keys() {
        for (line, target) in links(&expanded(page)) {
            count += 1;
            if let Some(why) = broken(page, &target, &src(), &pages) {
                wrong.push(format!("{}:{line}: {why}", page.display()));
            }
        }
    }
    assert!(count >= 100, "{count} links");
    assert!(wrong.is_empty(), "broken links:\n{}", wrong.join("\n"));
}

#[test]
fn every_link_of_the_readme_resolves() {
    let readme = repo().join("README.md");
    let mut pages = book_pages();
    pages.insert(
        readme.clone(),
        anchors(&std::fs::read_to_string(&readme).unwrap()),
    );
    let mut wrong = Vec::new();
    let mut into_book = 0;
    for (line, target) in links(&std::fs::read_to_string(&readme).unwrap()) {
        if target.starts_with("docs/book/src/") {
            into_book += 1;
        }
        // Files of the repository are fine; pages must be the book's (or the README itself).
        let md = target.split('#').next().unwrap_or_default();
        let root = if md.ends_with(".md") && !md.is_empty() && md != "README.md" {
            if !md.starts_with("docs/book/src/") && !repo().join(md).exists() {
                wrong.push(format!("README.md:{line}: {target}: no such file"));
                continue;
            }
            if !md.starts_with("docs/book/src/") {
                continue; // another Markdown file of the repository (deploy/istio/README.md)
            }
            src()
        } else {
            repo()
        };
        if let Some(why) = broken(&readme, &target, &root, &pages) {
            wrong.push(format!("README.md:{line}: {why}"));
        }
    }
    assert!(into_book >= 10, "{into_book} links into the book");
    assert!(wrong.is_empty(), "broken links:\n{}", wrong.join("\n"));
}

#[test]
fn heading_ids_are_mdbooks() {
    assert_eq!(
        heading_id("Search mode: `find_tools` answered in the gateway"),
        "search-mode-find_tools-answered-in-the-gateway"
    );
    assert_eq!(
        heading_id("Memory of found tools: `search.memory`"),
        "memory-of-found-tools-searchmemory"
    );
    assert_eq!(heading_id("[Linked](x.md) text"), "linked-text");
    let ids = anchors("# A\n\n```\n# not a heading\n```\n## A\n");
    assert_eq!(ids, BTreeSet::from(["a".to_owned(), "a-1".to_owned()]));
}

/// The names of the stats table of `docs/book/src/reference/metrics.md`, written out: a row's
/// first cell names one or more stats separated by ` / `, each in full (`toolsift.search.held`)
/// or as a replacement of the previous name's last segments (`.released`, `.shadow.would_allow.<surface>`).
/// A segment `<…>` stands for a family's member (`toolsift.skipped.<reason>`).
fn documented_stats() -> Vec<String> {
    let page = std::fs::read_to_string(src().join("reference/metrics.md")).unwrap();
    let mut names = Vec::new();
    for row in page.lines().filter(|l| l.starts_with("| `")) {
        let cell = row.split(" | ").next().unwrap().trim_start_matches("| ");
        let mut previous: Option<String> = None;
        for part in cell.split(" / ") {
            let part = part.trim().trim_matches('`');
            let name = match (part.strip_prefix('.'), &previous) {
                (Some(relative), Some(before)) => {
                    let replaced = relative.split('.').count();
                    let kept: Vec<&str> = before.split('.').collect();
                    let kept = &kept[..kept.len() - replaced];
                    format!("{}.{relative}", kept.join("."))
                }
                (Some(_), None) => panic!("metrics.md: {part} follows no full name"),
                (None, _) => part.to_owned(),
            };
            names.push(name.clone());
            previous = Some(name);
        }
    }
    names
}

/// Whether the stat `name` is an instance of the documented `pattern`.
fn is_instance(name: &str, pattern: &str) -> bool {
    let (n, p): (Vec<&str>, Vec<&str>) = (name.split('.').collect(), pattern.split('.').collect());
    n.len() == p.len()
        && n.iter()
            .zip(&p)
            .all(|(n, p)| n == p || (p.starts_with('<') && p.ends_with('>')))
}

#[test]
fn the_metrics_reference_lists_every_stat_and_no_other() {
    let documented = documented_stats();
    let defined: Vec<String> = toolsift::stats::Stat::all()
        .map(|s| s.name().into_owned())
        .collect();
    for name in &defined {
        assert!(
            documented.iter().any(|p| is_instance(name, p)),
            "{name} is not in docs/book/src/reference/metrics.md"
        );
    }
    // The access rules' audit, shadow and per-rule stats are named after the rules
    // (src/lifecycle/audit.rs), not in the core's table.
    let per_rule = [
        "toolsift.access.would_deny.",
        "toolsift.access.shadow.",
        "toolsift.access.rule.",
    ];
    for pattern in &documented {
        assert!(
            defined.iter().any(|n| is_instance(n, pattern))
                || per_rule.iter().any(|p| pattern.starts_with(p)),
            "metrics.md lists {pattern}, which no stat is"
        );
    }
}
