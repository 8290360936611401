//! Invoices. See [`calc_total`].

pub mod report;

/// The total of the line amounts, in cents.
pub fn calc_total(lines: &[u64]) -> u64 {
    lines.iter().sum()
}
