fn main() {
    let mut reverse = false;
    let mut args: Vec<String> = Vec::new();
    for arg in std::env::args().skip(1) {
        if arg == "--reverse" {
            reverse = true;
        } else {
            args.push(arg);
        }
    }
    if reverse {
        args.reverse();
    }
    println!("{}", args.join(" "));
}
