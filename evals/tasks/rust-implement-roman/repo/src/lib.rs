/// Converts `n` (1 to 3999) to a Roman numeral in standard subtractive form:
/// 4 is "IV", 9 is "IX", 40 is "XL", 90 is "XC", 400 is "CD", 900 is "CM";
/// for example 1994 is "MCMXCIV". Returns `None` for 0 and for numbers above 3999.
pub fn to_roman(n: u32) -> Option<String> {
    let _ = n;
    None
}
