use crate::{Device, Layout, Plan, RuntimeError, Storage};
use std::collections::HashMap;
use std::sync::Arc;
use tg_ir::{DType, HostData, HostTensor, WeightStore};

/// 64-byte aligned storage for an arena.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

struct Arena {
    lines: Vec<Line>,
    bytes: usize,
}

impl Arena {
    fn new(bytes: usize) -> Option<Arena> {
        let n = bytes.div_ceil(64);
        let mut lines = Vec::new();
        lines.try_reserve_exact(n).ok()?;
        lines.resize(n, Line([0; 64]));
        Some(Arena { lines, bytes })
    }

    fn ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr() as *mut u8
    }
}

/// Buffers kept between runs ([`tg_ir::Op::State`] values, e.g. a KV cache), by name,
/// shared by the executables of one session (a prompt plan and a one-token plan read and
/// extend the same caches). A buffer is created zeroed, at the size the first plan that
/// uses it declares.
#[derive(Default)]
pub struct StateSet {
    bufs: HashMap<String, Arena>,
}

impl StateSet {
    /// An empty set.
    pub fn new() -> StateSet {
        StateSet::default()
    }

    /// Total bytes held.
    pub fn bytes(&self) -> usize {
        self.bufs.values().map(|a| a.bytes).sum()
    }

    /// Names of the states held, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.bufs.keys().cloned().collect();
        v.sort();
        v
    }

    /// Drops every state (the next run starts from zeros).
    pub fn clear(&mut self) {
        self.bufs.clear();
    }

    /// Bytes of one state, if held.
    pub fn state_bytes(&self, name: &str) -> Option<usize> {
        self.bufs.get(name).map(|a| a.bytes)
    }

    /// Changes the extent of state `name` along its row axis from `old_rows` to `new_rows`,
    /// keeping every row that fits (the state is `[outer, rows, row_bytes]` in bytes, row
    /// major); new rows are zero. A state not held is left absent.
    pub fn resize_rows(&mut self, name: &str, outer: usize, old_rows: usize, new_rows: usize, row_bytes: usize) -> Result<(), RuntimeError> {
        let Some(old) = self.bufs.get(name) else { return Ok(()) };
        let fail = |detail: String| RuntimeError::State { name: name.into(), detail };
        if outer * old_rows * row_bytes != old.bytes {
            return Err(fail(format!("holds {} bytes, not {outer} x {old_rows} rows of {row_bytes} bytes", old.bytes)));
        }
        let bytes = outer.checked_mul(new_rows).and_then(|x| x.checked_mul(row_bytes)).ok_or_else(|| fail("size overflows".into()))?;
        let mut a = Arena::new(bytes).ok_or_else(|| fail(format!("cannot allocate {bytes} bytes")))?;
        let keep = old_rows.min(new_rows) * row_bytes;
        let src = old.lines.as_ptr() as *const u8;
        let dst = a.ptr();
        for o in 0..outer {
            // SAFETY: block `o` of `keep` bytes lies inside both buffers (sizes checked above),
            // and the two allocations are distinct.
            unsafe { std::ptr::copy_nonoverlapping(src.add(o * old_rows * row_bytes), dst.add(o * new_rows * row_bytes), keep) };
        }
        self.bufs.insert(name.to_string(), a);
        Ok(())
    }

    /// The buffer of `name`, created zeroed with `bytes` if absent; an error if it exists
    /// with another size.
    fn get(&mut self, name: &str, bytes: usize) -> Result<(SendPtr, usize), RuntimeError> {
        if !self.bufs.contains_key(name) {
            let a = Arena::new(bytes).ok_or_else(|| RuntimeError::State { name: name.into(), detail: format!("cannot allocate {bytes} bytes") })?;
            self.bufs.insert(name.to_string(), a);
        }
        let a = self.bufs.get_mut(name).ok_or_else(|| RuntimeError::State { name: name.into(), detail: "missing".into() })?;
        if a.bytes != bytes {
            return Err(RuntimeError::State { name: name.into(), detail: format!("holds {} bytes, the plan wants {bytes} (resize the set first)", a.bytes) });
        }
        Ok((SendPtr(a.ptr()), a.bytes))
    }
}

/// A plan bound to devices and weights, with its arenas allocated: call [`Executable::run`]
/// as often as you like.
pub struct Executable {
    plan: Plan,
    devices: Vec<Arc<dyn Device>>,
    weights: Arc<dyn WeightStore + Send>,
    arenas: Vec<Arena>,
    /// Per step time (ns) of the last profiled run, when profiling is on.
    profile: Option<Vec<u64>>,
    /// Fill arenas with NaN bytes before every run (tests: unwritten elements show up).
    poison: bool,
    /// States of runs through [`Executable::run`] (not [`Executable::run_with_states`]).
    states: StateSet,
}

impl Executable {
    /// Binds `plan` to `devices` (by name, in the plan's order) and `weights`, checks that
    /// every weight exists with the right size, and allocates the arenas.
    pub fn new(plan: Plan, devices: Vec<Arc<dyn Device>>, weights: Arc<dyn WeightStore + Send>) -> Result<Executable, RuntimeError> {
        if devices.len() != plan.devices.len() || devices.iter().zip(&plan.devices).any(|(d, n)| d.name() != n) {
            return Err(RuntimeError::Plan(format!("plan wants devices {:?}, got {:?}", plan.devices, devices.iter().map(|d| d.name().to_string()).collect::<Vec<_>>())));
        }
        for b in &plan.buffers {
            match &b.storage {
                Storage::Weight { name } => {
                    let bytes = weights.bytes(name).ok_or_else(|| RuntimeError::Weight { name: name.clone(), detail: "not in the weight store".into() })?;
                    if bytes.len() != b.bytes {
                        return Err(RuntimeError::Weight { name: name.clone(), detail: format!("store has {} bytes, plan expects {}", bytes.len(), b.bytes) });
                    }
                }
                Storage::Arena { arena, offset } => {
                    let a = plan.arenas.get(*arena).ok_or_else(|| RuntimeError::Plan(format!("buffer in missing arena {arena}")))?;
                    if offset + b.bytes > a.bytes {
                        return Err(RuntimeError::Plan(format!("buffer [{offset}, {}) past arena {arena} of {} bytes", offset + b.bytes, a.bytes)));
                    }
                }
                Storage::State { .. } => {}
            }
        }
        let mut arenas = Vec::new();
        for (i, a) in plan.arenas.iter().enumerate() {
            arenas.push(Arena::new(a.bytes).ok_or_else(|| RuntimeError::Alloc { arena: i, device: plan.devices[a.device].clone(), bytes: a.bytes })?);
        }
        Ok(Executable { plan, devices, weights, arenas, profile: None, poison: false, states: StateSet::new() })
    }

    /// The plan being executed.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Turns per-step timing on or off (see [`Executable::step_times`]).
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = on.then(|| vec![0; self.plan.steps.len()]);
    }

    /// Fills every arena with NaN bytes (0xFF) before each run, so a kernel that leaves
    /// part of its output unwritten produces NaNs instead of stale values. For tests.
    pub fn set_poison(&mut self, on: bool) {
        self.poison = on;
    }

    /// Nanoseconds each step took in the last run, if profiling is on.
    pub fn step_times(&self) -> Option<&[u64]> {
        self.profile.as_deref()
    }

    /// Runs the plan on `inputs` (by name) and returns the outputs (by name). States, if the
    /// plan has any, are this executable's own (see [`Executable::run_with_states`]).
    pub fn run(&mut self, inputs: &HashMap<String, HostTensor>) -> Result<HashMap<String, HostTensor>, RuntimeError> {
        let mut states = std::mem::take(&mut self.states);
        let r = self.run_with_states(inputs, &mut states);
        self.states = states;
        r
    }

    /// The states this plan keeps between runs: (name, bytes).
    pub fn state_sizes(&self) -> Vec<(String, usize)> {
        self.plan
            .buffers
            .iter()
            .filter_map(|b| match &b.storage {
                Storage::State { name } => Some((name.clone(), b.bytes)),
                _ => None,
            })
            .collect()
    }

    /// Runs the plan with its states in `states` (created zeroed on first use), updating
    /// them in place.
    pub fn run_with_states(&mut self, inputs: &HashMap<String, HostTensor>, states: &mut StateSet) -> Result<HashMap<String, HostTensor>, RuntimeError> {
        let mut state_ptrs = HashMap::new();
        for (name, bytes) in self.state_sizes() {
            let p = states.get(&name, bytes)?;
            state_ptrs.insert(name, p);
        }
        if self.poison {
            for a in &mut self.arenas {
                a.lines.iter_mut().for_each(|l| l.0 = [0xFF; 64]);
            }
        }
        let mut times = self.profile.take();
        let bases: Vec<SendPtr> = self.arenas.iter_mut().map(|a| SendPtr(a.ptr())).collect();
        let ctx = RunCtx { plan: &self.plan, devices: &self.devices, weights: &*self.weights, bases: &bases, states: &state_ptrs };
        let result = ctx.run(inputs, &mut times);
        self.profile = times;
        result
    }

    /// Total bytes of all arenas.
    pub fn arena_bytes(&self) -> usize {
        self.arenas.iter().map(|a| a.bytes).sum()
    }
}

#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: arena base pointers are only dereferenced inside `RunCtx::run_steps`, which runs
// while `Executable::run` holds `&mut self`; steps touch disjoint byte ranges as the
// validated plan guarantees.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

struct RunCtx<'a> {
    plan: &'a Plan,
    devices: &'a [Arc<dyn Device>],
    weights: &'a (dyn WeightStore + Send),
    bases: &'a [SendPtr],
    states: &'a HashMap<String, (SendPtr, usize)>,
}

impl RunCtx<'_> {
    /// Copies inputs in, runs every step in the first device's scope, reads outputs.
    fn run(&self, inputs: &HashMap<String, HostTensor>, times: &mut Option<Vec<u64>>) -> Result<HashMap<String, HostTensor>, RuntimeError> {
        for (name, tref) in &self.plan.inputs {
            let t = inputs.get(name).ok_or_else(|| RuntimeError::Input { name: name.clone(), detail: "not supplied".into() })?;
            if t.shape != tref.layout.shape || t.dtype() != tref.layout.dtype {
                return Err(RuntimeError::Input {
                    name: name.clone(),
                    detail: format!("got {:?} {}, plan expects {:?} {}", t.shape, t.dtype(), tref.layout.shape, tref.layout.dtype),
                });
            }
            let (p, len, writable) = self.ptr(tref.buffer);
            // SAFETY: plain-old-data element vectors viewed as bytes.
            let src: &[u8] = match &t.data {
                HostData::F32(v) => unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 4) },
                HostData::I32(v) => unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 4) },
                HostData::Bool(v) => v,
            };
            let at = tref.layout.offset * tref.layout.elem_bytes();
            if !writable || at + src.len() > len {
                return Err(RuntimeError::Plan(format!("input '{name}' buffer cannot hold it")));
            }
            // SAFETY: range checked above; the arenas are exclusively ours during `run`.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p.add(at), src.len()) };
        }
        let mut failure: Option<RuntimeError> = None;
        let mut body = || {
            if let Err(e) = self.run_steps(times.as_deref_mut()) {
                failure = Some(e);
            }
        };
        match self.devices.first() {
            Some(d) => d.scope(&mut body),
            None => body(),
        }
        if let Some(e) = failure {
            return Err(e);
        }
        let mut outs = HashMap::new();
        for (name, tref) in &self.plan.outputs {
            let (p, len, _) = self.ptr(tref.buffer);
            // SAFETY: `len` valid bytes of a buffer no step is writing any more.
            let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
            outs.insert(name.clone(), read_tensor(bytes, &tref.layout).map_err(RuntimeError::Plan)?);
        }
        Ok(outs)
    }

    fn ptr(&self, buf: usize) -> (*mut u8, usize, bool) {
        let b = &self.plan.buffers[buf];
        match &b.storage {
            // SAFETY: offset + bytes <= arena size was checked in `Executable::new`.
            Storage::Arena { arena, offset } => (unsafe { self.bases[*arena].0.add(*offset) }, b.bytes, true),
            Storage::Weight { name } => {
                let s = self.weights.bytes(name).unwrap_or(&[]);
                (s.as_ptr() as *mut u8, s.len(), false)
            }
            Storage::State { name } => match self.states.get(name) {
                Some((p, len)) => (p.0, *len, true),
                None => (std::ptr::null_mut(), 0, false),
            },
        }
    }

    fn run_steps(&self, mut times: Option<&mut [u64]>) -> Result<(), RuntimeError> {
        for (si, step) in self.plan.steps.iter().enumerate() {
            let t0 = times.as_ref().map(|_| std::time::Instant::now());
            let mut ins: Vec<(&[u8], &Layout)> = Vec::with_capacity(step.inputs.len());
            for tr in &step.inputs {
                let (p, len, _) = self.ptr(tr.buffer);
                // SAFETY: the buffer is `len` valid bytes; no step writes it while it is read.
                ins.push((unsafe { std::slice::from_raw_parts(p as *const u8, len) }, &tr.layout));
            }
            let (p, len, writable) = self.ptr(step.output.buffer);
            if !writable {
                return Err(RuntimeError::Plan(format!("step {si} writes a weight")));
            }
            // SAFETY: the validated plan never lets a live input overlap the output buffer.
            let out = unsafe { std::slice::from_raw_parts_mut(p, len) };
            let dev = &self.devices[step.device];
            dev.launch(&step.kernel, &ins, (out, &step.output.layout)).map_err(|detail| RuntimeError::Kernel {
                step: si,
                kernel: step.kernel.name(),
                device: dev.name().to_string(),
                detail,
            })?;
            if let (Some(t), Some(t0)) = (times.as_deref_mut(), t0) {
                t[si] = t0.elapsed().as_nanos() as u64;
            }
        }
        Ok(())
    }
}

/// Reads a (possibly strided) tensor out of a buffer into a contiguous host tensor.
fn read_tensor(bytes: &[u8], l: &Layout) -> Result<HostTensor, String> {
    let eb = l.elem_bytes();
    if let DType::Quant(t) = l.dtype {
        return Err(format!("cannot return {t} storage as an output"));
    }
    // Contiguous outputs (the usual case, e.g. logits) are one slice; strided views are
    // gathered element by element.
    let n = l.numel();
    let raw: Vec<u8> = if l.is_contiguous() {
        bytes.get(l.offset * eb..(l.offset + n) * eb).ok_or("output outside its buffer")?.to_vec()
    } else {
        let mut v = Vec::with_capacity(n * eb);
        for i in tg_ir::shape::strided_offsets(&l.shape, &l.strides, l.offset) {
            v.extend_from_slice(bytes.get(i * eb..(i + 1) * eb).ok_or("output outside its buffer")?);
        }
        v
    };
    let word = |c: &[u8]| [c[0], c[1], c[2], c[3]];
    let data = match l.dtype {
        DType::F32 => HostData::F32(raw.chunks_exact(4).map(|c| f32::from_le_bytes(word(c))).collect()),
        DType::I32 => HostData::I32(raw.chunks_exact(4).map(|c| i32::from_le_bytes(word(c))).collect()),
        _ => HostData::Bool(raw),
    };
    Ok(HostTensor { shape: l.shape.clone(), data })
}
