//! Reading inputs and writing results, with errors that name the file.

use crate::Failure;
use std::io::Write;
use std::path::Path;

/// The contents of `path` as text.
pub fn read_text(path: &Path, what: &str) -> Result<String, Failure> {
    let bytes = std::fs::read(path).map_err(|e| {
        Failure(format!(
            "cannot read {what} {}: {}",
            path.display(),
            io_reason(&e)
        ))
    })?;
    String::from_utf8(bytes)
        .map_err(|e| Failure(format!("{what} {} is not UTF-8 text: {e}", path.display())))
}

/// "No such file or directory" without the "(os error 2)" tail.
fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(cut) => text.get(..cut).unwrap_or(&text).to_owned(),
        None => text,
    }
}

/// Reads and checks a plugin configuration file; no file means the defaults.
pub fn read_config(path: Option<&Path>) -> Result<toolsift::config::Config, Failure> {
    let Some(path) = path else {
        return Ok(toolsift::config::Config::default());
    };
    let text = read_text(path, "config")?;
    toolsift::config::Config::from_json(text.as_bytes())
        .map_err(|e| Failure(format!("{}: {e}", path.display())))
}

/// Writes `text` to stdout. A closed pipe (`| head`) is not an error.
pub fn print(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure(format!("cannot write the output: {e}")))
        }
        _ => Ok(()),
    }
}

/// `1234567` → `1,234,567` (as `toolsift report` writes counts).
pub fn thousands(n: usize) -> String {
    toolsift::offline::report::thousands(n as u64)
}

/// The change from `before` to `after` in percent, e.g. `-91.5%`.
pub fn change(before: usize, after: usize) -> String {
    if before == 0 {
        return "n/a".to_owned();
    }
    format!(
        "{:+.1}%",
        (after as f64 - before as f64) / before as f64 * 100.0
    )
}

/// `text` on one line, cut to about `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let head: String = flat.chars().take(max).collect();
    format!("{head}… ({} bytes in all)", text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_numbers() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(change(200, 50), "-75.0%");
        assert_eq!(change(0, 5), "n/a");
        assert_eq!(one_line("a\n  b", 10), "a b");
        assert!(one_line(&"x".repeat(50), 10).starts_with("xxxxxxxxxx… (50 bytes"));
    }
}
