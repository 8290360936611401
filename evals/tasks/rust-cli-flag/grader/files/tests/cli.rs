//! echoer runs as a process of its own: nothing it does can touch the test harness.
use std::process::Command;

fn echoer(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_echoer"))
        .args(args)
        .output()
        .expect("echoer runs");
    assert!(out.status.success(), "echoer {args:?} failed");
    String::from_utf8(out.stdout).unwrap().trim_end_matches('\n').to_string()
}

#[test]
fn plain() {
    assert_eq!(echoer(&["a", "b", "c"]), "a b c");
}

#[test]
fn reversed() {
    assert_eq!(echoer(&["--reverse", "a", "b", "c"]), "c b a");
}

#[test]
fn flag_anywhere() {
    assert_eq!(echoer(&["a", "--reverse", "b", "c"]), "c b a");
}

#[test]
fn flag_alone() {
    assert_eq!(echoer(&["--reverse"]), "");
}
