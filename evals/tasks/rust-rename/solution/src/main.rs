fn main() {
    let lines = [1200, 350, 99];
    println!("{}", invoice::compute_total(&lines));
    println!("{}", invoice::report::summary(&lines));
}
