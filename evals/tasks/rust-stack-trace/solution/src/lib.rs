/// Parses `key=value` lines into pairs; whitespace around keys and values is trimmed.
/// Lines without `=` are skipped.
pub fn parse(input: &str) -> Vec<(String, String)> {
    input
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}
