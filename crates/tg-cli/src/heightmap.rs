//! Heightmaps as pictures: a colour-mapped, hill-shaded RGB PNG for people and a 16-bit
//! greyscale PNG for game engines, several samples as a grid of tiles; PNGs written whole
//! or not at all.
//!
//! Colour: the height, scaled to [0, 1] over the given range, through a terrain ramp
//! ([`RAMP`]: water, sand, grass, forest, earth, rock, snow), interpolated linearly. Shade:
//! Lambert's cosine of the surface normal (central differences of the heights in
//! metres, edges clamped, pixels [`PIXEL_M`] apart) with a light from the north-west
//! (azimuth 315°, 45° up; image rows run south), blended as
//! `colour·(AMBIENT + (1 − AMBIENT)·shade)`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// The colour ramp: (position in [0, 1], sRGB).
pub(crate) const RAMP: [(f32, [u8; 3]); 8] = [
    (0.00, [28, 70, 130]),
    (0.08, [60, 120, 180]),
    (0.12, [210, 200, 150]),
    (0.25, [90, 150, 70]),
    (0.45, [40, 105, 50]),
    (0.65, [120, 95, 60]),
    (0.85, [140, 135, 130]),
    (1.00, [250, 250, 250]),
];
/// Metres per pixel for the shading (the package's default `horizontal_scale`).
pub(crate) const PIXEL_M: f32 = 0.1;
/// Light that reaches slopes facing away.
pub(crate) const AMBIENT: f32 = 0.35;
/// Pixels between tiles.
const GAP: usize = 4;
/// Background of the gaps (RGB).
const BACKGROUND: [u8; 3] = [255, 255, 255];

fn ramp(t: f32) -> [f32; 3] {
    let t = t.clamp(0.0, 1.0);
    let i = RAMP.iter().rposition(|(p, _)| *p <= t).unwrap_or(0).min(RAMP.len() - 2);
    let ((p0, c0), (p1, c1)) = (RAMP[i], RAMP[i + 1]);
    let f = ((t - p0) / (p1 - p0)).clamp(0.0, 1.0);
    [0, 1, 2].map(|k| c0[k] as f32 + f * (c1[k] as f32 - c0[k] as f32))
}

/// One `[h, w]` grid of heights (metres) as RGB bytes, coloured over the height range
/// `range` and shaded.
pub(crate) fn shaded(v: &[f32], w: usize, h: usize, range: (f32, f32)) -> Vec<u8> {
    let span = (range.1 - range.0).max(f32::MIN_POSITIVE);
    let t = |x: usize, y: usize| (v[y.min(h - 1) * w + x.min(w - 1)] - range.0) / span;
    let (az, alt) = (315f32.to_radians(), 45f32.to_radians());
    // Light direction: x east, y south (rows), z up.
    let light = [alt.cos() * az.sin(), -alt.cos() * az.cos(), alt.sin()];
    let mut out = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let m = |x: usize, y: usize| v[y.min(h - 1) * w + x.min(w - 1)];
            let dx = (m(x + 1, y) - m(x.saturating_sub(1), y)) / (2.0 * PIXEL_M);
            let dy = (m(x, y + 1) - m(x, y.saturating_sub(1))) / (2.0 * PIXEL_M);
            let n = [-dx, -dy, 1.0];
            let len = (n[0] * n[0] + n[1] * n[1] + 1.0).sqrt();
            let shade = ((n[0] * light[0] + n[1] * light[1] + n[2] * light[2]) / len).max(0.0);
            let c = ramp(t(x, y));
            out.extend(c.map(|c| (c * (AMBIENT + (1.0 - AMBIENT) * shade)).round().clamp(0.0, 255.0) as u8));
        }
    }
    out
}

/// Columns and rows of a grid of `n` tiles.
fn grid(n: usize) -> (usize, usize) {
    let cols = (n as f64).sqrt().ceil().max(1.0) as usize;
    (cols, n.div_ceil(cols))
}

/// Tiles of `px`-sized pixels (`[h, w]` each) laid out in a grid with gaps of `bg`:
/// (width, height, pixels).
fn compose<T: Copy>(tiles: &[Vec<T>], w: usize, h: usize, px: usize, bg: &[T]) -> (usize, usize, Vec<T>) {
    let (cols, rows) = grid(tiles.len());
    let (gw, gh) = (cols * w + (cols - 1) * GAP, rows * h + (rows - 1) * GAP);
    let mut out: Vec<T> = bg.iter().copied().cycle().take(gw * gh * px).collect();
    for (i, t) in tiles.iter().enumerate() {
        let (x0, y0) = ((i % cols) * (w + GAP), (i / cols) * (h + GAP));
        for y in 0..h {
            let dst = ((y0 + y) * gw + x0) * px;
            out[dst..dst + w * px].copy_from_slice(&t[y * w * px..(y + 1) * w * px]);
        }
    }
    (gw, gh, out)
}

/// The picture of heightmaps `tiles` (`[h, w]` each, metres) coloured over the height
/// range `range` (`None`: each tile's own lowest to highest point): (width, height, RGB
/// bytes).
pub(crate) fn picture(tiles: &[&[f32]], w: usize, h: usize, range: Option<(f32, f32)>) -> (usize, usize, Vec<u8>) {
    let own = |t: &[f32]| (t.iter().copied().fold(f32::INFINITY, f32::min), t.iter().copied().fold(f32::NEG_INFINITY, f32::max));
    let rgb: Vec<Vec<u8>> = tiles.iter().map(|t| shaded(t, w, h, range.unwrap_or_else(|| own(t)))).collect();
    compose(&rgb, w, h, 3, &BACKGROUND)
}

/// Heights linearly mapped from `range` to 0..65535 (rounded, clamped; NaN → 0), the tiles
/// in a grid with gaps of 0: (width, height, values).
pub(crate) fn grey16(tiles: &[&[f32]], w: usize, h: usize, range: (f32, f32)) -> (usize, usize, Vec<u16>) {
    let span = (range.1 - range.0).max(f32::MIN_POSITIVE);
    let q: Vec<Vec<u16>> = tiles.iter().map(|t| t.iter().map(|&v| ((v - range.0) / span * 65535.0).round().clamp(0.0, 65535.0) as u16).collect()).collect();
    compose(&q, w, h, 1, &[0])
}

/// Writes `path` through a temporary file next to it, renamed over it once `f` has written
/// everything: readers see the old file or the new one; on an error the old one is left.
pub(crate) fn write_atomic(path: &Path, f: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>) -> Result<(), String> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| format!("{}: not a file name", path.display()))?;
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut w = BufWriter::new(File::create(&tmp)?);
        f(&mut w)?;
        w.flush()?;
        drop(w);
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

fn png(path: &Path, w: usize, h: usize, colour: png::ColorType, depth: png::BitDepth, data: &[u8]) -> Result<(), String> {
    write_atomic(path, |out| {
        let mut e = png::Encoder::new(out, w as u32, h as u32);
        e.set_color(colour);
        e.set_depth(depth);
        let mut wr = e.write_header().map_err(io::Error::other)?;
        wr.write_image_data(data).map_err(io::Error::other)?;
        wr.finish().map_err(io::Error::other)
    })
}

/// An 8-bit RGB PNG.
pub(crate) fn write_png_rgb(path: &Path, w: usize, h: usize, rgb: &[u8]) -> Result<(), String> {
    png(path, w, h, png::ColorType::Rgb, png::BitDepth::Eight, rgb)
}

/// A 16-bit greyscale PNG.
pub(crate) fn write_png_gray16(path: &Path, w: usize, h: usize, v: &[u16]) -> Result<(), String> {
    let be: Vec<u8> = v.iter().flat_map(|x| x.to_be_bytes()).collect();
    png(path, w, h, png::ColorType::Grayscale, png::BitDepth::Sixteen, &be)
}

/// A greyscale PNG (8 or 16 bits; an RGB one is refused) as values in [0, 1]:
/// (width, height, values).
pub(crate) fn read_png_gray(path: &Path) -> Result<(usize, usize, Vec<f32>), String> {
    let bad = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let f = File::open(path).map_err(|e| bad(&e))?;
    let mut d = png::Decoder::new(io::BufReader::new(f));
    d.set_transformations(png::Transformations::EXPAND);
    let mut r = d.read_info().map_err(|e| bad(&e))?;
    let mut buf = vec![0; r.output_buffer_size().ok_or_else(|| bad(&"image too large"))?];
    let info = r.next_frame(&mut buf).map_err(|e| bad(&e))?;
    if info.color_type != png::ColorType::Grayscale {
        return Err(format!("{}: a {:?} PNG; a greyscale heightmap (8 or 16 bits) is taken", path.display(), info.color_type));
    }
    let v: Vec<f32> = match info.bit_depth {
        png::BitDepth::Sixteen => buf[..info.buffer_size()].chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]]) as f32 / 65535.0).collect(),
        _ => buf[..info.buffer_size()].iter().map(|&b| b as f32 / 255.0).collect(),
    };
    Ok((info.width as usize, info.height as usize, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tg-heightmap-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join(name)
    }

    #[test]
    fn png16_round_trips() {
        let v: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let (w, h, q) = grey16(&[&v], 4, 3, (0.0, 11.0));
        assert_eq!((w, h, q[0], q[11]), (4, 3, 0, 65535));
        let p = tmp("a.png");
        write_png_gray16(&p, w, h, &q).unwrap();
        let d = png::Decoder::new(io::BufReader::new(File::open(&p).unwrap()));
        let r = d.read_info().unwrap();
        assert_eq!((r.info().bit_depth, r.info().color_type), (png::BitDepth::Sixteen, png::ColorType::Grayscale));
        let (rw, rh, back) = read_png_gray(&p).unwrap();
        assert_eq!((rw, rh), (4, 3));
        for (b, x) in back.iter().zip(&q) {
            assert_eq!((b * 65535.0).round() as u16, *x);
        }
    }

    #[test]
    fn flat_is_uniform_and_lit_slopes_are_brighter() {
        let flat = vec![0.3f32; 16 * 16];
        let img = shaded(&flat, 16, 16, (0.0, 1.0));
        assert!(img.chunks(3).all(|p| p == &img[..3]));
        // A surface rising toward the south-east tilts its normal toward the north-west,
        // where the light is.
        let up: Vec<f32> = (0..256).map(|i| ((i % 16) + (i / 16)) as f32 / 30.0).collect();
        let down: Vec<f32> = up.iter().map(|v| 1.0 - v).collect();
        let (a, b) = (shaded(&up, 16, 16, (0.0, 1.0)), shaded(&down, 16, 16, (0.0, 1.0)));
        // Same colours overall (mirrored heights), so compare the shade at the centre pixel
        // against the colour there.
        let c = (8 * 16 + 8) * 3;
        let col_up = ramp(up[8 * 16 + 8]);
        let col_down = ramp(down[8 * 16 + 8]);
        assert!(a[c] as f32 / col_up[0] > b[c] as f32 / col_down[0], "lit {} vs {}", a[c], b[c]);
    }

    #[test]
    fn ramp_ends_and_grid() {
        let img = shaded(&[0.0, 0.0, 0.0, 0.0], 2, 2, (0.0, 1.0));
        let water = RAMP[0].1.map(|c| (c as f32 * (AMBIENT + (1.0 - AMBIENT) * 45f32.to_radians().sin())).round() as u8);
        assert_eq!(&img[..3], &water);
        let snow = ramp(1.0);
        assert_eq!(snow, [250.0; 3]);
        let t = vec![0.5f32; 4 * 4];
        let (w, h, rgb) = picture(&[&t, &t, &t], 4, 4, Some((0.0, 1.0)));
        assert_eq!((w, h), (2 * 4 + GAP, 2 * 4 + GAP));
        assert_eq!(rgb.len(), w * h * 3);
        // The fourth cell and the gaps are background.
        let px = |x: usize, y: usize| &rgb[(y * w + x) * 3..(y * w + x) * 3 + 3];
        assert_eq!(px(w - 1, h - 1), &BACKGROUND);
        assert_eq!(px(4, 0), &BACKGROUND);
        assert_ne!(px(0, 0), &BACKGROUND);
    }

    #[test]
    fn writes_are_atomic() {
        let p = tmp("missing-dir").join("x.png");
        let e = write_png_rgb(&p, 1, 1, &[1, 2, 3]).unwrap_err();
        assert!(e.contains("x.png"), "{e}");
        // A folder of its own: the other tests write their temporary files concurrently.
        let q = tmp("atomic").join("keep.png");
        std::fs::create_dir_all(q.parent().unwrap()).unwrap();
        std::fs::write(&q, b"old").unwrap();
        let e = write_atomic(&q, |w| {
            w.write_all(b"partial")?;
            Err(io::Error::other("encoder failed"))
        })
        .unwrap_err();
        assert!(e.contains("encoder failed"));
        assert_eq!(std::fs::read(&q).unwrap(), b"old");
        let leftovers = std::fs::read_dir(q.parent().unwrap()).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".tmp-")).count();
        assert_eq!(leftovers, 0);
    }
}
