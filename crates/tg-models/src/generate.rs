//! Token sampling and the generation loop.

use crate::decoder::LanguageModel;
use crate::gemma3::Logits;
use crate::ModelError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

/// Sampling parameters. `temperature <= 0` means greedy: the argmax (after the repetition
/// penalty), first index on ties.
///
/// The order: the repetition penalty on the raw logits, top-k, the softmax at the
/// temperature, top-p, min-p (both on those probabilities), a seeded draw.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SamplingParams {
    /// Softmax temperature; 0 = greedy.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0 = no limit).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `top_p` (1 = no limit).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one (0 = no limit).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of tokens seen in the last
    /// `repeat_last_n` tokens by this (1 = off).
    pub repeat_penalty: f32,
    /// How many recent tokens (prompt included) the repetition penalty looks at.
    pub repeat_last_n: usize,
    /// Generation ends once the generated text contains one of these; the text front ends
    /// cut it before the match ([`cut_at_stop`]).
    pub stop: Vec<String>,
    /// RNG seed.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams { temperature: 0.0, top_k: 40, top_p: 0.95, min_p: 0.05, repeat_penalty: 1.0, repeat_last_n: 64, stop: Vec::new(), seed: 0 }
    }
}

/// `text` up to the first occurrence of any of `stop` (all of it when none occurs).
pub fn cut_at_stop<'a>(text: &'a str, stop: &[String]) -> &'a str {
    match stop.iter().filter(|s| !s.is_empty()).filter_map(|s| text.find(s.as_str())).min() {
        Some(i) => &text[..i],
        None => text,
    }
}

/// Picks tokens from logits according to [`SamplingParams`], with its own seeded RNG.
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
    /// The last `repeat_last_n` tokens (for the repetition penalty).
    recent: std::collections::VecDeque<u32>,
}

/// Index of the largest value, the first one on ties (NaN never wins).
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] || logits[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best
}

impl Sampler {
    /// A sampler; errors on parameters out of range.
    pub fn new(params: SamplingParams) -> Result<Sampler, ModelError> {
        if !params.temperature.is_finite() || params.temperature < 0.0 {
            return Err(ModelError::Request(format!("temperature must be a finite number >= 0, got {}", params.temperature)));
        }
        if !(params.top_p > 0.0 && params.top_p <= 1.0) {
            return Err(ModelError::Request(format!("top-p must be in (0, 1], got {}", params.top_p)));
        }
        if !(0.0..=1.0).contains(&params.min_p) {
            return Err(ModelError::Request(format!("min-p must be in [0, 1], got {}", params.min_p)));
        }
        if !(params.repeat_penalty.is_finite() && params.repeat_penalty > 0.0) {
            return Err(ModelError::Request(format!("the repetition penalty must be a finite number > 0, got {}", params.repeat_penalty)));
        }
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        Ok(Sampler { params, rng, recent: Default::default() })
    }

    /// Remembers `tokens` (the prompt, then each chosen token) for the repetition penalty.
    pub fn accept(&mut self, tokens: &[u32]) {
        let n = self.params.repeat_last_n;
        for &t in tokens {
            self.recent.push_back(t);
            if self.recent.len() > n {
                self.recent.pop_front();
            }
        }
    }

    /// Chooses the next token (and remembers it, see [`Sampler::accept`]).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let t = self.choose(logits);
        self.accept(&[t]);
        t
    }

    fn choose(&mut self, logits: &[f32]) -> u32 {
        let p = &self.params;
        let penalized;
        let logits = if p.repeat_penalty != 1.0 && !self.recent.is_empty() {
            let mut l = logits.to_vec();
            let mut seen: Vec<u32> = self.recent.iter().copied().collect();
            seen.sort_unstable();
            seen.dedup();
            for t in seen {
                if let Some(x) = l.get_mut(t as usize) {
                    *x = if *x > 0.0 { *x / p.repeat_penalty } else { *x * p.repeat_penalty };
                }
            }
            penalized = l;
            &penalized[..]
        } else {
            logits
        };
        if p.temperature <= 0.0 {
            return argmax(logits) as u32;
        }
        let mut idx: Vec<usize> = (0..logits.len()).filter(|&i| logits[i].is_finite()).collect();
        if idx.is_empty() {
            return argmax(logits) as u32;
        }
        idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        if p.top_k > 0 && idx.len() > p.top_k {
            idx.truncate(p.top_k);
        }
        let m = logits[idx[0]] as f64;
        let mut probs: Vec<f64> = idx.iter().map(|&i| ((logits[i] as f64 - m) / p.temperature as f64).exp()).collect();
        let z: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= z);
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = probs.len();
            for (k, &q) in probs.iter().enumerate() {
                acc += q;
                if acc >= p.top_p as f64 {
                    keep = k + 1;
                    break;
                }
            }
            probs.truncate(keep);
            idx.truncate(keep);
            let z: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|x| *x /= z);
        }
        if p.min_p > 0.0 {
            // probs is sorted, so the kept tokens are a prefix.
            let floor = probs[0] * p.min_p as f64;
            let keep = probs.iter().take_while(|&&q| q >= floor).count().max(1);
            probs.truncate(keep);
            idx.truncate(keep);
            let z: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|x| *x /= z);
        }
        let r: f64 = self.rng.gen();
        let mut acc = 0.0;
        for (k, &q) in probs.iter().enumerate() {
            acc += q;
            if r < acc {
                return idx[k] as u32;
            }
        }
        *idx.last().unwrap_or(&0) as u32
    }
}

/// Timings of one generation, in milliseconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GenTimings {
    /// Time to process the prompt and produce the first token (includes compilation).
    pub prompt_ms: f64,
    /// Time for the remaining tokens.
    pub generate_ms: f64,
    /// Time spent compiling plans (in `prompt_ms` and `generate_ms`): on the incremental
    /// path, deriving the incremental graphs and compiling them (or loading them from the
    /// plan store); with recomputation, compiling each length's plan.
    pub compile_ms: f64,
}

impl LanguageModel {
    /// Generates up to `n` tokens after `prompt` (token ids, BOS included if wanted),
    /// calling `on_token` after each; stops early at an end-of-generation token.
    ///
    /// By default this runs incrementally ([`LanguageModel::prefill`], then [`LanguageModel::extend`] with
    /// one token per run): a prompt sharing a prefix with the previous sequence starts
    /// after it. With [`LanguageModel::set_incremental`] off, every step recomputes the whole
    /// sequence with a plan of its exact length.
    pub fn generate_tokens(&mut self, prompt: &[u32], n: usize, params: &SamplingParams, mut on_token: impl FnMut(u32) -> bool) -> Result<(Vec<u32>, GenTimings), ModelError> {
        if prompt.is_empty() {
            return Err(ModelError::Request("the prompt has no tokens".into()));
        }
        if prompt.len() + n > self.context_length() {
            return Err(ModelError::Request(format!("prompt of {} tokens plus {n} new tokens exceeds the context length of {}", prompt.len(), self.context_length())));
        }
        let mut sampler = Sampler::new(params.clone())?;
        sampler.accept(prompt);
        let mut stops = StopWatch::new(&params.stop);
        let mut seq = prompt.to_vec();
        let mut out = Vec::with_capacity(n);
        let mut t = GenTimings::default();
        let start = Instant::now();
        let incremental = self.session.enabled;
        // The incremental path adds up its own derivation and compile time.
        let session_compile_ms = self.session.compile_ms;
        for i in 0..n {
            let logits = if incremental {
                if i == 0 {
                    self.prefill(&seq)?
                } else {
                    self.extend(&seq[seq.len() - 1..])?
                }
            } else {
                let tc = Instant::now();
                self.prepare(seq.len(), Logits::Last)?;
                t.compile_ms += tc.elapsed().as_secs_f64() * 1e3;
                let l = self.forward(&seq, Logits::Last)?;
                // Plans for lengths we will not see again are dropped to bound memory.
                self.plans.clear();
                l
            };
            let tok = sampler.sample(&logits);
            if i == 0 {
                t.prompt_ms = start.elapsed().as_secs_f64() * 1e3;
            }
            out.push(tok);
            seq.push(tok);
            let go_on = on_token(tok);
            if self.tokenizer.is_eog(tok) || !go_on || stops.seen(&self.tokenizer, tok) {
                break;
            }
        }
        t.compile_ms += self.session.compile_ms - session_compile_ms;
        t.generate_ms = start.elapsed().as_secs_f64() * 1e3 - t.prompt_ms;
        Ok((out, t))
    }
}

/// Watches the generated text for stop strings.
struct StopWatch<'a> {
    stop: &'a [String],
    /// The generated text's bytes (only kept when there are stop strings).
    text: Vec<u8>,
}

impl<'a> StopWatch<'a> {
    fn new(stop: &'a [String]) -> StopWatch<'a> {
        StopWatch { stop, text: Vec::new() }
    }

    /// Adds `tok`'s text; true once the text contains a stop string.
    fn seen(&mut self, tok: &tg_tokenizer::Tokenizer, t: u32) -> bool {
        if self.stop.is_empty() {
            return false;
        }
        let before = self.text.len();
        self.text.extend_from_slice(tok.token_bytes(t, false).unwrap_or(&[]));
        self.stop.iter().filter(|s| !s.is_empty()).any(|s| {
            // Only matches that end in the new bytes are new.
            let from = before.saturating_sub(s.len());
            self.text[from..].windows(s.len()).any(|w| w == s.as_bytes())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_first_of_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, 0.5]), 1);
        let mut s = Sampler::new(SamplingParams::default()).unwrap();
        assert_eq!(s.sample(&[0.0, 5.0, 5.0]), 1);
    }

    #[test]
    fn sampling_respects_top_k_and_seed() {
        let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32).collect();
        let p = SamplingParams { temperature: 1.0, top_k: 3, top_p: 1.0, min_p: 0.0, seed: 42, ..Default::default() };
        let mut a = Sampler::new(p.clone()).unwrap();
        let mut b = Sampler::new(p).unwrap();
        let top: Vec<usize> = {
            let mut idx: Vec<usize> = (0..100).collect();
            idx.sort_by(|&x, &y| logits[y].total_cmp(&logits[x]).then(x.cmp(&y)));
            idx[..3].to_vec()
        };
        for _ in 0..200 {
            let x = a.sample(&logits);
            assert_eq!(x, b.sample(&logits));
            assert!(top.contains(&(x as usize)), "{x} not in top-3 {top:?}");
        }
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        // Probabilities ∝ e^0, e^-1, e^-5: with min-p 0.2 only the first two survive.
        let logits = [0.0f32, -1.0, -5.0];
        let p = SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.2, seed: 7, ..Default::default() };
        let mut s = Sampler::new(p).unwrap();
        let mut seen = [0usize; 3];
        for _ in 0..2000 {
            seen[s.sample(&logits) as usize] += 1;
        }
        assert_eq!(seen[2], 0, "{seen:?}");
        assert!(seen[1] > 300 && seen[0] > 1200, "{seen:?}");
    }

    #[test]
    fn repetition_penalty_moves_greedy_off_seen_tokens() {
        let logits = [2.0f32, 1.9, -1.0];
        let p = SamplingParams { temperature: 0.0, repeat_penalty: 1.1, ..Default::default() };
        let mut s = Sampler::new(p.clone()).unwrap();
        assert_eq!(s.sample(&logits), 0);
        // token 0 is now recent: 2.0 / 1.1 < 1.9
        assert_eq!(s.sample(&logits), 1);
        // negative logits get more negative
        let mut s = Sampler::new(SamplingParams { repeat_penalty: 3.0, ..p }).unwrap();
        s.accept(&[0, 1]);
        assert_eq!(s.sample(&[-0.1, -0.2, -0.25]), 2);
    }

    #[test]
    fn stop_strings_cut_text() {
        let stop = vec!["\n\n".to_string(), "END".to_string()];
        assert_eq!(cut_at_stop("abc\n\ndef END", &stop), "abc");
        assert_eq!(cut_at_stop("abc END\n\n", &stop), "abc ");
        assert_eq!(cut_at_stop("abc", &stop), "abc");
        assert_eq!(cut_at_stop("abc", &[String::new()]), "abc");
    }

    #[test]
    fn bad_params_are_errors() {
        assert!(Sampler::new(SamplingParams { min_p: 1.5, ..Default::default() }).is_err());
        assert!(Sampler::new(SamplingParams { repeat_penalty: 0.0, ..Default::default() }).is_err());
        assert!(Sampler::new(SamplingParams { temperature: -1.0, ..Default::default() }).is_err());
        assert!(Sampler::new(SamplingParams { top_p: 0.0, ..Default::default() }).is_err());
    }
}
