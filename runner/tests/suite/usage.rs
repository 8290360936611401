//! Command lines that are wrong before any turn starts are usage errors (exit 64) that say what
//! is wrong: an empty prompt (which would otherwise be sent, and paid for, as a full turn) and a
//! `-C` directory that is not there.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::io::Write;
use std::process::Stdio;

use serde_json::Value;

use super::cli::{machine, server, text_answer};

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_prompt_is_a_usage_error_and_nothing_is_sent() {
    let server = server(vec![text_answer("From stdin.")]).await;
    let m = machine(&server);
    for prompt in ["", "   ", "\n\t "] {
        let out = m.command().args(["-p", prompt]).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{prompt:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("anvil: the prompt is empty"), "{stderr}");
        assert!(out.stdout.is_empty());
        let out = m
            .command()
            .args(["-p", prompt, "--output-format", "json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["outcome"], "usage_error");
        assert!(
            v["error"].as_str().unwrap().contains("the prompt is empty"),
            "{v}"
        );
    }
    assert!(server.requests().is_empty(), "a request was sent");

    // An empty -p with the task on stdin: stdin is the prompt.
    let mut child = m
        .command()
        .args(["-p", ""])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"  summarize this\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "From stdin.\n");
    let sent = &server.requests()[0]["messages"][0]["content"][0]["text"];
    assert_eq!(sent, "summarize this");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_working_directory_is_a_usage_error_naming_it() {
    let server = server(vec![]).await;
    let m = machine(&server);
    let missing = m.home.path().join("no/such/dir");
    let shown = missing.display().to_string();
    for args in [
        vec!["-p", "hi"],
        vec![],
        vec!["sessions"],
        vec!["mcp", "list"],
    ] {
        let out = m
            .command()
            .arg("-C")
            .arg(&missing)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("anvil: -C {shown}: no such directory\n"),
            "{args:?}"
        );
    }
    let out = m
        .command()
        .arg("-C")
        .arg(&missing)
        .args(["-p", "hi", "--output-format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "usage_error");
    assert!(v["error"].as_str().unwrap().contains(&shown), "{v}");
    // A file is not a directory.
    let file = m.repo.join("greet.txt");
    let out = m
        .command()
        .arg("-C")
        .arg(&file)
        .args(["-p", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("anvil: -C {}: not a directory\n", file.display())
    );
    assert!(server.requests().is_empty());
}

/// The README's exit-code table and `anvil --help`'s list the same codes, and both say what
/// the usage error covers.
#[test]
fn the_readme_and_help_list_the_same_exit_codes() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let (_, table) = readme.split_once("\nExit codes:\n").unwrap();
    let readme_rows: Vec<(i32, String)> = table
        .trim_start()
        .lines()
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let mut cells = l.split('|').map(str::trim).skip(1);
            let code = cells.next()?.parse().ok()?;
            Some((code, cells.next()?.to_string()))
        })
        .collect();
    let help = std::process::Command::new(super::cli::ANVIL)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let (_, listed) = help.split_once("Exit codes (headless mode):\n").unwrap();
    let mut help_rows: Vec<(i32, String)> = Vec::new();
    for line in listed.lines() {
        let mut words = line.split_whitespace();
        match words.next().map(str::parse::<i32>) {
            Some(Ok(code)) => help_rows.push((code, words.collect::<Vec<_>>().join(" "))),
            // A continuation line of the last code's text.
            Some(Err(_)) if line.starts_with("     ") => {
                let last = help_rows.last_mut().unwrap();
                last.1.push(' ');
                last.1.push_str(line.trim());
            }
            _ => break,
        }
    }
    let codes = |rows: &[(i32, String)]| rows.iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(codes(&readme_rows), [0, 1, 2, 3, 4, 5, 6, 7, 64, 130]);
    assert_eq!(codes(&help_rows), codes(&readme_rows), "{help}");
    for rows in [&readme_rows, &help_rows] {
        let usage = &rows.iter().find(|r| r.0 == 64).unwrap().1;
        assert!(
            usage.contains("empty prompt") && usage.contains("-C"),
            "{usage}"
        );
    }
}
