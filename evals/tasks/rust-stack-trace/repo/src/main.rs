use std::io::Read;

fn main() {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).unwrap_or_default();
    for (k, v) in kv::parse(&input) {
        println!("{k} -> {v}");
    }
}
