fn main() { eprintln!("toolsift CLI: coming in issue 3"); std::process::exit(2); }
