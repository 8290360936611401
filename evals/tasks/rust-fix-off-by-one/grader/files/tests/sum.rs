use sums::sum_to;

#[test]
fn sums_to_ten() {
    assert_eq!(sum_to(10), 55);
}
