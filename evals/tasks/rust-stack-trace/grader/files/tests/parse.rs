use kv::parse;

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

#[test]
fn well_formed() {
    assert_eq!(parse("a = 1\nb=two words\n"), pairs(&[("a", "1"), ("b", "two words")]));
}

#[test]
fn malformed_lines_are_skipped_and_empty_values_kept() {
    assert_eq!(parse("junk\nkey=\n\nx=y=z\n"), pairs(&[("key", ""), ("x", "y=z")]));
}
