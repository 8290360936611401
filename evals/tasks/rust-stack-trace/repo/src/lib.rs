/// Parses `key=value` lines into pairs; whitespace around keys and values is trimmed.
pub fn parse(input: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in input.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.splitn(2, '=').collect();
        out.push((parts[0].trim().to_string(), parts[1].trim().to_string()));
    }
    out
}
