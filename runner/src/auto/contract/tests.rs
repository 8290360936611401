use super::*;

const FILE: &str = "features.json";

fn file() -> &'static Path {
    Path::new(FILE)
}

/// The shape in the issue, two features.
const CONTRACT: &str = r#"{"version": 1, "test_command": "cargo test --quiet",
 "protected": ["tests/", "scripts/verify_*.sh"],
 "features": [
  {"id": "F001", "description": "add a todo", "steps": ["todo add x", "todo list"],
   "verify": {"cmd": "cargo test --quiet --test cli add_then_list", "timeout_s": 60},
   "passes": false},
  {"id": "F002", "description": "mark done", "steps": [],
   "verify": {"cmd": "cargo test --quiet --test cli done", "timeout_s": 30},
   "passes": false}
 ]}"#;

fn contract() -> Contract {
    Contract::parse(file(), CONTRACT.as_bytes()).unwrap()
}

fn ids(s: &[&str]) -> BTreeSet<String> {
    s.iter().map(|s| s.to_string()).collect()
}

#[test]
fn the_issue_shape_parses_with_defaults_filled() {
    let c = contract();
    assert_eq!(c.version, 1);
    assert_eq!(c.spec_digest, "");
    assert_eq!(c.protected, vec!["tests/", "scripts/verify_*.sh"]);
    assert_eq!(c.features.len(), 2);
    assert_eq!(
        c.features[1].verify,
        Verify {
            cmd: "cargo test --quiet --test cli done".into(),
            timeout_s: 30
        }
    );
    let minimal = r#"{"version":1,"test_command":"make test","features":[
        {"id":"a","description":"d","verify":{"cmd":"true"}}]}"#;
    let m = Contract::parse(file(), minimal.as_bytes()).unwrap();
    assert_eq!(m.protected, Vec::<String>::new());
    assert_eq!(m.features[0].steps, Vec::<String>::new());
    assert_eq!(m.features[0].verify.timeout_s, DEFAULT_TIMEOUT_S);
    assert!(!m.features[0].passes);
}

#[test]
fn a_syntax_error_names_the_file_line_and_column() {
    let text = "{\"version\": 1,\n \"features\": [\n   {\"id\": \"F1\",,}\n]}";
    let err = Contract::parse(file(), text.as_bytes()).unwrap_err();
    let ContractError::Syntax { line, column, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!((*line, *column), (3, 16));
    assert!(
        err.to_string()
            .starts_with("features.json:3:16: not valid JSON: "),
        "{err}"
    );
    let trailing = format!("{CONTRACT} x");
    let err = Contract::parse(file(), trailing.as_bytes()).unwrap_err();
    assert!(
        matches!(
            err,
            ContractError::Syntax {
                line: 10,
                column: 5,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_value_that_does_not_fit_names_its_field() {
    let cases = [
        (
            CONTRACT.replace("\"timeout_s\": 30", "\"timeout_s\": \"30\""),
            "features[1].verify.timeout_s",
            "invalid type: string \"30\", expected u64",
        ),
        (
            CONTRACT.replace("\"cmd\": \"cargo test --quiet --test cli done\", ", ""),
            "features[1].verify",
            "missing field `cmd`",
        ),
        (
            CONTRACT.replace("\"steps\": [],", "\"steps\": [], \"notes\": \"x\","),
            "features[1].notes",
            "unknown field `notes`",
        ),
        (
            CONTRACT.replace("\"protected\": [\"tests/\",", "\"protected\": [7,"),
            "protected[0]",
            "invalid type: integer `7`, expected a string",
        ),
        (
            CONTRACT.replace("\"test_command\": \"cargo test --quiet\",", ""),
            "",
            "missing field `test_command`",
        ),
    ];
    for (text, want_field, want_message) in cases {
        let err = Contract::parse(file(), text.as_bytes()).unwrap_err();
        let ContractError::Shape {
            field,
            message,
            line,
            ..
        } = &err
        else {
            panic!("{want_field}: {err:?}")
        };
        assert_eq!(field, want_field);
        assert!(message.starts_with(want_message), "{message}");
        assert!(*line > 0, "{err}");
        let shown = err.to_string();
        assert!(shown.starts_with("features.json:"), "{shown}");
        assert!(shown.contains(want_field), "{shown}");
        assert!(!shown.contains(" at line "), "said once: {shown}");
    }
}

#[test]
fn an_unusable_contract_lists_every_problem_by_field() {
    let text = r#"{"version": 2, "spec_digest": "sha256:abc", "test_command": " ",
      "protected": ["tests/", "../outside"],
      "features": [
        {"id": "F1", "description": "a", "verify": {"cmd": "true", "timeout_s": 0}},
        {"id": "F1", "description": " ", "verify": {"cmd": "  ", "timeout_s": 3601}},
        {"id": "has space", "description": "c", "verify": {"cmd": "true"}}
      ]}"#;
    let err = Contract::parse(file(), text.as_bytes()).unwrap_err();
    let ContractError::Invalid { file: f, problems } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(f, Path::new(FILE));
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "version",
            "spec_digest",
            "test_command",
            "protected[1]",
            "features[0].verify.timeout_s",
            "features[1].id",
            "features[1].description",
            "features[1].verify.cmd",
            "features[1].verify.timeout_s",
            "features[2].id",
        ]
    );
    assert!(
        problems[5].message.contains("features[0]"),
        "names the first use: {}",
        problems[5].message
    );
    assert!(
        err.to_string()
            .starts_with("features.json: version: 2 is not")
    );

    let none = r#"{"version": 1, "test_command": "t", "features": []}"#;
    let err = Contract::parse(file(), none.as_bytes()).unwrap_err();
    assert!(
        err.to_string().contains("features: lists no feature"),
        "{err}"
    );
}

#[test]
fn the_spec_digest_is_sha256_of_the_bytes_and_accept_writes_it() {
    assert_eq!(
        spec_digest(b"abc"),
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    let mut c = contract();
    c.spec_digest = "sha256:model-written".into();
    c.features[0].passes = true;
    let accepted = c.accept(b"abc");
    assert_eq!(accepted.spec_digest, spec_digest(b"abc"));
    assert!(accepted.passing().is_empty());
    assert!(accepted.problems().is_empty());
}

#[test]
fn the_canonical_form_ignores_passes_whitespace_and_key_order() {
    let c = contract();
    assert_eq!(
        c.canonical(),
        concat!(
            r#"{"features":["#,
            r#"{"description":"add a todo","id":"F001","steps":["todo add x","todo list"],"#,
            r#""verify":{"cmd":"cargo test --quiet --test cli add_then_list","timeout_s":60}},"#,
            r#"{"description":"mark done","id":"F002","steps":[],"#,
            r#""verify":{"cmd":"cargo test --quiet --test cli done","timeout_s":30}}],"#,
            r#""protected":["tests/","scripts/verify_*.sh"],"spec_digest":"","#,
            r#""test_command":"cargo test --quiet","version":1}"#
        )
    );
    let shuffled = r#"{
        "features": [
          {"passes": true, "verify": {"timeout_s": 60, "cmd": "cargo test --quiet --test cli add_then_list"},
           "steps": ["todo add x", "todo list"], "description": "add a todo", "id": "F001"},
          {"verify": {"timeout_s": 30, "cmd": "cargo test --quiet --test cli done"},
           "id": "F002", "description": "mark done"}
        ],
        "protected": ["tests/", "scripts/verify_*.sh"],
        "test_command": "cargo test --quiet",
        "version": 1
    }"#;
    let other = Contract::parse(file(), shuffled.as_bytes()).unwrap();
    assert_ne!(other, c, "passes differs");
    assert_eq!(other.canonical(), c.canonical());
    assert_eq!(other.digest(), c.digest());
    assert!(c.digest().starts_with("sha256:") && c.digest().len() == 7 + 64);
    let mut changed = c.clone();
    changed.features[1].verify.timeout_s = 31;
    assert_ne!(changed.digest(), c.digest());
}

fn rejected(field: &str, before: Option<Value>, after: Option<Value>) -> Rejected {
    Rejected {
        field: field.into(),
        before,
        after,
    }
}

fn claim(id: &str, passes: bool) -> Claim {
    Claim {
        id: id.into(),
        passes,
    }
}

#[test]
fn the_freeze_check_table() {
    let base = contract().accept(b"spec");
    let written = restore(&base, &BTreeSet::new()).unwrap();
    let digest = base.spec_digest.clone();
    let edit = |from: &str, to: &str| -> String {
        assert!(written.contains(from), "{from} in {written}");
        written.replacen(from, to, 1)
    };
    let cases: Vec<(&str, String, FreezeCheck)> = vec![
        ("untouched", written.clone(), FreezeCheck::default()),
        (
            "whitespace and key order alone",
            format!(
                r#"{{"features":[{{"verify":{{"timeout_s":60,"cmd":"cargo test --quiet --test cli add_then_list"}},"id":"F001","steps":["todo add x","todo list"],"description":"add a todo"}},
                {{"id":"F002","description":"mark done","verify":{{"cmd":"cargo test --quiet --test cli done","timeout_s":30}}}}],
                "version":1,"test_command":"cargo test --quiet","spec_digest":"{digest}","protected":["tests/","scripts/verify_*.sh"]}}"#
            ),
            FreezeCheck::default(),
        ),
        (
            "passes flipped: a claim, not an edit",
            edit("\"passes\": false", "\"passes\": true"),
            FreezeCheck {
                rejected: vec![],
                claims: vec![claim("F001", true)],
            },
        ),
        (
            "a verify command rewritten",
            edit("--test cli done", "--test cli done || true"),
            FreezeCheck {
                rejected: vec![rejected(
                    "features[1].verify.cmd",
                    Some(json!("cargo test --quiet --test cli done")),
                    Some(json!("cargo test --quiet --test cli done || true")),
                )],
                claims: vec![],
            },
        ),
        (
            "a step edited",
            edit("\"todo list\"", "\"todo ls\""),
            FreezeCheck {
                rejected: vec![rejected(
                    "features[0].steps[1]",
                    Some(json!("todo list")),
                    Some(json!("todo ls")),
                )],
                claims: vec![],
            },
        ),
        (
            "the test command and the spec digest",
            edit("\"cargo test --quiet\",", "\"true\",").replace(&digest, "sha256:x"),
            FreezeCheck {
                rejected: vec![
                    rejected("spec_digest", Some(json!(digest)), Some(json!("sha256:x"))),
                    rejected(
                        "test_command",
                        Some(json!("cargo test --quiet")),
                        Some(json!("true")),
                    ),
                ],
                claims: vec![],
            },
        ),
        (
            "a protected path dropped",
            edit("\"tests/\",\n    ", ""),
            FreezeCheck {
                rejected: vec![rejected(
                    "protected",
                    Some(json!(["tests/", "scripts/verify_*.sh"])),
                    Some(json!(["scripts/verify_*.sh"])),
                )],
                claims: vec![],
            },
        ),
        (
            "a key added to a feature",
            edit(
                "\"description\": \"mark done\",",
                "\"description\": \"mark done\", \"skip\": true,",
            ),
            FreezeCheck {
                rejected: vec![rejected("features[1].skip", None, Some(json!(true)))],
                claims: vec![],
            },
        ),
        (
            "passes that is not a boolean",
            edit("\"passes\": false", "\"passes\": \"yes\""),
            FreezeCheck {
                rejected: vec![rejected(
                    "features[0].passes",
                    Some(json!(false)),
                    Some(json!("yes")),
                )],
                claims: vec![],
            },
        ),
        (
            "not JSON",
            "{\"version\": 1,".to_string(),
            FreezeCheck {
                rejected: vec![Rejected {
                    field: "$".into(),
                    before: Some(base.canonical_value()),
                    after: Some(json!("{\"version\": 1,")),
                }],
                claims: vec![],
            },
        ),
        (
            "not an object",
            "[]".to_string(),
            FreezeCheck {
                rejected: vec![Rejected {
                    field: "$".into(),
                    before: Some(base.canonical_value()),
                    after: Some(json!([])),
                }],
                claims: vec![],
            },
        ),
    ];
    for (name, edited, want) in cases {
        assert_eq!(freeze_check(&base, edited.as_bytes()), want, "{name}");
    }
}

#[test]
fn features_are_matched_by_id_and_additions_and_removals_are_edits() {
    let base = contract().accept(b"spec");
    let mut v: Value = serde_json::from_str(&restore(&base, &ids(&["F002"])).unwrap()).unwrap();
    let features = v["features"].as_array_mut().unwrap();
    // Reordered, F001's description edited and claimed, F002 un-claimed, F003 added.
    features.reverse();
    features[1]["description"] = json!("add many todos");
    features[1]["passes"] = json!(true);
    features[0]["passes"] = json!(false);
    features.push(json!({"id": "F003", "description": "new", "verify": {"cmd": "true"}}));
    let mut prev = base.clone();
    prev.features[1].passes = true;
    let got = freeze_check(&prev, v.to_string().as_bytes());
    assert_eq!(
        got,
        FreezeCheck {
            rejected: vec![
                rejected(
                    "features[0].description",
                    Some(json!("add a todo")),
                    Some(json!("add many todos")),
                ),
                rejected(
                    "features[2]",
                    None,
                    Some(json!({"id": "F003", "description": "new", "verify": {"cmd": "true"}})),
                ),
            ],
            claims: vec![claim("F001", true), claim("F002", false)],
        }
    );
    assert_eq!(got.claimed(), ids(&["F001"]));

    let removed = {
        let mut v: Value =
            serde_json::from_str(&restore(&base, &BTreeSet::new()).unwrap()).unwrap();
        v["features"].as_array_mut().unwrap().remove(0);
        v.to_string()
    };
    let got = freeze_check(&base, removed.as_bytes());
    assert_eq!(got.rejected.len(), 1);
    assert_eq!(got.rejected[0].field, "features[0]");
    assert_eq!(got.rejected[0].after, None);
    assert_eq!(
        got.rejected[0].before.as_ref().unwrap()["id"],
        json!("F001")
    );

    let no_list = freeze_check(&base, br#"{"version": 1}"#);
    assert!(
        no_list
            .rejected
            .iter()
            .any(|r| r.field == "features" && r.after.is_none()),
        "{no_list:?}"
    );
}

#[test]
fn restore_writes_the_accepted_contract_with_the_harness_passes() {
    let base = contract().accept(b"spec");
    let text = restore(&base, &ids(&["F002", "F999"])).unwrap();
    assert!(text.ends_with("}\n"));
    assert!(
        text.starts_with("{\n  \"version\": 1,\n  \"spec_digest\": \"sha256:"),
        "{text}"
    );
    let back = Contract::parse(file(), text.as_bytes()).unwrap();
    assert_eq!(
        back.passing(),
        ids(&["F002"]),
        "an unknown id is no feature"
    );
    assert_eq!(back.canonical(), base.canonical());
    let check = freeze_check(&base, text.as_bytes());
    assert_eq!(check.rejected, vec![]);
    assert_eq!(check.claims, vec![claim("F002", true)]);
}

#[test]
fn a_protected_script_a_check_runs_must_exist() {
    let mut c = contract();
    c.features[0].verify.cmd = "sh scripts/verify_add.sh && python3 calc.py 2 3".into();
    c.features[1].verify.cmd = "bash ./tests/check_done.sh \"$(cat out.txt)\"".into();
    let protected = c.protected_paths().unwrap();
    // Nothing exists: only the protected scripts are problems; calc.py is the session's.
    let problems = c.script_problems(&protected, |_| false);
    let named: Vec<(&str, bool)> = problems
        .iter()
        .map(|(id, why)| (id.as_str(), why.contains("does not exist")))
        .collect();
    assert_eq!(named, [("F001", true), ("F002", true)], "{problems:?}");
    assert!(
        problems[0].1.contains("scripts/verify_add.sh"),
        "{problems:?}"
    );
    assert!(
        problems[1].1.contains("./tests/check_done.sh"),
        "{problems:?}"
    );
    assert_eq!(c.script_problems(&protected, |_| true), vec![]);
    // A check script that exists outside the protected paths: any session could rewrite it.
    c.features[0].verify.cmd = "python3 checks/f1.py && sh verify_add.sh && ./calc.py 2".into();
    c.features[1].verify.cmd = "python3 calc.py 2 3 && python3 cli/add_test.py".into();
    let problems = c.script_problems(&protected, |_| true);
    let named: Vec<&str> = problems
        .iter()
        .filter(|(_, why)| why.contains("`protected` does not cover"))
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(named, ["F001", "F001", "F002"], "{problems:?}");
    assert!(problems[0].1.contains("checks/f1.py"), "{problems:?}");
    assert!(problems[1].1.contains("verify_add.sh"), "{problems:?}");
    assert!(problems[2].1.contains("cli/add_test.py"), "{problems:?}");
    // Not written yet: the program the sessions are to write, whatever its name.
    assert_eq!(c.script_problems(&protected, |_| false), vec![]);
    // A dotted module name or a plain word is no path.
    assert_eq!(contract().script_problems(&protected, |_| false), vec![]);
}
