//! The machinery of the backend-ops table: a [`Case`] (one kernel launch with its operands,
//! its output layout and the f64 reference it must match), the [`B`] builder that makes a
//! case and its reference graph side by side, and [`run_case`], which runs a case on a device
//! with guarded, poisoned buffers and compares the result.
//!
//! Operands: every non-weight operand is a contiguous *base* tensor in its own buffer (at byte
//! [`IN_LEAD`], after `pad` poisoned elements), read by the kernel through a layout made of
//! [`View`]s (permute, slice, expand, reshape) of the base. The reference graph reads the same
//! base tensor as an `Op::Input` and applies the same views as `Op::Permute` / `Op::Slice` /
//! `Op::Expand` / `Op::Reshape` nodes, so a layout bug (a wrong stride) and a kernel bug look
//! alike: the output differs from the interpreter's. Storage elements the layout never reaches
//! (the pad, the sliced-off parts) hold 0xFF bytes (NaN for f32): a kernel that reads them
//! shows NaN. Weights are bound with `Device::bind_weight` (the path plans take) and read by
//! the interpreter with the reference dequantizers.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::Arc;
use tg_ir::interp::{eval_with_states, Array};
use tg_ir::shape::{broadcast_strides, contiguous_strides, numel, strided_offsets};
use tg_ir::{DType, GraphBuilder, HostData, HostTensor, Tensor, WeightStore};
use tg_runtime::{Arg, Device, DeviceBuffer, Kernel, Layout};

/// Guard bytes before and after every output region.
pub const GUARD: usize = 256;
/// What the guard bytes hold (differs from the poison, so a kernel writing either shows).
pub const SENTINEL: u8 = 0x5A;
/// What the output region holds before the launch (NaN for f32, -1 for i32).
pub const POISON: u8 = 0xFF;
/// Bytes before (and after) each input's storage in its buffer.
pub const IN_LEAD: usize = 64;

/// The base seed; every case's seed is derived from it and the case's name.
pub fn base_seed() -> u64 {
    match std::env::var("TG_BACKEND_OPS_SEED") {
        Ok(s) => {
            let s = s.trim();
            let v = if let Some(h) = s.strip_prefix("0x") { u64::from_str_radix(h, 16) } else { s.parse() };
            v.unwrap_or_else(|_| panic!("TG_BACKEND_OPS_SEED={s:?} is not a number (decimal or 0x hex)"))
        }
        Err(_) => 0x7e57_0b5e,
    }
}

/// `[2, 6, 768]` written `[2,6,768]` (names and messages stay short).
pub fn compact(s: &str) -> String {
    let (mut out, mut depth, mut prev) = (String::with_capacity(s.len()), 0i32, ' ');
    for c in s.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ' ' if depth > 0 && prev == ',' => continue,
            _ => {}
        }
        out.push(c);
        prev = c;
    }
    out
}

fn case_seed(name: &str) -> u64 {
    // FNV-1a of the name, mixed with the base seed (splitmix64 finaliser).
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    let mut z = h ^ base_seed();
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// How a case's output is compared with its reference.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// Every element equal: f32 outputs bit for bit with the reference rounded to f32 (NaN
    /// matches NaN), i32 and bool outputs as integers (bools must be 0 or 1). For data
    /// movement, selections, casts, integer and boolean results.
    Exact,
    /// `Σ(out − ref)² / Σ ref² ≤ threshold` (ggml's NMSE) and no NaN or infinity where the
    /// reference has a finite value (NaN / ±inf in the reference must be matched exactly).
    /// The text says why the threshold is what it is.
    Nmse(f64, &'static str),
}

/// What a case expects.
pub enum Expect {
    /// The reference output (f64, row-major, of the output's shape) and how to compare.
    Value { want: Vec<f64>, check: Check },
    /// The kernel must report an error (from `launch` or from `synchronize`), write nothing
    /// outside its output and, when the output starts with known contents (a state), leave
    /// them as they were.
    Error { what: &'static str },
}

/// One operand of a case, as the device sees it.
pub struct Operand {
    /// Graph name (weight name for weights).
    pub name: String,
    /// The storage: `pad` poisoned elements, then the base tensor (weights: the raw blocks).
    pub bytes: Vec<u8>,
    /// The layout the kernel reads, relative to the storage start.
    pub layout: Layout,
    /// Bound as a weight (read in place / uploaded once) instead of written to a buffer.
    pub weight: bool,
    /// How the layout was made (for messages), e.g. `f32[13,7]+1 permute[1,0]`.
    pub how: String,
}

/// One kernel launch and what it must produce.
pub struct Case {
    /// Readable name, unique over all cases (the seed is derived from it).
    pub name: String,
    /// The seed of its random data.
    pub seed: u64,
    pub kernel: Kernel,
    pub inputs: Vec<Operand>,
    /// The output layout (contiguous, offset 0).
    pub out: Layout,
    /// Initial contents of the output region (a state StoreRows updates); else poison.
    pub init_out: Option<Vec<u8>>,
    pub expect: Expect,
}

impl Case {
    /// The operands, for failure messages.
    pub fn describe(&self) -> String {
        let ins: Vec<String> = self.inputs.iter().map(|o| format!("{}: {}", o.name, o.how)).collect();
        compact(&format!("{} -> {}{:?}", ins.join("; "), self.out.dtype, self.out.shape))
    }
}

/// A view of a tensor: what a layout with other strides or an offset reads.
#[derive(Clone, Debug)]
pub enum View {
    /// Output dim `i` is input dim `perm[i]` (a transposed view).
    Permute(Vec<usize>),
    /// Elements `start..end` of `axis` (a sliced view: an offset and a shorter dim).
    Slice(usize, usize, usize),
    /// Broadcast to a shape (stride 0 on new leading dims and on expanded size-1 dims).
    Expand(Vec<usize>),
    /// Same elements, new shape (only of contiguous views).
    Reshape(Vec<usize>),
}

impl View {
    fn apply(&self, l: &Layout) -> Layout {
        let mut l = l.clone();
        match self {
            View::Permute(p) => {
                l.shape = p.iter().map(|&i| l.shape[i]).collect();
                l.strides = p.iter().map(|&i| l.strides[i]).collect();
            }
            View::Slice(axis, start, end) => {
                l.offset = (l.offset as isize + *start as isize * l.strides[*axis]) as usize;
                l.shape[*axis] = end - start;
            }
            View::Expand(to) => {
                let off = to.len() - l.shape.len();
                let bs = broadcast_strides(&l.shape, to);
                l.strides = (0..to.len()).map(|i| if i < off || bs[i] == 0 { 0 } else { l.strides[i - off] }).collect();
                l.shape = to.clone();
            }
            View::Reshape(s) => {
                assert!(l.is_contiguous(), "test bug: reshape of a strided view");
                l.strides = contiguous_strides(s);
                l.shape = s.clone();
            }
        }
        l
    }

    fn graph(&self, g: &mut GraphBuilder, t: Tensor) -> Result<Tensor, tg_ir::IrError> {
        match self {
            View::Permute(p) => g.permute(t, p),
            View::Slice(a, s, e) => g.slice(t, *a, *s, *e),
            View::Expand(to) => g.expand(t, to),
            View::Reshape(s) => g.reshape(t, s),
        }
    }

    fn tag(&self) -> String {
        match self {
            View::Permute(p) => format!("permute{p:?}"),
            View::Slice(a, s, e) => format!("slice[{a}:{s}..{e}]"),
            View::Expand(to) => format!("expand{to:?}"),
            View::Reshape(s) => format!("reshape{s:?}"),
        }
    }
}

/// Builds one case: its operands, the reference graph over the same data, the output.
pub struct B {
    name: String,
    seed: u64,
    pub rng: ChaCha8Rng,
    pub g: GraphBuilder,
    inputs: HashMap<String, HostTensor>,
    weights: HashMap<String, Vec<u8>>,
    states: HashMap<String, Array>,
    ops: Vec<Operand>,
    init_out: Option<Vec<u8>>,
    /// Input node -> its name (for [`B::reference_values`]).
    input_nodes: HashMap<Tensor, String>,
}

fn elem_bytes(d: DType) -> usize {
    match d {
        DType::Bool => 1,
        _ => 4,
    }
}

fn host_bytes(d: &HostData) -> Vec<u8> {
    match d {
        HostData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::Bool(v) => v.clone(),
    }
}

fn host_dtype(d: &HostData) -> DType {
    match d {
        HostData::F32(_) => DType::F32,
        HostData::I32(_) => DType::I32,
        HostData::Bool(_) => DType::Bool,
    }
}

/// Sets element `i` of host data to the poison pattern (all bytes 0xFF).
fn poison_at(d: &mut HostData, i: usize) {
    match d {
        HostData::F32(v) => v[i] = f32::from_bits(u32::MAX),
        HostData::I32(v) => v[i] = -1,
        HostData::Bool(v) => v[i] = POISON,
    }
}

impl B {
    /// A new case builder; the seed comes from the name.
    pub fn new(name: impl Into<String>) -> B {
        let name = compact(&name.into());
        let seed = case_seed(&name);
        B {
            name,
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            g: GraphBuilder::new(),
            inputs: HashMap::new(),
            weights: HashMap::new(),
            states: HashMap::new(),
            ops: Vec::new(),
            init_out: None,
            input_nodes: HashMap::new(),
        }
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn uniform(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.rng.gen_range(lo..hi)).collect()
    }

    /// `n` values with magnitude uniform in `[lo, hi)` and a random sign (away from zero).
    pub fn signed(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| if self.rng.gen::<bool>() { -1.0 } else { 1.0 } * self.rng.gen_range(lo..hi)).collect()
    }

    /// `n` integers uniform in `lo..=hi`.
    pub fn ints(&mut self, n: usize, lo: i32, hi: i32) -> Vec<i32> {
        (0..n).map(|_| self.rng.gen_range(lo..=hi)).collect()
    }

    /// `n` random bools (0 or 1).
    pub fn bools(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.rng.gen::<bool>() as u8).collect()
    }

    fn tensor_err(&self, e: tg_ir::IrError) -> ! {
        panic!("test bug in case '{}': building its reference graph: {e}", self.name)
    }

    /// An operand: `data` as a contiguous base tensor of `shape`, read through `views`.
    /// The storage starts with a random pad of 0-3 poisoned elements.
    pub fn input(&mut self, shape: &[usize], mut data: HostData, views: &[View]) -> Tensor {
        let pad = self.rng.gen_range(0..4usize);
        self.input_at(shape, &mut data, views, pad)
    }

    fn input_at(&mut self, shape: &[usize], data: &mut HostData, views: &[View], pad: usize) -> Tensor {
        let dtype = host_dtype(data);
        let name = format!("in{}", self.ops.len());
        let mut layout = Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: pad, dtype };
        for v in views {
            layout = v.apply(&layout);
        }
        // Elements the view never reaches are poisoned, in the storage and in the reference.
        let n = numel(shape);
        let mut reached = vec![false; pad + n];
        for i in strided_offsets(&layout.shape, &layout.strides, layout.offset) {
            reached[i] = true;
        }
        for (i, &r) in reached.iter().enumerate().skip(pad) {
            if !r {
                poison_at(data, i - pad);
            }
        }
        let eb = elem_bytes(dtype);
        let mut bytes = vec![POISON; pad * eb];
        bytes.extend(host_bytes(data));
        let t = HostTensor::new(shape, data.clone()).unwrap_or_else(|e| panic!("test bug in case '{}': {e}", self.name));
        self.inputs.insert(name.clone(), t);
        let mut x = self.g.input(&name, shape, dtype).unwrap_or_else(|e| self.tensor_err(e));
        self.input_nodes.insert(x, name.clone());
        for v in views {
            x = v.graph(&mut self.g, x).unwrap_or_else(|e| self.tensor_err(e));
        }
        let mut how = format!("{dtype}{shape:?}");
        if pad > 0 {
            how += &format!(" at +{pad}");
        }
        for v in views {
            how += &format!(" {}", v.tag());
        }
        self.ops.push(Operand { name, bytes, layout, weight: false, how: compact(&how) });
        x
    }

    /// A random f32 operand (uniform in `[lo, hi)`) of base `shape`, read through `views`.
    pub fn f32_in(&mut self, shape: &[usize], views: &[View], lo: f32, hi: f32) -> Tensor {
        let v = self.uniform(numel(shape), lo, hi);
        self.input(shape, HostData::F32(v), views)
    }

    /// Replaces the values the reference interpreter reads for operand `t`'s input (the
    /// device keeps the original bytes): e.g. activations rounded as the q8 numerics round
    /// them. `t` must be the operand's own node (no views).
    pub fn reference_values(&mut self, t: Tensor, data: Vec<f32>) {
        let Some(name) = self.input_nodes.get(&t).cloned() else { panic!("test bug in case '{}': reference_values of a view", self.name) };
        let shape = self.g.shape(t).to_vec();
        let ht = HostTensor::f32(&shape, data).unwrap_or_else(|e| panic!("test bug in case '{}': {e}", self.name));
        self.inputs.insert(name, ht);
    }

    /// A weight of `dtype` (F32 or quantized storage) and shape `[rows, k]` holding `bytes`.
    pub fn weight(&mut self, dtype: DType, shape: &[usize], bytes: Vec<u8>) -> Tensor {
        let name = format!("w{}", self.ops.len());
        let t = self.g.weight(&name, shape, dtype).unwrap_or_else(|e| self.tensor_err(e));
        self.weights.insert(name.clone(), bytes.clone());
        self.ops.push(Operand { name, bytes, layout: Layout::contiguous(shape, dtype), weight: true, how: compact(&format!("{dtype}{shape:?} weight")) });
        t
    }

    /// The output region starts as this state (what StoreRows updates in place); the
    /// reference reads it as `Op::State` "s".
    pub fn state(&mut self, shape: &[usize], data: HostData) -> Tensor {
        let dtype = host_dtype(&data);
        let t = self.g.state("s", shape, dtype).unwrap_or_else(|e| self.tensor_err(e));
        let ht = HostTensor::new(shape, data.clone()).unwrap_or_else(|e| panic!("test bug in case '{}': {e}", self.name));
        self.states.insert("s".into(), Array { shape: shape.to_vec(), dtype, data: ht.to_f64() });
        self.init_out = Some(host_bytes(&data));
        t
    }

    /// Finishes a case whose output is graph node `out`: evaluates the reference.
    pub fn finish(mut self, kernel: Kernel, out: Tensor, check: Check) -> Case {
        let shape = self.g.shape(out).to_vec();
        let dtype = self.g.dtype(out);
        self.g.output("out", out).unwrap_or_else(|e| self.tensor_err(e));
        let g = std::mem::take(&mut self.g);
        let graph = g.finish().unwrap_or_else(|e| self.tensor_err(e));
        let mut states = std::mem::take(&mut self.states);
        let outs = eval_with_states(&graph, &self.inputs, &self.weights, &mut states).unwrap_or_else(|e| panic!("test bug in case '{}': the reference failed: {e}", self.name));
        let want = outs.get("out").unwrap_or_else(|| panic!("test bug in case '{}': no reference output", self.name)).data.clone();
        Case { name: self.name, seed: self.seed, kernel, inputs: self.ops, out: Layout::contiguous(&shape, dtype), init_out: self.init_out, expect: Expect::Value { want, check } }
    }

    /// Finishes a case that must fail at run time (bad data the contract cannot see).
    pub fn finish_error(self, kernel: Kernel, out: Layout, what: &'static str) -> Case {
        Case { name: self.name, seed: self.seed, kernel, inputs: self.ops, out, init_out: self.init_out, expect: Expect::Error { what } }
    }
}

/// The result of one case on one device.
pub enum Status {
    /// Matched the reference (the text says how closely).
    Ok(String),
    /// Did not (the text says how).
    Fail(String),
    /// The device's `supports` refused the case (the reason).
    Unsupported(String),
}

/// Runs `case` on `dev`: checks the contract, allocates and fills the operands, poisons the
/// output between two guard regions, launches, synchronizes, reads back, checks the guards
/// and the inputs, and compares with the reference.
pub fn run_case(dev: &dyn Device, case: &Case) -> Status {
    let layouts: Vec<Layout> = case.inputs.iter().map(|o| o.layout.clone()).collect();
    if let Err(r) = dev.supports(&case.kernel, &layouts, &case.out) {
        return Status::Unsupported(r);
    }
    match run_checked(dev, case) {
        Ok(s) => Status::Ok(s),
        Err(e) => Status::Fail(e),
    }
}

enum Buf {
    Owned(DeviceBuffer, Vec<u8>),
    Weight(Arc<DeviceBuffer>),
}

fn run_checked(dev: &dyn Device, case: &Case) -> Result<String, String> {
    let store: HashMap<String, Vec<u8>> = case.inputs.iter().filter(|o| o.weight).map(|o| (o.name.clone(), o.bytes.clone())).collect();
    let store: Arc<dyn WeightStore + Send + Sync> = Arc::new(store);
    let mut bufs = Vec::with_capacity(case.inputs.len());
    for o in &case.inputs {
        if o.weight {
            bufs.push(Buf::Weight(dev.bind_weight(&store, &o.name).map_err(|e| format!("bind_weight {}: {e}", o.name))?));
        } else {
            let mut host = vec![POISON; IN_LEAD];
            host.extend_from_slice(&o.bytes);
            host.extend_from_slice(&[POISON; IN_LEAD]);
            let b = dev.alloc(host.len()).map_err(|e| format!("alloc {} bytes for {}: {e}", host.len(), o.name))?;
            dev.write(&b, 0, &host).map_err(|e| format!("write {}: {e}", o.name))?;
            bufs.push(Buf::Owned(b, host));
        }
    }
    let out_bytes = case.out.bytes_needed().ok_or("test bug: output layout has no size")?;
    let total = GUARD + out_bytes + GUARD;
    let ob = dev.alloc(total).map_err(|e| format!("alloc {total} bytes for the output: {e}"))?;
    let guard = [SENTINEL; GUARD];
    dev.write(&ob, 0, &guard).map_err(|e| format!("write the guard: {e}"))?;
    dev.write(&ob, GUARD + out_bytes, &guard).map_err(|e| format!("write the guard: {e}"))?;
    let init = match &case.init_out {
        Some(s) => {
            dev.write(&ob, GUARD, s).map_err(|e| format!("write the initial output: {e}"))?;
            s.clone()
        }
        None => {
            dev.fill(&ob, GUARD, out_bytes, POISON).map_err(|e| format!("poison the output: {e}"))?;
            vec![POISON; out_bytes]
        }
    };
    let args: Vec<Arg> = case
        .inputs
        .iter()
        .zip(&bufs)
        .map(|(o, b)| match b {
            Buf::Owned(buf, _) => Arg { buffer: buf, offset: IN_LEAD, bytes: o.bytes.len(), layout: &o.layout },
            Buf::Weight(buf) => Arg { buffer: buf, offset: 0, bytes: buf.bytes(), layout: &o.layout },
        })
        .collect();
    let out_arg = Arg { buffer: &ob, offset: GUARD, bytes: out_bytes, layout: &case.out };
    let launched = dev.launch(0, &case.kernel, &args, out_arg);
    // Always synchronize: it drains the queue and collects (and clears) run-time errors.
    let synced = dev.synchronize().map_err(|e| e.to_string());
    let mut got = vec![0u8; total];
    dev.read(&ob, 0, &mut got).map_err(|e| format!("read the output back: {e}"))?;
    // Nothing outside the output region written.
    for (what, range) in [("before", 0..GUARD), ("after", GUARD + out_bytes..total)] {
        if let Some(i) = got[range.clone()].iter().position(|&b| b != SENTINEL) {
            return Err(format!("guard bytes {what} the output were written (byte {} of the guard = {:#04x})", i, got[range.start + i]));
        }
    }
    // No input modified.
    for (o, b) in case.inputs.iter().zip(&bufs) {
        if let Buf::Owned(buf, host) = b {
            let mut back = vec![0u8; host.len()];
            dev.read(buf, 0, &mut back).map_err(|e| format!("read {} back: {e}", o.name))?;
            if let Some(i) = back.iter().zip(host).position(|(a, b)| a != b) {
                return Err(format!("input {} was modified (byte {} of its buffer)", o.name, i));
            }
        }
    }
    let region = &got[GUARD..GUARD + out_bytes];
    match &case.expect {
        Expect::Error { what } => {
            let err = match (&launched, &synced) {
                (Err(e), _) => format!("launch: {e}"),
                (Ok(()), Err(e)) => format!("synchronize: {e}"),
                (Ok(()), Ok(())) => return Err(format!("expected an error ({what}), the device reported none")),
            };
            if case.init_out.is_some() && region != &init[..] {
                return Err(format!("the error was reported ({err}) but the output (a state) was modified"));
            }
            Ok(format!("error as expected: {err}"))
        }
        Expect::Value { want, check } => {
            launched.map_err(|e| format!("launch: {e}"))?;
            synced.map_err(|e| format!("synchronize: {e}"))?;
            compare(region, case.out.dtype, want, *check)
        }
    }
}

fn decode(bytes: &[u8], dtype: DType) -> Vec<f64> {
    match dtype {
        DType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
        DType::I32 => bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
        _ => bytes.iter().map(|&b| b as f64).collect(),
    }
}

/// Compares an output region with the reference.
pub fn compare(region: &[u8], dtype: DType, want: &[f64], check: Check) -> Result<String, String> {
    let got = decode(region, dtype);
    if got.len() != want.len() {
        return Err(format!("test bug: {} output elements, {} reference values", got.len(), want.len()));
    }
    match check {
        Check::Exact => {
            let mut bad = Vec::new();
            for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
                let same = match dtype {
                    DType::F32 => {
                        let w32 = w as f32;
                        (g as f32).to_bits() == w32.to_bits() || (g.is_nan() && w32.is_nan())
                    }
                    DType::Bool => g == w && (g == 0.0 || g == 1.0),
                    _ => g == w,
                };
                if !same {
                    bad.push(i);
                }
            }
            if bad.is_empty() {
                return Ok("exact".into());
            }
            let show: Vec<String> = bad.iter().take(4).map(|&i| format!("[{i}] got {} want {}", got[i], want[i])).collect();
            Err(format!("{} of {} elements differ: {}", bad.len(), got.len(), show.join(", ")))
        }
        Check::Nmse(th, why) => {
            let (mut num, mut den, mut worst) = (0f64, 0f64, (0f64, 0usize));
            for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
                if w.is_nan() {
                    if !g.is_nan() {
                        return Err(format!("[{i}] got {g}, the reference is NaN"));
                    }
                    continue;
                }
                if w.is_infinite() || !g.is_finite() {
                    if g == w {
                        continue;
                    }
                    return Err(format!("[{i}] got {g} where the reference has {w} (NaN/inf where the reference has none)"));
                }
                let d = g - w;
                num += d * d;
                den += w * w;
                if d.abs() > worst.0 {
                    worst = (d.abs(), i);
                }
            }
            let nmse = if den > 0.0 {
                num / den
            } else if num == 0.0 {
                0.0
            } else {
                f64::INFINITY
            };
            if nmse <= th {
                Ok(format!("nmse {nmse:.1e}"))
            } else {
                let i = worst.1;
                Err(format!("nmse {nmse:.3e} > {th:.0e} ({why}); worst [{i}] got {} want {}", got[i], want[i]))
            }
        }
    }
}
