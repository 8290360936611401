//! What a command would run, for deny and ask rules: the command as written, and the command
//! behind each wrapper it goes through.
//!
//! `env rm x`, `sudo -u me rm x`, `xargs rm`, `find . -exec rm {} +`, `bash -c 'rm x'`,
//! `eval "rm x"` and `git -C . push` all run something other than their first word says. This
//! module lists those *invocations* so a deny rule is matched against each of them. It is a
//! guard rail, not a proof: programs that run commands of their own (an interpreter running a
//! script, `make`, a test runner, a git alias from a config file) are not looked into. What it
//! cannot read at all — a command name that is a variable, `eval` of a non-literal, a shell
//! reading its script from stdin — is an [`Invocation::unknown`], which any rule could match.

use super::shell::{self, Command, Word};

/// One reading of what runs: its words, and whether more words may follow (`xargs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub words: Vec<Word>,
    pub open: bool,
}

impl Invocation {
    /// Something runs that cannot be known from the line.
    pub fn unknown(source: &str) -> Self {
        Self {
            words: vec![Word::Dynamic(source.to_string())],
            open: true,
        }
    }

    /// The command itself is only known when it runs.
    pub fn is_unknown(&self) -> bool {
        matches!(self.words.first(), Some(Word::Dynamic(_)) | None)
    }

    /// The invocation as a person would read it.
    pub fn display(&self) -> String {
        let mut s = self
            .words
            .iter()
            .map(|w| match w {
                Word::Literal(v) => v.as_str(),
                Word::Dynamic(src) => src.as_str(),
            })
            .collect::<Vec<_>>()
            .join(" ");
        if self.open {
            s.push_str(" …");
        }
        s
    }
}

/// Nesting bound for wrappers in wrappers (`bash -c "eval 'env rm'"`): past it, unknown.
const MAX_DEPTH: usize = 8;
/// Bound on invocations per command, against lines built to explode the search.
const MAX_INVOCATIONS: usize = 256;
/// Bound on the later words tried as the command after an option this module does not know.
const MAX_STARTS: usize = 32;

/// Every invocation a command amounts to, itself first (assignments left out; the rule
/// matching for allow rules sees them).
pub fn invocations(command: &Command) -> Vec<Invocation> {
    let mut out = Vec::new();
    // Git takes configuration (aliases included) from the environment: what such a git
    // command runs cannot be judged from its words.
    let git_env = command.assignments.iter().any(|a| {
        a.literal()
            .is_none_or(|a| a.starts_with("GIT_CONFIG") || a.starts_with("GIT_EXEC_PATH"))
    });
    expand(command.words.clone(), false, 0, &mut out);
    if git_env && out.iter().any(|i| i.display().starts_with("git")) {
        out.push(Invocation::unknown("git configured from the environment"));
    }
    out
}

/// Every invocation of a shell script (the argument of `bash -c`, `eval`, `trap`, …).
fn script(source: &str, depth: usize, out: &mut Vec<Invocation>) {
    let parsed = shell::parse(source);
    if parsed.incomplete {
        out.push(Invocation::unknown(source));
    }
    for c in parsed.commands {
        expand(c.words, false, depth + 1, out);
    }
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Options of a wrapper: which take a value, which do not. An option not listed makes the rest
/// ambiguous, and every later word is then tried as the start of the command.
struct Options {
    short_value: &'static str,
    short_flag: &'static str,
    long_value: &'static [&'static str],
    long_flag: &'static [&'static str],
    /// Operands before the command (`timeout DURATION`, `chroot DIR`).
    operands: usize,
}

const NO_OPTIONS: Options = Options {
    short_value: "",
    short_flag: "",
    long_value: &[],
    long_flag: &[],
    operands: 0,
};

/// Wrappers that run the rest of their words as a command.
fn wrapper(name: &str) -> Option<Options> {
    let o = |short_value, short_flag, long_value, long_flag, operands| Options {
        short_value,
        short_flag,
        long_value,
        long_flag,
        operands,
    };
    Some(match name {
        "command" => o("", "pvV", &[], &[], 0),
        "builtin" | "nohup" | "coproc" | "unbuffer" | "catchsegv" | "fakeroot" | "valgrind"
        | "firejail" | "systemd-run" | "dbus-run-session" | "proxychains" | "proxychains4"
        | "torsocks" | "parallel" => NO_OPTIONS,
        "exec" => o("a", "cl", &[], &[], 0),
        "nice" => o("n", "", &["--adjustment"], &[], 0),
        "time" => o(
            "fo",
            "apqv",
            &["--format", "--output"],
            &["--append", "--verbose", "--portability", "--quiet"],
            0,
        ),
        "timeout" => o(
            "ks",
            "v",
            &["--kill-after", "--signal"],
            &["--foreground", "--preserve-status", "--verbose"],
            1,
        ),
        "stdbuf" => o("ioe", "", &["--input", "--output", "--error"], &[], 0),
        "ionice" => o("cnpPu", "t", &["--class", "--classdata"], &["--ignore"], 0),
        "setsid" => o("", "cfw", &[], &["--ctty", "--fork", "--wait"], 0),
        "sudo" => o(
            "CDghpRrtTUu",
            "AbEeHiKklnPSsVv",
            &[
                "--close-from",
                "--chdir",
                "--group",
                "--host",
                "--prompt",
                "--chroot",
                "--role",
                "--type",
                "--command-timeout",
                "--other-user",
                "--user",
            ],
            &[
                "--askpass",
                "--background",
                "--preserve-env",
                "--edit",
                "--set-home",
                "--login",
                "--remove-timestamp",
                "--reset-timestamp",
                "--list",
                "--non-interactive",
                "--preserve-groups",
                "--stdin",
                "--shell",
                "--version",
                "--validate",
            ],
            0,
        ),
        "doas" => o("Cu", "Lns", &[], &[], 0),
        "chroot" => o("", "", &["--userspec", "--groups"], &["--skip-chdir"], 1),
        "taskset" => o("", "acp", &[], &["--all-tasks", "--cpu-list", "--pid"], 1),
        "chrt" => o(
            "T",
            "abdefimopPrRv",
            &["--sched-runtime", "--sched-deadline", "--sched-period"],
            &[
                "--all-tasks",
                "--batch",
                "--deadline",
                "--fifo",
                "--idle",
                "--other",
                "--rr",
                "--reset-on-fork",
                "--verbose",
                "--pid",
            ],
            1,
        ),
        "strace" => o("abeEIoOpPsSuUX", "cCdDfFhiknqrtTvVwxyYZ", &[], &[], 0),
        "ltrace" => o("aAeEnlosuX", "bcCdfhiLrStTV", &[], &[], 0),
        "unshare" => o(
            "SGRw",
            "ciCmnprTUuf",
            &["--setuid", "--setgid", "--root", "--wd"],
            &[],
            0,
        ),
        _ => return None,
    })
}

fn expand(words: Vec<Word>, open: bool, depth: usize, out: &mut Vec<Invocation>) {
    if words.is_empty() {
        return;
    }
    if depth > MAX_DEPTH || out.len() >= MAX_INVOCATIONS {
        out.push(Invocation::unknown("a command nested too deeply to judge"));
        return;
    }
    out.push(Invocation {
        words: words.clone(),
        open,
    });
    let name = match &words[0] {
        Word::Literal(v) => basename(v).to_string(),
        // Already an invocation any rule could match.
        Word::Dynamic(_) => return,
    };
    let rest = &words[1..];
    match name.as_str() {
        "env" => env(rest, open, depth, out),
        "xargs" => xargs(rest, depth, out),
        "find" => find(rest, depth, out),
        "fd" | "fdfind" => fd(rest, depth, out),
        "git" => git(&words, open, depth, out),
        "busybox" => expand(rest.to_vec(), open, depth + 1, out),
        "eval" => shell_string(join(rest), depth, out),
        "trap" => {
            // trap [-lp] [ACTION] [SIGNAL…]: the action is shell code.
            if let Some(action) = rest
                .iter()
                .find(|w| w.literal().is_none_or(|v| !v.starts_with('-') || v == "-"))
                && action.literal() != Some("-")
            {
                shell_string(Some(action.clone()), depth, out);
            }
        }
        "alias" => {
            for w in rest {
                match w.literal().and_then(|v| v.split_once('=')) {
                    Some((_, value)) => script(value, depth, out),
                    None if w.literal().is_none() => out.push(Invocation::unknown("an alias")),
                    None => {}
                }
            }
        }
        "watch" => watch(rest, depth, out),
        "su" | "runuser" | "script" | "flock" => {
            if let Some(code) = dash_c(rest) {
                shell_string(Some(code), depth, out);
            } else if name == "flock" {
                // flock [options] FILE COMMAND…
                wrapped(
                    rest,
                    &Options {
                        operands: 1,
                        ..NO_OPTIONS
                    },
                    open,
                    depth,
                    out,
                );
            }
        }
        "bash" | "sh" | "dash" | "zsh" | "ksh" | "mksh" | "ash" | "yash" | "posh" | "fish" => {
            shell_program(rest, depth, out);
        }
        other => {
            if let Some(options) = wrapper(other) {
                wrapped(rest, &options, open, depth, out);
            }
        }
    }
}

/// The words of a shell string argument joined (`eval a b` runs `a b`); unknown if any is not
/// literal.
fn join(words: &[Word]) -> Option<Word> {
    if words.is_empty() {
        return None;
    }
    let parts: Option<Vec<&str>> = words.iter().map(Word::literal).collect();
    Some(match parts {
        Some(parts) => Word::Literal(parts.join(" ")),
        None => Word::Dynamic(
            words
                .iter()
                .map(|w| match w {
                    Word::Literal(v) | Word::Dynamic(v) => v.as_str(),
                })
                .collect::<Vec<_>>()
                .join(" "),
        ),
    })
}

fn shell_string(code: Option<Word>, depth: usize, out: &mut Vec<Invocation>) {
    match code {
        None => {}
        Some(Word::Literal(code)) => script(&code, depth, out),
        Some(Word::Dynamic(src)) => out.push(Invocation::unknown(&src)),
    }
}

/// The word after `-c` / `--command` (or `--command=…`, or a cluster ending in c: `-qc`).
fn dash_c(words: &[Word]) -> Option<Word> {
    let mut it = words.iter();
    while let Some(w) = it.next() {
        match w.literal() {
            Some("-c" | "--command") => return it.next().cloned(),
            Some(v) if !v.starts_with("--") && v.starts_with('-') && v.ends_with('c') => {
                return it.next().cloned();
            }
            Some(v) if v.starts_with("--command=") => {
                return Some(Word::Literal(v["--command=".len()..].to_string()));
            }
            _ => {}
        }
    }
    None
}

/// `bash [options] [-c STRING | FILE | (stdin)]`.
fn shell_program(words: &[Word], depth: usize, out: &mut Vec<Invocation>) {
    let mut command_string = false;
    let mut from_stdin = false;
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let Some(v) = w.literal() else {
            out.push(Invocation::unknown(&format!(
                "a shell given {}",
                display(w)
            )));
            return;
        };
        match v {
            "--" | "-" => break,
            "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file" => {
                it.next();
            }
            v if v.starts_with("--") => {}
            v if (v.starts_with('-') || v.starts_with('+')) && v.len() > 1 => {
                command_string |= v[1..].contains('c');
                from_stdin |= v[1..].contains('s');
            }
            _ => {
                match (command_string, from_stdin) {
                    (true, _) => script(v, depth, out),
                    (false, true) => out.push(Invocation::unknown(
                        "a shell reading its commands from stdin",
                    )),
                    // A script file is a program of its own, like `python x.py`: not looked
                    // into.
                    (false, false) => {}
                }
                return;
            }
        }
    }
    match (command_string, it.next()) {
        (true, Some(code)) => shell_string(Some(code.clone()), depth, out),
        (true, None) => {}
        (false, Some(file)) if !from_stdin && file.literal().is_some() => {}
        // No -c and no script file: the program comes from stdin (`curl … | sh`).
        (false, _) => out.push(Invocation::unknown(
            "a shell reading its commands from stdin",
        )),
    }
}

fn display(w: &Word) -> &str {
    match w {
        Word::Literal(v) | Word::Dynamic(v) => v,
    }
}

/// A wrapper's words: options, operands, then the command.
fn wrapped(words: &[Word], options: &Options, open: bool, depth: usize, out: &mut Vec<Invocation>) {
    let mut i = 0;
    let mut operands = options.operands;
    while i < words.len() {
        let Some(v) = words[i].literal() else {
            // A variable where an option or the command should be: anything could run.
            out.push(Invocation::unknown("a wrapper's variable argument"));
            return;
        };
        if v == "--" {
            i += 1;
            break;
        }
        if let Some(long) = v.strip_prefix("--") {
            let name = format!("--{}", long.split('=').next().unwrap_or(long));
            if options.long_value.contains(&name.as_str()) {
                i += if long.contains('=') { 1 } else { 2 };
            } else if options.long_flag.contains(&name.as_str()) {
                i += 1;
            } else {
                return every_suffix(words, i + 1, open, depth, out);
            }
            continue;
        }
        if v.len() > 1 && v.starts_with('-') && operands == options.operands {
            // `nice -10`: a number as an option.
            if v[1..].bytes().all(|b| b.is_ascii_digit()) {
                i += 1;
                continue;
            }
            let mut skip = 1;
            for (at, c) in v[1..].char_indices() {
                if options.short_value.contains(c) {
                    if at + c.len_utf8() == v.len() - 1 {
                        skip = 2;
                    }
                    break;
                }
                if !options.short_flag.contains(c) {
                    return every_suffix(words, i + 1, open, depth, out);
                }
            }
            i += skip;
            continue;
        }
        if operands > 0 {
            operands -= 1;
            i += 1;
            continue;
        }
        break;
    }
    // `env`-style assignments never reach here; the command starts at i.
    if i < words.len() {
        expand(words[i..].to_vec(), open, depth + 1, out);
    }
}

/// After an option this module does not know, any later word may be where the command starts.
fn every_suffix(words: &[Word], from: usize, open: bool, depth: usize, out: &mut Vec<Invocation>) {
    for start in from..words.len() {
        if out.len() >= MAX_INVOCATIONS || start - from >= MAX_STARTS {
            out.push(Invocation::unknown("too many readings of a command"));
            return;
        }
        expand(words[start..].to_vec(), open, depth + 1, out);
    }
}

/// `env [-i] [-u NAME] [-C DIR] [-S STRING] [NAME=VALUE…] [COMMAND…]`.
fn env(words: &[Word], open: bool, depth: usize, out: &mut Vec<Invocation>) {
    let mut i = 0;
    while i < words.len() {
        let Some(v) = words[i].literal() else {
            out.push(Invocation::unknown("env given a variable"));
            return;
        };
        // -S STRING: the string is split into words, which run with the rest.
        let split = match v {
            "-S" | "--split-string" => Some((words.get(i + 1).cloned(), i + 2)),
            v if v.starts_with("--split-string=") => Some((
                Some(Word::Literal(v["--split-string=".len()..].to_string())),
                i + 1,
            )),
            v if v.starts_with("-S") => Some((Some(Word::Literal(v[2..].to_string())), i + 1)),
            // A cluster of short options with S in it (`-iS 'rm x'`, `-vSrm`).
            v if !v.starts_with("--") && v.starts_with('-') && v.contains('S') => {
                let rest = &v[v.find('S').map_or(v.len(), |p| p + 1)..];
                if rest.is_empty() {
                    Some((words.get(i + 1).cloned(), i + 2))
                } else {
                    Some((Some(Word::Literal(rest.to_string())), i + 1))
                }
            }
            _ => None,
        };
        if let Some((string, next)) = split {
            match string {
                Some(Word::Literal(s)) => {
                    let mut w: Vec<Word> = s
                        .split_whitespace()
                        .map(|p| Word::Literal(p.to_string()))
                        .collect();
                    w.extend_from_slice(words.get(next..).unwrap_or_default());
                    expand(w, open, depth + 1, out);
                }
                Some(Word::Dynamic(src)) => out.push(Invocation::unknown(&src)),
                None => {}
            }
            return;
        }
        match v {
            "-u" | "--unset" | "-C" | "--chdir" => i += 2,
            "--" => {
                i += 1;
                break;
            }
            v if v.starts_with('-') && v.len() > 1 => i += 1,
            v if v.contains('=') => i += 1,
            _ => break,
        }
    }
    if i < words.len() {
        expand(words[i..].to_vec(), open, depth + 1, out);
    }
}

/// `xargs [options] [COMMAND [ARGS…]]`: the command gets more words from stdin.
fn xargs(words: &[Word], depth: usize, out: &mut Vec<Invocation>) {
    let mut replace: Option<String> = None;
    let mut i = 0;
    while i < words.len() {
        let Some(v) = words[i].literal() else {
            out.push(Invocation::unknown("xargs's variable argument"));
            return;
        };
        if v == "--" {
            i += 1;
            break;
        }
        if let Some(long) = v.strip_prefix("--") {
            let (name, value) = long.split_once('=').unwrap_or((long, ""));
            if name == "replace" {
                replace = Some(if value.is_empty() {
                    "{}".into()
                } else {
                    value.into()
                });
            }
            i += 1;
            continue;
        }
        if v.len() > 1 && v.starts_with('-') {
            let cluster = &v[1..];
            for (at, c) in cluster.char_indices() {
                let attached = &cluster[at + c.len_utf8()..];
                match c {
                    // Options with a value, attached or in the next word.
                    'a' | 'E' | 'd' | 'I' | 'L' | 'n' | 'P' | 's' => {
                        let value = if attached.is_empty() {
                            i += 1;
                            words.get(i).and_then(Word::literal).unwrap_or_default()
                        } else {
                            attached
                        };
                        if c == 'I' {
                            replace = Some(value.to_string());
                        }
                        break;
                    }
                    // Options with an optional attached value.
                    'e' | 'i' | 'l' => {
                        if c == 'i' {
                            replace =
                                Some(if attached.is_empty() { "{}" } else { attached }.into());
                        }
                        break;
                    }
                    _ => {}
                }
            }
            i += 1;
            continue;
        }
        break;
    }
    let mut command: Vec<Word> = words[i..].to_vec();
    if command.is_empty() {
        command.push(Word::Literal("echo".into()));
    }
    if let Some(r) = replace {
        for w in &mut command {
            if let Word::Literal(v) = w
                && v.contains(&r)
            {
                *w = Word::Dynamic(v.clone());
            }
        }
    }
    expand(command, true, depth + 1, out);
}

/// `find PATHS… EXPRESSION`: `-exec`/`-execdir`/`-ok`/`-okdir` run a command; `-delete`
/// removes like `rm`.
fn find(words: &[Word], depth: usize, out: &mut Vec<Invocation>) {
    let paths: Vec<Word> = words
        .iter()
        .take_while(|w| {
            w.literal()
                .is_some_and(|v| !v.starts_with('-') && v != "(" && v != "!")
        })
        .cloned()
        .collect();
    let mut i = 0;
    while i < words.len() {
        match words[i].literal() {
            Some("-exec" | "-execdir" | "-ok" | "-okdir") => {
                let command: Vec<Word> = words[i + 1..]
                    .iter()
                    .take_while(|w| !matches!(w.literal(), Some(";" | "+")))
                    .map(placeholder)
                    .collect();
                i += command.len() + 1;
                expand(command, false, depth + 1, out);
            }
            Some("-delete") => {
                let mut rm = vec![Word::Literal("rm".into())];
                rm.extend(paths.iter().cloned());
                out.push(Invocation {
                    words: rm,
                    open: true,
                });
            }
            _ => {}
        }
        i += 1;
    }
}

/// `{}` is a file name find or fd fills in.
fn placeholder(w: &Word) -> Word {
    match w {
        Word::Literal(v) if v.contains("{}") => Word::Dynamic(v.clone()),
        other => other.clone(),
    }
}

/// `fd … -x/--exec CMD` and `-X/--exec-batch CMD`.
fn fd(words: &[Word], depth: usize, out: &mut Vec<Invocation>) {
    let mut i = 0;
    while i < words.len() {
        if matches!(
            words[i].literal(),
            Some("-x" | "--exec" | "-X" | "--exec-batch")
        ) {
            let command: Vec<Word> = words[i + 1..]
                .iter()
                .take_while(|w| w.literal() != Some(";"))
                .map(placeholder)
                .collect();
            i += command.len() + 1;
            expand(command, true, depth + 1, out);
        }
        i += 1;
    }
}

/// `watch [options] COMMAND…`: run through `sh -c` with the words joined, unless `-x`.
fn watch(words: &[Word], depth: usize, out: &mut Vec<Invocation>) {
    let mut exec = false;
    let mut i = 0;
    while let Some(v) = words.get(i).and_then(Word::literal) {
        match v {
            "-n" | "--interval" | "-q" | "--equexit" => i += 2,
            "-x" | "--exec" => {
                exec = true;
                i += 1;
            }
            "--" => {
                i += 1;
                break;
            }
            v if v.starts_with('-') && v.len() > 1 => i += 1,
            _ => break,
        }
    }
    let command = words.get(i..).unwrap_or_default();
    if exec {
        expand(command.to_vec(), false, depth + 1, out);
    } else {
        shell_string(join(command), depth, out);
    }
}

/// Git's options before the subcommand (`git -C . push`, `git --git-dir=x push`): the
/// subcommand is what a `git push` rule is about. A `-c alias.NAME=…` on the line is followed.
fn git(words: &[Word], open: bool, depth: usize, out: &mut Vec<Invocation>) {
    const VALUE: &[&str] = &[
        "-C",
        "-c",
        "--git-dir",
        "--work-tree",
        "--namespace",
        "--config-env",
        "--super-prefix",
        "--exec-path",
        "--list-cmds",
        "--attr-source",
    ];
    const FLAG: &[&str] = &[
        "-p",
        "--paginate",
        "-P",
        "--no-pager",
        "--bare",
        "--no-replace-objects",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--no-optional-locks",
        "--no-lazy-fetch",
        "--no-advice",
    ];
    let mut aliases: Vec<(String, String)> = Vec::new();
    let mut i = 1;
    while i < words.len() {
        let Some(v) = words[i].literal() else {
            out.push(Invocation::unknown("git with a variable option"));
            return;
        };
        let name = v.split('=').next().unwrap_or(v);
        if v == "-c" || (v.starts_with("-c") && v.len() > 2) {
            let setting = if v == "-c" {
                words.get(i + 1).and_then(Word::literal)
            } else {
                Some(&v[2..])
            };
            if let Some((key, value)) = setting.and_then(|s| s.split_once('='))
                && let Some(alias) = key.to_ascii_lowercase().strip_prefix("alias.")
            {
                aliases.push((alias.to_string(), value.to_string()));
            }
            i += if v == "-c" { 2 } else { 1 };
        } else if name == "--config-env" {
            // `--config-env=KEY=VAR`: KEY's value comes from the environment.
            let setting = match v.split_once('=') {
                Some((_, rest)) => Some(rest),
                None => words.get(i + 1).and_then(Word::literal),
            };
            if setting.is_none_or(|s| s.to_ascii_lowercase().starts_with("alias.")) {
                out.push(Invocation::unknown(
                    "a git alias taken from the environment",
                ));
            }
            i += if v.contains('=') { 1 } else { 2 };
        } else if VALUE.contains(&name) {
            i += if v.contains('=') || (v.starts_with("-C") && v.len() > 2) {
                1
            } else {
                2
            };
        } else if FLAG.contains(&v) {
            i += 1;
        } else if v.starts_with('-') {
            // An option this list does not know: try every later word as the subcommand.
            for start in i + 1..words.len() {
                if start - i > MAX_STARTS {
                    push(out, vec![Word::Dynamic("git …".into())], true);
                    return;
                }
                let mut w = vec![words[0].clone()];
                w.extend_from_slice(&words[start..]);
                push(out, w, open);
            }
            return;
        } else {
            break;
        }
    }
    if i >= words.len() {
        return;
    }
    if i > 1 {
        let mut w = vec![words[0].clone()];
        w.extend_from_slice(&words[i..]);
        push(out, w, open);
    }
    // Alias names are matched as git does: without regard to case.
    let sub = words[i].literal().unwrap_or_default().to_ascii_lowercase();
    if let Some((_, value)) = aliases.iter().find(|(a, _)| *a == sub) {
        match value.strip_prefix('!') {
            Some(shell_code) => script(shell_code, depth, out),
            None => {
                let mut w = vec![words[0].clone()];
                w.extend(value.split_whitespace().map(|p| Word::Literal(p.into())));
                w.extend_from_slice(&words[i + 1..]);
                expand(w, open, depth + 1, out);
            }
        }
    }
}

fn push(out: &mut Vec<Invocation>, words: Vec<Word>, open: bool) {
    if out.len() < MAX_INVOCATIONS {
        out.push(Invocation { words, open });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The invocations of the first command of a line, as text.
    fn runs(line: &str) -> Vec<String> {
        let s = shell::parse(line);
        s.commands
            .iter()
            .flat_map(invocations)
            .map(|i| i.display())
            .collect()
    }

    fn runs_rm(line: &str) -> bool {
        runs(line)
            .iter()
            .any(|r| r == "rm x" || r.starts_with("rm x "))
    }

    #[test]
    fn wrappers_are_seen_through() {
        for line in [
            "command rm x",
            "command -p rm x",
            "env rm x",
            "env -i FOO=1 rm x",
            "env -u HOME -- rm x",
            "env -S 'rm x'",
            "nice rm x",
            "nice -n 5 rm x",
            "nice -10 rm x",
            "nohup rm x",
            "time rm x",
            "timeout 5 rm x",
            "timeout -s KILL 5s rm x",
            "sudo rm x",
            "sudo -u me -E rm x",
            "stdbuf -oL rm x",
            "setsid rm x",
            "exec rm x",
            "busybox rm x",
            "chroot / rm x",
            "flock /tmp/l rm x",
            "bash -c 'rm x'",
            "sh -ec 'cd . && rm x'",
            "bash -lc \"rm x\"",
            "su -c 'rm x'",
            "script -qc 'rm x' /dev/null",
            "parallel rm x ::: a",
            "find . -exec sh -c 'rm x' ;",
            "eval 'rm x'",
            "eval rm x",
            "trap 'rm x' EXIT",
            "watch rm x",
            "alias r='rm x'",
            "sudo env nice bash -c 'eval \"rm x\"'",
        ] {
            assert!(runs_rm(line), "{line}: {:?}", runs(line));
        }
    }

    #[test]
    fn xargs_find_and_fd_run_commands_with_more_words() {
        for line in [
            "xargs rm",
            "xargs -0 -n 1 rm",
            "xargs -I{} rm {}",
            "find . -name '*.o' -exec rm {} ;",
            "find . -execdir rm -f {} +",
            "fd -e o -x rm",
        ] {
            assert!(
                runs(line).iter().any(|r| r.starts_with("rm")),
                "{line}: {:?}",
                runs(line)
            );
        }
        assert!(runs("find . -delete").contains(&"rm . …".to_string()));
    }

    #[test]
    fn git_options_before_the_subcommand_are_set_aside() {
        for line in [
            "git -C . push",
            "git --git-dir=.git push",
            "git --git-dir .git --work-tree . push",
            "git -c user.name=x push",
            "git --no-pager -P push",
            "git -c alias.p=push p",
        ] {
            assert!(
                runs(line).iter().any(|r| r == "git push"),
                "{line}: {:?}",
                runs(line)
            );
        }
        assert!(runs("git -c 'alias.p=!rm x' p").iter().any(|r| r == "rm x"));
        // Alias names are case-insensitive to git.
        assert!(
            runs("git -c alias.p=push P")
                .iter()
                .any(|r| r == "git push")
        );
    }

    #[test]
    fn what_cannot_be_judged_is_marked_so() {
        for line in [
            "X=push git --config-env=alias.p=X p",
            "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=alias.p GIT_CONFIG_VALUE_0=push git p",
        ] {
            let s = shell::parse(line);
            let unknown = s.commands.iter().flat_map(invocations).any(|i| {
                i.display().contains("…") || i.words.iter().any(|w| w.literal().is_none())
            });
            assert!(unknown, "{line}: {:?}", runs(line));
        }
        assert!(runs_rm("env -iS 'rm x'"), "{:?}", runs("env -iS 'rm x'"));
    }

    #[test]
    fn what_cannot_be_read_is_unknown() {
        let unknown = |line: &str| {
            shell::parse(line)
                .commands
                .iter()
                .flat_map(invocations)
                .any(|i| i.is_unknown())
        };
        for line in [
            "$x a",
            "x=rm; $x a",
            "eval \"$cmd\"",
            "bash -c \"$cmd\"",
            "echo rm x | sh",
            "curl x | bash -s",
            "env $CMD",
            "sudo \"$@\"",
        ] {
            assert!(unknown(line), "{line}: {:?}", runs(line));
        }
        for line in ["cargo test", "git status", "bash script.sh", "echo rm"] {
            assert!(!unknown(line), "{line}: {:?}", runs(line));
        }
    }

    #[test]
    fn plain_commands_are_only_themselves() {
        assert_eq!(runs("cargo test --lib"), ["cargo test --lib"]);
        assert_eq!(runs("echo rm x"), ["echo rm x"]);
    }

    #[test]
    fn long_lines_with_unknown_options_stay_bounded() {
        let line = format!("sudo --frobnicate {}", "a ".repeat(20_000));
        let all: Vec<Invocation> = shell::parse(&line)
            .commands
            .iter()
            .flat_map(invocations)
            .collect();
        assert!(all.len() <= MAX_STARTS + 2, "{}", all.len());
        assert!(all.iter().any(Invocation::is_unknown));
    }

    #[test]
    fn nesting_is_bounded() {
        let line = format!("{}rm x", "eval ".repeat(20));
        let all: Vec<Invocation> = shell::parse(&line)
            .commands
            .iter()
            .flat_map(invocations)
            .collect();
        assert!(all.len() <= MAX_DEPTH + 3, "{all:?}");
        assert!(all.iter().any(Invocation::is_unknown));
    }
}
