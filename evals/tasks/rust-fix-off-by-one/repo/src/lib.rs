/// The sum 1 + 2 + ... + n (0 for n = 0).
pub fn sum_to(n: u64) -> u64 {
    (1..n).sum()
}
