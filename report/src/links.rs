//! Links from a report (or a bundle of records) to files beside it: a path relative to a
//! directory, and a path as an HTML `href`. Lexical only: nothing is read from the disk.

use std::path::{Component, Path, PathBuf};

/// `to` relative to the directory `from`, both absolute (or both relative to one directory):
/// `..` for each component of `from` past their common prefix, then the rest of `to`. Both are
/// first [`normalize`]d. `None` when one is absolute and the other is not, or when `from`
/// still climbs (`..`) past their common prefix, which no relative path can undo.
pub fn relative(from: &Path, to: &Path) -> Option<PathBuf> {
    if from.is_absolute() != to.is_absolute() {
        return None;
    }
    let from = normalize(from);
    let to = normalize(to);
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    if from[common..].contains(&Component::ParentDir) {
        return None;
    }
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c.as_os_str());
    }
    Some(out)
}

/// `path` with `.` left out and each `..` taking away the component before it (lexically: a
/// `..` after a symlink is not followed back; resolve such a path on the disk instead). A `..`
/// at the root stays at the root; one at the start of a relative path is kept.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out: Vec<Component> = Vec::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(c),
            },
            _ => out.push(c),
        }
    }
    out.iter().map(|c| c.as_os_str()).collect()
}

/// `path` as an `href`: relative to `base` (the directory the report is written to) when
/// both are absolute, else as it is; percent-encoded, so a space, `#`, `?`, `%` or `:` in a
/// name cannot end the path or read as a scheme.
pub fn href(path: &str, base: Option<&Path>) -> String {
    let target = Path::new(path);
    let shown = base
        .filter(|b| b.is_absolute() && target.is_absolute())
        .and_then(|b| relative(b, target))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| path.to_string());
    // `//host/x` would be a link to another host; as a file path it is `/host/x`.
    let shown = match shown.strip_prefix("//") {
        Some(_) => format!("/{}", shown.trim_start_matches('/')),
        None => shown,
    };
    let mut out = String::with_capacity(shown.len());
    for byte in shown.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_climb_out_of_what_they_do_not_share() {
        let rel = |a: &str, b: &str| {
            relative(Path::new(a), Path::new(b)).map(|p| p.display().to_string())
        };
        assert_eq!(
            rel("/r/out", "/r/out/t/m/0.jsonl").as_deref(),
            Some("t/m/0.jsonl")
        );
        assert_eq!(
            rel("/r/out", "/r/s/t/0.jsonl").as_deref(),
            Some("../s/t/0.jsonl")
        );
        assert_eq!(
            rel("/a/b/c", "/x/0.jsonl").as_deref(),
            Some("../../../x/0.jsonl")
        );
        assert_eq!(
            rel("/r/./out", "/r/out/0.jsonl").as_deref(),
            Some("0.jsonl")
        );
        assert_eq!(
            rel("bundle", "bundle/t/0.jsonl").as_deref(),
            Some("t/0.jsonl")
        );
        assert_eq!(rel("/r", "t/0.jsonl"), None);
        // `..` is resolved, not taken as a name.
        assert_eq!(
            rel("/r/a/../x", "/r/b/0.jsonl").as_deref(),
            Some("../b/0.jsonl")
        );
        assert_eq!(
            rel("/r/x", "/r/x/../b/0.jsonl").as_deref(),
            Some("../b/0.jsonl")
        );
        assert_eq!(rel("/..", "/b").as_deref(), Some("b"));
        assert_eq!(rel("../x", "b"), None);
        assert_eq!(rel("../x", "../b").as_deref(), Some("../b"));
    }

    #[test]
    fn hrefs_are_relative_to_the_report_and_encoded() {
        let base = Path::new("/home/a/reports");
        assert_eq!(
            href("/home/a/sweeps/s 1/t#1/ollama:q/0.jsonl", Some(base)),
            "../sweeps/s%201/t%231/ollama%3Aq/0.jsonl"
        );
        assert_eq!(href("/data/t/m/0.jsonl", None), "/data/t/m/0.jsonl");
        assert_eq!(href("t/m/100%.jsonl", Some(base)), "t/m/100%25.jsonl");
        // Never a link to another host.
        assert_eq!(
            href("//evil.example/x.jsonl", None),
            "/evil.example/x.jsonl"
        );
        assert_eq!(
            href("///evil.example/x.jsonl", None),
            "/evil.example/x.jsonl"
        );
    }
}
