//! Token sampling and the generation loop.

use crate::gemma3::{Gemma3, Logits};
use crate::ModelError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

/// Sampling parameters. `temperature <= 0` means greedy: the argmax, first index on ties.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SamplingParams {
    /// Softmax temperature; 0 = greedy.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0 = no limit).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `top_p` (1 = no limit).
    pub top_p: f32,
    /// RNG seed.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams { temperature: 0.0, top_k: 40, top_p: 0.95, seed: 0 }
    }
}

/// Picks tokens from logits according to [`SamplingParams`], with its own seeded RNG.
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
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
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        Ok(Sampler { params, rng })
    }

    /// Chooses the next token.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let p = &self.params;
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

impl Gemma3 {
    /// Generates up to `n` tokens after `prompt` (token ids, BOS included if wanted),
    /// calling `on_token` after each; stops early at an end-of-generation token.
    ///
    /// By default this runs incrementally ([`Gemma3::prefill`], then [`Gemma3::extend`] with
    /// one token per run): a prompt sharing a prefix with the previous sequence starts
    /// after it. With [`Gemma3::set_incremental`] off, every step recomputes the whole
    /// sequence with a plan of its exact length.
    pub fn generate_tokens(&mut self, prompt: &[u32], n: usize, params: &SamplingParams, mut on_token: impl FnMut(u32) -> bool) -> Result<(Vec<u32>, GenTimings), ModelError> {
        if prompt.is_empty() {
            return Err(ModelError::Request("the prompt has no tokens".into()));
        }
        if prompt.len() + n > self.config.context_length {
            return Err(ModelError::Request(format!("prompt of {} tokens plus {n} new tokens exceeds the context length of {}", prompt.len(), self.config.context_length)));
        }
        let mut sampler = Sampler::new(params.clone())?;
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
            if self.tokenizer.is_eog(tok) || !go_on {
                break;
            }
        }
        t.compile_ms += self.session.compile_ms - session_compile_ms;
        t.generate_ms = start.elapsed().as_secs_f64() * 1e3 - t.prompt_ms;
        Ok((out, t))
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
        let p = SamplingParams { temperature: 1.0, top_k: 3, top_p: 1.0, seed: 42 };
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
    fn bad_params_are_errors() {
        assert!(Sampler::new(SamplingParams { temperature: -1.0, ..Default::default() }).is_err());
        assert!(Sampler::new(SamplingParams { top_p: 0.0, ..Default::default() }).is_err());
    }
}
