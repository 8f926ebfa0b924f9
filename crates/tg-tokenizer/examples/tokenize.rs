//! Tokenizes a file (or stdin) with the tokenizer of a GGUF model and reports
//! timings: `cargo run --release -p tg-tokenizer --example tokenize -- MODEL.gguf [FILE] [--special] [--ids] [--repeat N]`.

use std::io::Read;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let model = args
        .next()
        .ok_or("usage: tokenize MODEL.gguf [FILE] [--special] [--ids] [--repeat N]")?;
    let (mut file, mut special, mut print_ids, mut repeat) = (None, false, false, 1usize);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--special" => special = true,
            "--ids" => print_ids = true,
            "--repeat" => repeat = args.next().ok_or("--repeat needs a count")?.parse()?,
            _ => file = Some(a),
        }
    }
    let text = match file {
        Some(path) => std::fs::read_to_string(path)?,
        None => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        }
    };

    let t0 = Instant::now();
    let gguf = tg_gguf::GgufFile::open(&model)?;
    let t1 = Instant::now();
    let tok = tg_tokenizer::Tokenizer::from_gguf(&gguf)?;
    let t2 = Instant::now();
    eprintln!("open {:?}, tokenizer {:?}", t1 - t0, t2 - t1);

    let mut ids = Vec::new();
    let t3 = Instant::now();
    for _ in 0..repeat {
        ids = tok.encode(&text, false, special);
    }
    let dt = t3.elapsed() / repeat as u32;
    eprintln!(
        "{} bytes -> {} tokens in {dt:?} ({:.2} MB/s)",
        text.len(),
        ids.len(),
        text.len() as f64 / dt.as_secs_f64() / 1e6
    );
    if print_ids {
        println!("{ids:?}");
    }
    Ok(())
}
