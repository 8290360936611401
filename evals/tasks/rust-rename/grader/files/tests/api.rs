#[test]
fn total_and_summary() {
    assert_eq!(invoice::compute_total(&[1200, 350, 99]), 1649);
    assert_eq!(invoice::report::summary(&[1, 2]), "2 lines, total 3");
}
