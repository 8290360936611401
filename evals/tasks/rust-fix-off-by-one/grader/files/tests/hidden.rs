use sums::sum_to;

#[test]
fn edges() {
    assert_eq!(sum_to(0), 0);
    assert_eq!(sum_to(1), 1);
    assert_eq!(sum_to(100), 5050);
}
