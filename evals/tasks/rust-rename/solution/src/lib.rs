//! Invoices. See [`compute_total`].

pub mod report;

/// The total of the line amounts, in cents.
pub fn compute_total(lines: &[u64]) -> u64 {
    lines.iter().sum()
}
