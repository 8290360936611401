//! Flags that make a command run code named on its own command line, or taken from outside
//! the workspace: a prefix rule such as `bash(cargo test:*)` does not cover them.
//!
//! `cargo test --config 'build.rustc-wrapper="/tmp/x"'` is still "cargo test" to a prefix rule,
//! but it runs whatever the flag names. Code inside the workspace is a different matter: a
//! test, a build script or a Makefile there runs under any rule that lets the tool run at all,
//! and is only as trusted as whoever could edit the workspace. The lists cover common tools
//! (cargo, npm/npx, git, make, python, pytest, node, perl, ruby); they are a guard rail, not a
//! proof — the sandbox is the boundary.

/// A word that lets the command run code of the command line's choosing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeFlag {
    /// The word as written (`--config`, `-Zunstable-options`, `SHELL=/bin/x`).
    pub word: String,
    /// What it does, completing "`word` …".
    pub why: &'static str,
}

/// The first word at index `from` or later that runs code of the command line's choosing.
/// `inside` says whether a path (as written, relative to where the command runs) is inside
/// the workspace.
pub fn find(words: &[String], from: usize, inside: &dyn Fn(&str) -> bool) -> Option<CodeFlag> {
    let tool = basename(words.first()?);
    let mut hits: Vec<(usize, &'static str)> = Vec::new();
    match tool {
        "cargo" => cargo(words, inside, &mut hits),
        "npm" | "npx" | "pnpm" | "yarn" => npm(tool, words, inside, &mut hits),
        "git" => git(words, inside, &mut hits),
        "make" | "gmake" => make(words, inside, &mut hits),
        "pytest" | "py.test" => pytest(words, 1, &mut hits),
        "node" | "nodejs" => interpreter(words, NODE, &mut hits),
        "perl" | "ruby" => interpreter(words, PERL, &mut hits),
        t if t.starts_with("python") || t.starts_with("pypy") => python(words, &mut hits),
        _ => {}
    }
    hits.into_iter()
        .filter(|(i, _)| *i >= from)
        .min_by_key(|(i, _)| *i)
        .map(|(i, why)| CodeFlag {
            word: words[i].clone(),
            why,
        })
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// `--name` or `--name=value`, or an abbreviation of `--name` (at least two letters after
/// the dashes): git, npm and make accept any unambiguous prefix of a long option
/// (`--upload-pa=` is `--upload-pack=`), and taking a prefix for the option only ever asks
/// more, never less.
fn long(word: &str, name: &str) -> bool {
    if word == name || word.strip_prefix(name).is_some_and(|r| r.starts_with('=')) {
        return true;
    }
    let given = word.split_once('=').map_or(word, |(k, _)| k);
    name.starts_with("--") && given.starts_with("--") && given.len() >= 4 && name.starts_with(given)
}

/// The value of an option at `i` (`--name=value`, `-Xvalue` or the next word).
fn value<'a>(words: &'a [String], i: usize, name: &str) -> Option<&'a str> {
    let w = words[i].as_str();
    if let Some(v) = w.strip_prefix(name) {
        if let Some(v) = v.strip_prefix('=') {
            return Some(v);
        }
        if !v.is_empty() && !name.starts_with("--") {
            return Some(v);
        }
    }
    words.get(i + 1).map(String::as_str)
}

const OUTSIDE: &str = "points at a directory or file outside the workspace, whose code would run";

fn cargo(words: &[String], inside: &dyn Fn(&str) -> bool, hits: &mut Vec<(usize, &'static str)>) {
    for (i, w) in words.iter().enumerate().skip(1) {
        if w == "--" {
            break;
        }
        if long(w, "--config") {
            hits.push((
                i,
                "sets cargo configuration on the command line (a rustc wrapper, a runner or a linker it names would run)",
            ));
        } else if w.starts_with("-Z")
            || (!w.starts_with("--") && w.starts_with('-') && w.contains('Z'))
        {
            hits.push((i, "enables unstable cargo behaviour"));
        } else if (long(w, "--manifest-path") || w.starts_with("-C"))
            && let Some(path) = value(
                words,
                i,
                if w.starts_with("-C") {
                    "-C"
                } else {
                    "--manifest-path"
                },
            )
            && !inside(path)
        {
            hits.push((i, OUTSIDE));
        }
    }
}

fn npm(
    tool: &str,
    words: &[String],
    inside: &dyn Fn(&str) -> bool,
    hits: &mut Vec<(usize, &'static str)>,
) {
    const CODE: &[&str] = &[
        "--script-shell",
        "--shell",
        "--node-options",
        "--userconfig",
        "--globalconfig",
        "--call",
        "--package",
        "--git",
        "--editor",
        "--browser",
        "--viewer",
        "--node-gyp",
        "--init-module",
        "--onload-script",
    ];
    for (i, w) in words.iter().enumerate().skip(1) {
        if w == "--" {
            break;
        }
        if CODE.iter().any(|c| long(w, c)) || w == "-c" || (tool == "npx" && w == "-p") {
            hits.push((
                i,
                "makes npm run a program or load a configuration named on the command line",
            ));
        } else if let Some(name) = ["--prefix", "--dir", "-C"].into_iter().find(|n| long(w, n))
            && let Some(path) = value(words, i, name)
            && !inside(path)
        {
            hits.push((i, OUTSIDE));
        }
    }
}

fn git(words: &[String], inside: &dyn Fn(&str) -> bool, hits: &mut Vec<(usize, &'static str)>) {
    const CONFIG: &str = "sets git configuration on the command line (an alias, pager, hook path or fsmonitor it names would run)";
    let mut i = 1;
    // Options before the subcommand.
    while let Some(w) = words.get(i) {
        if !w.starts_with('-') {
            break;
        }
        if w.starts_with("-c")
            || long(w, "--config-env")
            || (long(w, "--exec-path") && w.contains('='))
        {
            hits.push((i, CONFIG));
        } else if (w.starts_with("-C") || long(w, "--git-dir") || long(w, "--work-tree"))
            && let Some(path) = value(
                words,
                i,
                if w.starts_with("-C") {
                    "-C"
                } else if w.starts_with("--git-dir") {
                    "--git-dir"
                } else {
                    "--work-tree"
                },
            )
            && !inside(path)
        {
            hits.push((i, OUTSIDE));
        }
        let takes_value = matches!(
            w.as_str(),
            "-c" | "-C"
                | "--git-dir"
                | "--work-tree"
                | "--namespace"
                | "--config-env"
                | "--super-prefix"
        );
        i += if takes_value { 2 } else { 1 };
    }
    let Some(sub) = words.get(i) else { return };
    let (flags, why): (&[&str], &'static str) = match sub.as_str() {
        "clone" => (
            &["-u", "--upload-pack", "--template", "-c", "--config"],
            "makes git run a program, hooks or configuration named on the command line",
        ),
        "fetch" | "pull" | "ls-remote" => (
            &["--upload-pack"],
            "makes git run a program named on the command line",
        ),
        "push" => (
            &["--receive-pack", "--exec"],
            "makes git run a program named on the command line",
        ),
        "archive" => (
            &["--exec"],
            "makes git run a program named on the command line",
        ),
        "rebase" => (
            &["-x", "--exec"],
            "runs a shell command named on the command line",
        ),
        "difftool" | "mergetool" => (
            &["-x", "--extcmd", "-t", "--tool"],
            "runs a program named on the command line",
        ),
        "grep" => (
            &["-O", "--open-files-in-pager"],
            "runs a program named on the command line",
        ),
        "init" => (
            &["--template"],
            "copies hooks from a directory named on the command line",
        ),
        "submodule" => (
            &["foreach"],
            "runs a shell command named on the command line",
        ),
        "bisect" => (&["run"], "runs a command named on the command line"),
        "filter-branch" => {
            hits.push((i, "runs shell commands named on the command line"));
            return;
        }
        _ => return,
    };
    for (j, w) in words.iter().enumerate().skip(i + 1) {
        if w == "--" {
            break;
        }
        let hit = flags.iter().any(|f| {
            long(w, f)
                || (f.len() == 2
                    && !f.starts_with("--")
                    && w.starts_with(f)
                    && w.len() > 2
                    && f.starts_with('-'))
        });
        if hit {
            hits.push((j, why));
        }
    }
}

fn make(words: &[String], inside: &dyn Fn(&str) -> bool, hits: &mut Vec<(usize, &'static str)>) {
    for (i, w) in words.iter().enumerate().skip(1) {
        if w == "--" {
            break;
        }
        if long(w, "--eval") || w.starts_with("-E") {
            hits.push((i, "evaluates make code given on the command line"));
        } else if !w.starts_with('-') && w.contains('=') {
            hits.push((
                i,
                "overrides a make variable, which recipes may run as a command (SHELL, CC, …)",
            ));
        } else {
            let path_option = [
                ("-f", "-f"),
                ("--file", "--file"),
                ("--makefile", "--makefile"),
                ("-C", "-C"),
                ("--directory", "--directory"),
                ("-I", "-I"),
                ("--include-dir", "--include-dir"),
            ]
            .into_iter()
            .find(|(p, _)| {
                if p.starts_with("--") {
                    long(w, p)
                } else {
                    w.starts_with(p)
                }
            });
            if let Some((_, name)) = path_option
                && let Some(path) = value(words, i, name)
                && !inside(path)
            {
                hits.push((i, OUTSIDE));
            }
        }
    }
}

/// `python [options] (-c CODE | -m MODULE | SCRIPT) …`: `-c` runs code from the command line;
/// after `-m pytest`, pytest's own flags.
fn python(words: &[String], hits: &mut Vec<(usize, &'static str)>) {
    let mut i = 1;
    while let Some(w) = words.get(i) {
        if !w.starts_with('-') || w == "-" || w == "--" {
            return;
        }
        if w.starts_with("--") {
            i += 1;
            continue;
        }
        // A cluster of short options; `-W`, `-X` and `-m` take the rest (or the next word).
        for (at, c) in w[1..].char_indices() {
            match c {
                'c' => {
                    hits.push((i, "runs Python code given on the command line"));
                    return;
                }
                'm' => {
                    let attached = &w[1 + at + 1..];
                    let (module, next) = if attached.is_empty() {
                        (words.get(i + 1).map(String::as_str), i + 2)
                    } else {
                        (Some(attached), i + 1)
                    };
                    if module == Some("pytest") {
                        pytest(words, next, hits);
                    }
                    return;
                }
                'W' | 'X' => {
                    if w[1 + at + 1..].is_empty() {
                        i += 1;
                    }
                    break;
                }
                _ => {}
            }
        }
        i += 1;
    }
}

fn pytest(words: &[String], from: usize, hits: &mut Vec<(usize, &'static str)>) {
    for (i, w) in words.iter().enumerate().skip(from) {
        if w == "-p" || (w.starts_with("-p") && w.len() > 2) {
            hits.push((i, "loads a pytest plugin named on the command line"));
        } else if w == "-o" || (w.starts_with("-o") && w.len() > 2) || long(w, "--override-ini") {
            hits.push((
                i,
                "overrides pytest's configuration (addopts can load plugins)",
            ));
        } else if w == "-c" || long(w, "--config-file") || long(w, "--rootdir") {
            hits.push((
                i,
                "takes pytest's configuration from a file of its choosing",
            ));
        }
    }
}

/// Options that run code from the command line, by interpreter.
const NODE: &[&str] = &[
    "-e",
    "--eval",
    "-p",
    "--print",
    "-r",
    "--require",
    "--import",
    "--loader",
    "--experimental-loader",
];
const PERL: &[&str] = &["-e", "-E", "-r", "-M", "-I"];

fn interpreter(words: &[String], flags: &[&str], hits: &mut Vec<(usize, &'static str)>) {
    for (i, w) in words.iter().enumerate().skip(1) {
        if !w.starts_with('-') || w == "--" {
            return;
        }
        let short_cluster = !w.starts_with("--")
            && flags
                .iter()
                .filter(|f| f.len() == 2)
                .any(|f| w[1..].contains(&f[1..]));
        if short_cluster || flags.iter().any(|f| f.starts_with("--") && long(w, f)) {
            hits.push((i, "runs code given on the command line"));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag(line: &str, from: usize) -> Option<String> {
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        let inside = |p: &str| !p.starts_with('/') && !p.starts_with("..");
        find(&words, from, &inside).map(|f| f.word)
    }

    #[test]
    fn code_from_the_command_line_is_found() {
        for (line, from, word) in [
            (
                "cargo test --config build.rustc-wrapper=/tmp/x",
                2,
                "--config",
            ),
            ("cargo test --config=x", 2, "--config=x"),
            ("cargo test -Zbuild-std", 2, "-Zbuild-std"),
            ("cargo test -Z unstable-options", 2, "-Z"),
            (
                "cargo test --manifest-path /tmp/x/Cargo.toml",
                2,
                "--manifest-path",
            ),
            (
                "cargo test --manifest-path=../x/Cargo.toml",
                2,
                "--manifest-path=../x/Cargo.toml",
            ),
            ("npm test --script-shell=/tmp/x", 2, "--script-shell=/tmp/x"),
            (
                "npm run build --node-options=--require=/tmp/x.js",
                3,
                "--node-options=--require=/tmp/x.js",
            ),
            ("npx -c id", 1, "-c"),
            ("npm test --prefix /tmp/other", 2, "--prefix"),
            ("git -c core.pager=id log", 1, "-c"),
            ("git -ccore.fsmonitor=x status", 1, "-ccore.fsmonitor=x"),
            ("git -C /tmp/repo status", 1, "-C"),
            ("git rebase -x id main", 2, "-x"),
            ("git clone --upload-pack=x a b", 2, "--upload-pack=x"),
            ("git submodule foreach id", 2, "foreach"),
            ("make test SHELL=/tmp/x", 2, "SHELL=/tmp/x"),
            ("make -f /tmp/evil.mk test", 1, "-f"),
            ("make --eval=x test", 1, "--eval=x"),
            ("python -c print(1)", 1, "-c"),
            ("python3 -Ic x", 1, "-Ic"),
            ("python -m pytest -p evil", 3, "-p"),
            ("pytest -pevil", 1, "-pevil"),
            ("node -e 1", 1, "-e"),
            ("node --require=/tmp/x.js app.js", 1, "--require=/tmp/x.js"),
            ("perl -ne print", 1, "-ne"),
        ] {
            assert_eq!(flag(line, from).as_deref(), Some(word), "{line}");
        }
    }

    #[test]
    fn ordinary_use_is_not_flagged() {
        for (line, from) in [
            ("cargo test --lib -- --nocapture --config", 2),
            ("cargo test --manifest-path sub/Cargo.toml", 2),
            ("cargo build --release -p anvil", 2),
            ("npm test -- --watch", 2),
            ("npm run build", 2),
            ("git status --porcelain", 2),
            ("git commit -c HEAD", 2),
            ("git -C sub status", 1),
            ("git cherry-pick -x abc", 2),
            ("make test", 2),
            ("make -C sub test -j4", 1),
            ("python -m pytest tests/test_x.py -k name", 3),
            ("python script.py -c x", 1),
            ("node app.js -e x", 1),
        ] {
            assert_eq!(flag(line, from), None, "{line}");
        }
        // Inside the rule's own prefix, a flag is the rule's explicit choice.
        assert_eq!(flag("cargo --config x test", 3), None);
    }

    #[test]
    fn abbreviated_long_options_and_pytest_config_are_code_flags() {
        for line in [
            "git fetch --upload-pa=/tmp/x origin",
            "git clone --upload-pa=/tmp/x url",
            "git push --receive-p=/tmp/x origin",
            "git rebase --exe=/tmp/x main",
            "npm test --script-shel=/tmp/x",
            "make --eva=$(shell:x)",
            "pytest -o addopts=-pX",
            "pytest --override-ini=addopts=-pX",
            "pytest -c /tmp/x.ini",
            "ruby -rX x.rb",
            "perl -MX -e1",
        ] {
            assert!(flag(line, 1).is_some(), "{line}");
        }
        // Two letters are not enough to stand for an option.
        assert_eq!(flag("git fetch --u", 1), None);
    }
}
