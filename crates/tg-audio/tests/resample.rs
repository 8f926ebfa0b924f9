//! The resampler against sine waves evaluated in f64 and against a direct f64 evaluation of
//! its own filter.

use tg_audio::{resample, resample_reference, AudioError};

fn sine(f: f64, rate: u32, n: usize, amp: f64) -> Vec<f32> {
    (0..n).map(|i| (amp * (2.0 * std::f64::consts::PI * f * i as f64 / rate as f64).sin()) as f32).collect()
}

fn rms(x: &[f32]) -> f64 {
    (x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
}

/// Max |y − sin(2πf·k/to)| over the outputs away from the edges.
fn sine_error(f: f64, from: u32, to: u32) -> f64 {
    let x = sine(f, from, from as usize, 0.5);
    let y = resample(&x, from, to).unwrap();
    let want = sine(f, to, y.len(), 0.5);
    (200..y.len() - 200).map(|k| (y[k] as f64 - want[k] as f64).abs()).fold(0.0, f64::max)
}

#[test]
fn sines_keep_their_shape() {
    let e = sine_error(1000.0, 44100, 16000);
    assert!(e < 1e-3, "44.1k → 16k: {e}");
    let e = sine_error(440.0, 8000, 16000);
    assert!(e < 1e-3, "8k → 16k: {e}");
    let e = sine_error(2500.0, 22050, 16000);
    assert!(e < 1e-3, "22.05k → 16k: {e}");
}

#[test]
fn passband_and_stopband() {
    let x = sine(3000.0, 48000, 48000, 0.5);
    let y = resample(&x, 48000, 16000).unwrap();
    let db = 20.0 * (rms(&y[200..y.len() - 200]) / rms(&x)).log10();
    assert!(db.abs() < 0.1, "3 kHz kept within 0.1 dB: {db}");
    // 7.5 kHz is inside the output's Nyquist band but above the cut-off (7.2 kHz): it is
    // in the transition band; 9 kHz would alias to 7 kHz.
    let x = sine(9000.0, 48000, 48000, 0.5);
    let y = resample(&x, 48000, 16000).unwrap();
    let db = 20.0 * (rms(&y[200..y.len() - 200]) / rms(&x)).log10();
    assert!(db < -60.0, "9 kHz (would alias) attenuated: {db} dB");
    let x = sine(12000.0, 44100, 44100, 0.5);
    let y = resample(&x, 44100, 16000).unwrap();
    let db = 20.0 * (rms(&y[200..y.len() - 200]) / rms(&x)).log10();
    assert!(db < -80.0, "12 kHz at 44.1k attenuated: {db} dB");
}

#[test]
fn polyphase_matches_the_direct_filter() {
    let mut s = 12345u64;
    let x: Vec<f32> = (0..3000)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
        })
        .collect();
    for (from, to) in [(44100, 16000), (22050, 16000), (8000, 16000), (48000, 16000), (11025, 16000)] {
        let y = resample(&x, from, to).unwrap();
        let r = resample_reference(&x, from, to);
        assert_eq!(y.len(), r.len());
        let e = y.iter().zip(&r).map(|(&a, &b)| (a as f64 - b).abs()).fold(0.0, f64::max);
        assert!(e < 1e-5, "{from} → {to}: {e}");
    }
}

#[test]
fn lengths_identity_and_errors() {
    let x = vec![0.25f32; 441];
    assert_eq!(resample(&x, 44100, 16000).unwrap().len(), 160);
    assert_eq!(resample(&x[..440], 44100, 16000).unwrap().len(), 160);
    assert_eq!(resample(&x[..1], 44100, 16000).unwrap().len(), 1);
    assert_eq!(resample(&[], 44100, 16000).unwrap().len(), 0);
    assert_eq!(resample(&x, 8000, 16000).unwrap().len(), 882);
    assert_eq!(resample(&x, 16000, 16000).unwrap(), x);
    assert!(matches!(resample(&x, 0, 16000), Err(AudioError::ZeroRate)));
    assert!(matches!(resample(&x, 16000, 0), Err(AudioError::ZeroRate)));
}
