//! Audio input for the audio models: WAV files read into mono samples, and a band-limited
//! resampler to the models' rate.
//!
//! **WAV** ([`parse_wav`], [`read_wav`]): RIFF/WAVE with a `fmt ` chunk of
//! `WAVE_FORMAT_PCM` (1: 8-bit unsigned, 16/24/32-bit signed integers),
//! `WAVE_FORMAT_IEEE_FLOAT` (3: 32/64-bit floats) or `WAVE_FORMAT_EXTENSIBLE` (0xFFFE, whose
//! sub-format is one of those two). Other chunks (`LIST`, `fact`, …) are skipped, with RIFF's
//! padding of odd-sized chunks. Samples come out as one channel (the channels averaged),
//! full scale 1.0 (PCM16: x/32768). A `data` chunk longer than the file is an error
//! ("truncated"), except the sizes streaming writers put before they know the length (0,
//! 0xFFFFFFFF, and anything from 0x7FFFF000 up, e.g. espeak-ng writing to a pipe), which
//! read to the end of the file. A partial last frame is an error too.
//!
//! **Resampling** ([`resample`]): a polyphase windowed-sinc filter for the rational ratio
//! `to/from` reduced by their gcd (44.1 kHz → 16 kHz is 160/441). The low-pass cuts off at
//! 0.45 of the lower of the two rates (0.9 of the lower Nyquist frequency) and is windowed
//! by a Kaiser window with β = 8.6 over 32 zero crossings of the lower rate each side,
//! which gives about 85 dB of stopband attenuation. Samples outside the input count as
//! zero. The output has `ceil(n·to/from)` samples, sample `k` at time `k/to`.
#![warn(missing_docs)]

use std::fmt;
use std::path::Path;
use thiserror::Error;

/// Errors reading or resampling audio.
#[derive(Debug, Error)]
pub enum AudioError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not a WAV file, or one this reader cannot take; says what is wrong and what is taken.
    #[error("{0}")]
    Format(String),
    /// The file ends before what its headers declare.
    #[error("truncated: {0}")]
    Truncated(String),
    /// The file holds no samples.
    #[error("the file holds no samples")]
    Empty,
    /// A sample rate of zero.
    #[error("a sample rate of 0 Hz")]
    ZeroRate,
}

/// The encoding of a WAV file's samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleFormat {
    /// 8-bit unsigned integers.
    Pcm8,
    /// 16-bit signed integers.
    Pcm16,
    /// 24-bit signed integers.
    Pcm24,
    /// 32-bit signed integers.
    Pcm32,
    /// 32-bit floats.
    Float32,
    /// 64-bit floats.
    Float64,
}

impl SampleFormat {
    fn bytes(self) -> usize {
        match self {
            SampleFormat::Pcm8 => 1,
            SampleFormat::Pcm16 => 2,
            SampleFormat::Pcm24 => 3,
            SampleFormat::Pcm32 | SampleFormat::Float32 => 4,
            SampleFormat::Float64 => 8,
        }
    }

    /// One sample from its little-endian bytes, full scale 1.0.
    fn decode(self, b: &[u8]) -> f32 {
        match self {
            SampleFormat::Pcm8 => (b[0] as f32 - 128.0) / 128.0,
            SampleFormat::Pcm16 => i16::from_le_bytes([b[0], b[1]]) as f32 / 32768.0,
            SampleFormat::Pcm24 => (i32::from_le_bytes([0, b[0], b[1], b[2]]) >> 8) as f32 / 8_388_608.0,
            SampleFormat::Pcm32 => (i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64 / 2_147_483_648.0) as f32,
            SampleFormat::Float32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            SampleFormat::Float64 => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32,
        }
    }
}

impl fmt::Display for SampleFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SampleFormat::Pcm8 => "8-bit PCM",
            SampleFormat::Pcm16 => "16-bit PCM",
            SampleFormat::Pcm24 => "24-bit PCM",
            SampleFormat::Pcm32 => "32-bit PCM",
            SampleFormat::Float32 => "32-bit float",
            SampleFormat::Float64 => "64-bit float",
        })
    }
}

/// Decoded audio: one channel, full scale 1.0.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    /// Samples per second.
    pub sample_rate: u32,
    /// Channels in the file (mixed into `samples`).
    pub channels: u16,
    /// What the file held.
    pub format: SampleFormat,
    /// The mono samples.
    pub samples: Vec<f32>,
}

impl Audio {
    /// Length in seconds.
    pub fn duration_s(&self) -> f64 {
        self.samples.len() as f64 / self.sample_rate.max(1) as f64
    }
}

const ACCEPTED: &str = "PCM 8/16/24/32-bit integer or 32/64-bit float";

/// Reads a WAV file ([`parse_wav`]); errors name the file.
pub fn read_wav(path: &Path) -> Result<Audio, AudioError> {
    let bytes = std::fs::read(path).map_err(|source| AudioError::Io { path: path.display().to_string(), source })?;
    parse_wav(&bytes).map_err(|e| match e {
        AudioError::Format(m) => AudioError::Format(format!("{}: {m}", path.display())),
        AudioError::Truncated(m) => AudioError::Truncated(format!("{}: {m}", path.display())),
        AudioError::Empty => AudioError::Format(format!("{}: the file holds no samples", path.display())),
        e => e,
    })
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Decodes a WAV file's bytes (see the module docs for what is taken).
pub fn parse_wav(b: &[u8]) -> Result<Audio, AudioError> {
    if b.len() < 12 || &b[..4] != b"RIFF" || &b[8..12] != b"WAVE" {
        return Err(AudioError::Format(format!("not a WAV file (no RIFF/WAVE header); WAV files of {ACCEPTED} are taken")));
    }
    let mut fmt: Option<(SampleFormat, u16, u32)> = None;
    let mut pos = 12;
    while pos + 8 <= b.len() {
        let (id, size) = (&b[pos..pos + 4], u32_at(b, pos + 4));
        let body = pos + 8;
        if id == b"data" {
            let (format, channels, rate) = fmt.ok_or_else(|| AudioError::Format("the data chunk comes before any fmt chunk".into()))?;
            let rest = b.len() - body;
            let streaming = size == 0 || size >= 0x7FFF_F000;
            let len = if streaming {
                rest
            } else if size as usize > rest {
                return Err(AudioError::Truncated(format!("the data chunk declares {size} bytes, the file holds {rest}")));
            } else {
                size as usize
            };
            let frame = format.bytes() * channels as usize;
            let data = &b[body..body + len];
            if !data.len().is_multiple_of(frame) && !streaming {
                return Err(AudioError::Truncated(format!("the data ends inside a frame ({} bytes, frames of {frame})", data.len())));
            }
            let frames = data.len() / frame;
            if frames == 0 {
                return Err(AudioError::Empty);
            }
            let w = format.bytes();
            let samples = data[..frames * frame].chunks_exact(frame).map(|f| f.chunks_exact(w).map(|s| format.decode(s)).sum::<f32>() / channels as f32).collect();
            return Ok(Audio { sample_rate: rate, channels, format, samples });
        }
        if id == b"fmt " {
            if size < 16 || body + 16 > b.len() {
                return Err(AudioError::Truncated(format!("the fmt chunk holds {} bytes of the 16 a WAV header needs", size.min((b.len() - body) as u32))));
            }
            let mut code = u16_at(b, body);
            let (channels, rate, align, bits) = (u16_at(b, body + 2), u32_at(b, body + 4), u16_at(b, body + 12), u16_at(b, body + 14));
            if code == 0xFFFE {
                if size < 40 || body + 26 > b.len() {
                    return Err(AudioError::Format("a WAVE_FORMAT_EXTENSIBLE fmt chunk without its sub-format".into()));
                }
                code = u16_at(b, body + 24);
            }
            let format = match (code, bits) {
                (1, 8) => SampleFormat::Pcm8,
                (1, 16) => SampleFormat::Pcm16,
                (1, 24) => SampleFormat::Pcm24,
                (1, 32) => SampleFormat::Pcm32,
                (3, 32) => SampleFormat::Float32,
                (3, 64) => SampleFormat::Float64,
                (1 | 3, _) => return Err(AudioError::Format(format!("{bits}-bit {} samples; {ACCEPTED} are taken", if code == 1 { "integer" } else { "float" }))),
                _ => {
                    let name = match code {
                        2 => " (Microsoft ADPCM)",
                        6 => " (A-law)",
                        7 => " (µ-law)",
                        0x11 => " (IMA ADPCM)",
                        0x55 => " (MP3)",
                        _ => "",
                    };
                    return Err(AudioError::Format(format!("encoding {code:#06x}{name} is not supported; {ACCEPTED} are taken")));
                }
            };
            if channels == 0 {
                return Err(AudioError::Format("the fmt chunk declares 0 channels".into()));
            }
            if rate == 0 {
                return Err(AudioError::ZeroRate);
            }
            if align as usize != format.bytes() * channels as usize {
                return Err(AudioError::Format(format!("block align {align} does not fit {channels} channel(s) of {bits}-bit samples")));
            }
            fmt = Some((format, channels, rate));
        }
        pos = body.saturating_add(size as usize).saturating_add(size as usize & 1);
    }
    Err(match fmt {
        None => AudioError::Format("no fmt chunk".into()),
        Some(_) => AudioError::Format("no data chunk".into()),
    })
}

/// Raw little-endian 16-bit PCM as samples of full scale 1.0; a trailing odd byte is ignored
/// (a caller reading a stream keeps it for the next chunk).
pub fn pcm16_le(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]]) as f32 / 32768.0).collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Zero-order modified Bessel function of the first kind (power series).
fn bessel_i0(x: f64) -> f64 {
    let (mut sum, mut term, mut k) = (1.0, 1.0, 1.0);
    while term > 1e-12 * sum {
        term *= (x / (2.0 * k)).powi(2);
        sum += term;
        k += 1.0;
    }
    sum
}

/// Kaiser β of the resampler's window.
pub const KAISER_BETA: f64 = 8.6;
/// Zero crossings of the low-pass (at the lower rate) on each side of its centre.
pub const ZERO_CROSSINGS: usize = 32;
/// The low-pass cut-off as a fraction of the lower of the two rates.
pub const CUTOFF: f64 = 0.45;

/// The resampler's continuous filter at offset `t` input samples from the output time, for
/// cut-off `fc` cycles per input sample and half-width `half` input samples.
fn kernel(t: f64, fc: f64, half: f64) -> f64 {
    if t.abs() >= half {
        return 0.0;
    }
    let x = 2.0 * fc * t;
    let sinc = if x.abs() < 1e-12 { 1.0 } else { (std::f64::consts::PI * x).sin() / (std::f64::consts::PI * x) };
    let r = t / half;
    2.0 * fc * sinc * bessel_i0(KAISER_BETA * (1.0 - r * r).max(0.0).sqrt()) / bessel_i0(KAISER_BETA)
}

/// Resamples `x` from `from_hz` to `to_hz` (see the module docs for the filter); a copy when
/// the rates are equal.
pub fn resample(x: &[f32], from_hz: u32, to_hz: u32) -> Result<Vec<f32>, AudioError> {
    if from_hz == 0 || to_hz == 0 {
        return Err(AudioError::ZeroRate);
    }
    if from_hz == to_hz {
        return Ok(x.to_vec());
    }
    let g = gcd(from_hz as u64, to_hz as u64);
    let (up, down) = ((to_hz as u64 / g) as usize, (from_hz as u64 / g) as usize);
    // Cut-off in cycles per input sample; half-width in input samples.
    let fc = CUTOFF * (from_hz.min(to_hz) as f64) / from_hz as f64;
    let half = ZERO_CROSSINGS as f64 / (2.0 * fc);
    let taps = 2 * half.ceil() as usize + 1;
    // Phase p (output k with k·down mod up = p) sits p/up of an input sample after input
    // floor(k·down/up); its taps are inputs base − half.ceil() + j.
    let h0 = half.ceil() as isize;
    let bank: Vec<f32> = (0..up).flat_map(|p| (0..taps).map(move |j| kernel((j as isize - h0) as f64 - p as f64 / up as f64, fc, half) as f32)).collect();
    let n = (x.len() as u64 * up as u64).div_ceil(down as u64) as usize;
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        let pos = k as u64 * down as u64;
        let (base, p) = ((pos / up as u64) as isize, (pos % up as u64) as usize);
        let f = &bank[p * taps..(p + 1) * taps];
        let start = base - h0;
        let (j0, j1) = ((-start).max(0) as usize, ((x.len() as isize - start).min(taps as isize)).max(0) as usize);
        let mut acc = 0f32;
        for j in j0..j1 {
            acc += f[j] * x[(start + j as isize) as usize];
        }
        out.push(acc);
    }
    Ok(out)
}

/// The resampler evaluated directly in f64 from its continuous filter (the reference of the
/// tests; slow).
#[doc(hidden)]
pub fn resample_reference(x: &[f32], from_hz: u32, to_hz: u32) -> Vec<f64> {
    let fc = CUTOFF * (from_hz.min(to_hz) as f64) / from_hz as f64;
    let half = ZERO_CROSSINGS as f64 / (2.0 * fc);
    let n = (x.len() as u64 * to_hz as u64).div_ceil(from_hz as u64) as usize;
    (0..n)
        .map(|k| {
            let t = k as f64 * from_hz as f64 / to_hz as f64;
            let (lo, hi) = (((t - half).floor().max(0.0)) as usize, ((t + half).ceil() as usize).min(x.len().saturating_sub(1)));
            (lo..=hi).map(|i| kernel(i as f64 - t, fc, half) * x[i] as f64).sum()
        })
        .collect()
}
