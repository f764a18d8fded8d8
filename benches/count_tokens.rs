//! Prints the o200k token count of each file named on the command line (one line each:
//! `TOKENS FILE`). The MCP benchmark (`make bench-mcp`) counts the tool lists a client loads
//! with it.

#![allow(clippy::expect_used)] // a benchmark helper, not filter code

fn main() {
    let bpe = tiktoken_rs::o200k_base().expect("o200k tokenizer");
    for path in std::env::args().skip(1) {
        let text = std::fs::read_to_string(&path).expect("read the file");
        println!("{} {path}", bpe.encode_with_special_tokens(&text).len());
    }
}
