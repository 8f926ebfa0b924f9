//! The WAV reader on files written here, every accepted encoding, and every kind of bad file.

use tg_audio::{parse_wav, pcm16_le, AudioError, SampleFormat};

/// A WAV file: fmt (code, channels, rate, bits; extensible when `ext`), optional extra
/// chunks before the data, the data bytes, and the data size to declare.
fn wav(code: u16, channels: u16, rate: u32, bits: u16, ext: bool, extra: &[(&[u8; 4], Vec<u8>)], data: &[u8], declared: Option<u32>) -> Vec<u8> {
    let mut fmt = Vec::new();
    fmt.extend((if ext { 0xFFFEu16 } else { code }).to_le_bytes());
    fmt.extend(channels.to_le_bytes());
    fmt.extend(rate.to_le_bytes());
    let align = channels * bits / 8;
    fmt.extend((rate * align as u32).to_le_bytes());
    fmt.extend(align.to_le_bytes());
    fmt.extend(bits.to_le_bytes());
    if ext {
        fmt.extend(22u16.to_le_bytes());
        fmt.extend(bits.to_le_bytes());
        fmt.extend(0u32.to_le_bytes());
        fmt.extend(code.to_le_bytes());
        fmt.extend([0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71]);
    }
    let mut body = b"WAVE".to_vec();
    let mut chunk = |id: &[u8; 4], b: &[u8], size: u32| {
        body.extend(id);
        body.extend(size.to_le_bytes());
        body.extend(b);
        if b.len() % 2 == 1 && id != b"data" {
            body.push(0);
        }
    };
    chunk(b"fmt ", &fmt, fmt.len() as u32);
    for (id, b) in extra {
        chunk(id, b, b.len() as u32);
    }
    chunk(b"data", data, declared.unwrap_or(data.len() as u32));
    let mut out = b"RIFF".to_vec();
    out.extend((body.len() as u32).to_le_bytes());
    out.extend(body);
    out
}

#[test]
fn every_encoding_decodes_exactly() {
    let v16: [i16; 4] = [0, 16384, -32768, 32767];
    let d: Vec<u8> = v16.iter().flat_map(|x| x.to_le_bytes()).collect();
    let a = parse_wav(&wav(1, 1, 16000, 16, false, &[], &d, None)).unwrap();
    assert_eq!((a.sample_rate, a.channels, a.format), (16000, 1, SampleFormat::Pcm16));
    assert_eq!(a.samples, vec![0.0, 0.5, -1.0, 32767.0 / 32768.0]);

    let a = parse_wav(&wav(1, 1, 8000, 8, false, &[], &[128, 192, 0], None)).unwrap();
    assert_eq!(a.samples, vec![0.0, 0.5, -1.0]);

    let v24: [i32; 3] = [0, 4_194_304, -8_388_608];
    let d: Vec<u8> = v24.iter().flat_map(|x| x.to_le_bytes()[..3].to_vec()).collect();
    let a = parse_wav(&wav(1, 1, 44100, 24, false, &[], &d, None)).unwrap();
    assert_eq!((a.format, a.samples.clone()), (SampleFormat::Pcm24, vec![0.0, 0.5, -1.0]));

    let d: Vec<u8> = [1i32 << 30, i32::MIN].iter().flat_map(|x| x.to_le_bytes()).collect();
    assert_eq!(parse_wav(&wav(1, 1, 48000, 32, false, &[], &d, None)).unwrap().samples, vec![0.5, -1.0]);

    let f: [f32; 3] = [0.25, -0.75, 1.0];
    let d: Vec<u8> = f.iter().flat_map(|x| x.to_le_bytes()).collect();
    let a = parse_wav(&wav(3, 1, 22050, 32, false, &[], &d, None)).unwrap();
    assert_eq!((a.format, a.samples.clone()), (SampleFormat::Float32, f.to_vec()));
    let a = parse_wav(&wav(3, 1, 22050, 32, true, &[], &d, None)).unwrap();
    assert_eq!(a.samples, f.to_vec(), "extensible float");
    let d: Vec<u8> = [0.125f64, -0.5].iter().flat_map(|x| x.to_le_bytes()).collect();
    assert_eq!(parse_wav(&wav(3, 1, 8000, 64, false, &[], &d, None)).unwrap().samples, vec![0.125, -0.5]);
}

#[test]
fn stereo_is_averaged_and_other_chunks_are_skipped() {
    // Frames (L, R): (0.5, -0.5), (0.5, 0.25) in PCM16; a LIST chunk of odd size first.
    let d: Vec<u8> = [16384i16, -16384, 16384, 8192].iter().flat_map(|x| x.to_le_bytes()).collect();
    let a = parse_wav(&wav(1, 2, 16000, 16, true, &[(b"LIST", vec![1, 2, 3]), (b"fact", vec![0; 4])], &d, None)).unwrap();
    assert_eq!(a.channels, 2);
    assert_eq!(a.samples, vec![0.0, 0.375]);
    assert!((a.duration_s() - 2.0 / 16000.0).abs() < 1e-12);
}

#[test]
fn streaming_sizes_read_to_the_end() {
    let d: Vec<u8> = [100i16, 200, 300].iter().flat_map(|x| x.to_le_bytes()).collect();
    for declared in [0u32, 0xFFFF_FFFF, 0x7FFF_F000] {
        let a = parse_wav(&wav(1, 1, 22050, 16, false, &[], &d, Some(declared))).unwrap();
        assert_eq!(a.samples.len(), 3, "declared {declared:#x}");
    }
}

fn err(b: &[u8]) -> String {
    parse_wav(b).unwrap_err().to_string()
}

#[test]
fn bad_files_say_what_is_wrong() {
    let d: Vec<u8> = [1i16, 2, 3, 4].iter().flat_map(|x| x.to_le_bytes()).collect();
    assert!(err(b"OggS not a wav file").contains("not a WAV file"));
    assert!(err(&[]).contains("not a WAV file"));
    let alaw = err(&wav(6, 1, 8000, 8, false, &[], &d, None));
    assert!(alaw.contains("A-law") && alaw.contains("are taken"), "{alaw}");
    assert!(err(&wav(2, 1, 8000, 16, false, &[], &d, None)).contains("ADPCM"));
    assert!(err(&wav(1, 1, 8000, 12, false, &[], &d, None)).contains("12-bit"));
    assert!(matches!(parse_wav(&wav(1, 1, 0, 16, false, &[], &d, None)), Err(AudioError::ZeroRate)));
    assert!(err(&wav(1, 0, 8000, 16, false, &[], &d, None)).contains("0 channels"));
    // Declared 100 bytes, 8 present.
    let t = err(&wav(1, 1, 8000, 16, false, &[], &d, Some(100)));
    assert!(t.contains("truncated") && t.contains("100"), "{t}");
    // A partial frame: 7 bytes of 16-bit stereo.
    let t = err(&wav(1, 2, 8000, 16, false, &[], &d[..7], None));
    assert!(t.contains("inside a frame"), "{t}");
    assert!(matches!(parse_wav(&wav(1, 1, 8000, 16, false, &[], &[], None)), Err(AudioError::Empty)));
    // A header with no data chunk.
    let full = wav(1, 1, 8000, 16, false, &[], &d, None);
    assert!(err(&full[..36]).contains("no data chunk"));
}

#[test]
fn no_input_panics() {
    let d: Vec<u8> = (0..64i16).flat_map(|x| (x * 300).to_le_bytes()).collect();
    let full = wav(1, 2, 16000, 16, true, &[(b"LIST", vec![7; 5])], &d, None);
    for n in 0..full.len() {
        let _ = parse_wav(&full[..n]);
    }
    // Byte flips, from a small LCG.
    let mut s = 0x2545F4914F6CDD1Du64;
    for _ in 0..20_000 {
        let mut b = full.clone();
        for _ in 0..3 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let i = (s >> 33) as usize % b.len();
            b[i] = (s >> 13) as u8;
        }
        let _ = parse_wav(&b);
    }
}

#[test]
fn raw_pcm() {
    assert_eq!(pcm16_le(&[0x00, 0x40, 0x00, 0x80, 0x07]), vec![0.5, -1.0]);
}
