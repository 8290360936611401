use crate::compute_total;

/// A one-line summary: "N lines, total T".
pub fn summary(lines: &[u64]) -> String {
    format!("{} lines, total {}", lines.len(), compute_total(lines))
}
