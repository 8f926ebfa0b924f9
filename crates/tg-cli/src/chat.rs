//! `tg chat`: an interactive multi-turn chat with any decoder model that has a chat
//! template. Each turn renders the whole conversation with the template; the engine keeps
//! the states of the tokens it has run, so a turn processes only what is new since the
//! last one (the user's message and the template's turn markers).

use crate::{NumericsArg, SamplingArgs, StopStream};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use tg_models::Message;

/// Arguments of `tg chat`.
#[derive(clap::Args)]
pub struct ChatArgs {
    /// GGUF model (default: Gemma 3 270M Q4_K_M; a chat needs a file with a chat template,
    /// e.g. Qwen2.5-Coder-0.5B-Instruct).
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// A system message to start the conversation with.
    #[arg(long)]
    system: Option<String>,
    /// A Jinja chat template file to use instead of the model file's.
    #[arg(long = "chat-template")]
    chat_template: Option<PathBuf>,
    /// Most tokens per reply.
    #[arg(short = 'n', long = "n-predict", default_value_t = 512)]
    n: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Worker threads (0 = all cores).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// Devices to run on (as `tg generate --device`).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Quantized-matmul arithmetic: `exact` or `q8`.
    #[arg(long, value_enum, default_value_t = NumericsArg::Exact)]
    numerics: NumericsArg,
}

/// Reads user messages from standard input, one per line, until an empty line or the end
/// of input; `/reset` starts a new conversation. Replies stream to standard output; each
/// turn's token counts go to standard error.
pub fn run(a: ChatArgs) -> Result<(), String> {
    let mut m = crate::load(a.model, a.threads, &a.device)?;
    m.set_compile_options(crate::bench::compile_options(a.numerics, &[], &[])?);
    if let Some(t) = &a.chat_template {
        let src = std::fs::read_to_string(t).map_err(|e| format!("--chat-template {}: {e}", t.display()))?;
        m.set_chat_template(&src).map_err(|e| format!("--chat-template {}: {e}", t.display()))?;
    }
    // Fail before the first prompt when there is no template.
    m.chat_prompt(&[Message::new("user", "")]).map_err(|e| e.to_string())?;
    let start = || a.system.iter().map(|s| Message::new("system", s.as_str())).collect::<Vec<_>>();
    let mut messages = start();
    let params = a.sampling.params();
    let tok = m.tokenizer.clone();
    let stdin = std::io::stdin();
    let interactive = std::io::IsTerminal::is_terminal(&stdin);
    let mut lines = stdin.lock().lines();
    let mut turn = 0;
    loop {
        if interactive {
            eprint!("> ");
        }
        let Some(line) = lines.next() else { break };
        let line = line.map_err(|e| format!("reading standard input: {e}"))?;
        let text = line.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        if text == "/reset" {
            messages = start();
            eprintln!("[new conversation]");
            continue;
        }
        messages.push(Message::new("user", text));
        let ids = m.chat_prompt(&messages).map_err(|e| e.to_string())?;
        let mut shown = StopStream::new(&tok, &params.stop);
        let mut stdout = std::io::stdout().lock();
        let (out, t) = m
            .generate_tokens(&ids, a.n.min(m.context_length().saturating_sub(ids.len())), &params, |id| {
                let _ = write!(stdout, "{}", shown.push(id));
                let _ = stdout.flush();
                true
            })
            .map_err(|e| e.to_string())?;
        let _ = writeln!(stdout, "{}", shown.finish());
        drop(stdout);
        let reply = tg_models::cut_at_stop(&tok.decode(&out, false).map_err(|e| e.to_string())?, &params.stop).to_string();
        turn += 1;
        let s = m.session_info();
        eprintln!(
            "[turn {turn}: {} prompt tokens, {} kept from earlier turns, {} new; {} tokens in {:.0} ms]",
            ids.len(),
            s.reused,
            ids.len() - s.reused.min(ids.len()),
            out.len(),
            t.prompt_ms + t.generate_ms
        );
        messages.push(Message::new("assistant", reply.trim()));
    }
    Ok(())
}
