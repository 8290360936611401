use roman::to_roman;

#[test]
fn numerals() {
    for (n, s) in [(1, "I"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"), (90, "XC"),
                   (400, "CD"), (944, "CMXLIV"), (1994, "MCMXCIV"), (2024, "MMXXIV"), (3999, "MMMCMXCIX")] {
        assert_eq!(to_roman(n).as_deref(), Some(s), "{n}");
    }
}

#[test]
fn out_of_range() {
    assert_eq!(to_roman(0), None);
    assert_eq!(to_roman(4000), None);
}
