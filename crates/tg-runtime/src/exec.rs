mod multi;

use crate::{Arg, Device, DeviceBuffer, Kernel, Layout, Plan, RuntimeError, Step, Storage};
pub use multi::Span;
use multi::{buffer_device, Schedule};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tg_ir::{DType, HostData, HostTensor, WeightStore};

/// A kept state: its buffer and the device that holds it.
struct StateBuf {
    device: Arc<dyn Device>,
    buf: DeviceBuffer,
}

/// Buffers kept between runs ([`tg_ir::Op::State`] values, e.g. a KV cache), by name,
/// shared by the executables of one session (a prompt plan and a one-token plan read and
/// extend the same caches). A buffer is created zeroed on the device of the first plan that
/// uses it, at the size that plan declares, and stays on that device.
#[derive(Default)]
pub struct StateSet {
    bufs: HashMap<String, StateBuf>,
}

impl StateSet {
    /// An empty set.
    pub fn new() -> StateSet {
        StateSet::default()
    }

    /// Total bytes held.
    pub fn bytes(&self) -> usize {
        self.bufs.values().map(|a| a.buf.bytes()).sum()
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
        self.bufs.get(name).map(|a| a.buf.bytes())
    }

    /// The device holding state `name`, if held.
    pub fn device_of(&self, name: &str) -> Option<&str> {
        self.bufs.get(name).map(|a| a.device.name())
    }

    /// The contents of state `name` (read back from its device), if held.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>, RuntimeError> {
        let Some(s) = self.bufs.get(name) else { return Ok(None) };
        let mut v = vec![0u8; s.buf.bytes()];
        s.device.read(&s.buf, 0, &mut v).map_err(|e| RuntimeError::State { name: name.into(), detail: e.to_string() })?;
        Ok(Some(v))
    }

    /// Changes the extent of state `name` along its row axis from `old_rows` to `new_rows`,
    /// keeping every row that fits (the state is `[outer, rows, row_bytes]` in bytes, row
    /// major); new rows are zero. A state not held is left absent. The copy is made on the
    /// state's device.
    pub fn resize_rows(&mut self, name: &str, outer: usize, old_rows: usize, new_rows: usize, row_bytes: usize) -> Result<(), RuntimeError> {
        let Some(old) = self.bufs.get(name) else { return Ok(()) };
        let fail = |detail: String| RuntimeError::State { name: name.into(), detail };
        if outer.checked_mul(old_rows).and_then(|x| x.checked_mul(row_bytes)) != Some(old.buf.bytes()) {
            return Err(fail(format!("holds {} bytes, not {outer} x {old_rows} rows of {row_bytes} bytes", old.buf.bytes())));
        }
        let bytes = outer.checked_mul(new_rows).and_then(|x| x.checked_mul(row_bytes)).ok_or_else(|| fail("size overflows".into()))?;
        let dev = old.device.clone();
        let new = dev.alloc(bytes).map_err(|e| fail(e.to_string()))?;
        dev.fill(&new, 0, bytes, 0).map_err(|e| fail(e.to_string()))?;
        let keep = old_rows.min(new_rows) * row_bytes;
        for o in 0..outer {
            dev.copy(&old.buf, o * old_rows * row_bytes, &new, o * new_rows * row_bytes, keep).map_err(|e| fail(e.to_string()))?;
        }
        dev.synchronize().map_err(|e| fail(e.to_string()))?;
        self.bufs.insert(name.to_string(), StateBuf { device: dev, buf: new });
        Ok(())
    }

    /// The buffer of `name` on `device`, created zeroed with `bytes` if absent; an error if it
    /// exists with another size or on another device.
    fn get(&mut self, name: &str, bytes: usize, device: &Arc<dyn Device>) -> Result<&DeviceBuffer, RuntimeError> {
        let fail = |detail: String| RuntimeError::State { name: name.into(), detail };
        if !self.bufs.contains_key(name) {
            let buf = device.alloc(bytes).map_err(|e| fail(e.to_string()))?;
            device.fill(&buf, 0, bytes, 0).map_err(|e| fail(e.to_string()))?;
            self.bufs.insert(name.to_string(), StateBuf { device: device.clone(), buf });
        }
        let a = self.bufs.get(name).ok_or_else(|| fail("missing".into()))?;
        if a.device.name() != device.name() {
            return Err(fail(format!("is held on {}, the plan runs it on {}", a.device.name(), device.name())));
        }
        if a.buf.bytes() != bytes {
            return Err(fail(format!("holds {} bytes, the plan wants {bytes} (resize the set first)", a.buf.bytes())));
        }
        Ok(&a.buf)
    }
}

/// A plan bound to devices and weights, with its arenas allocated on their devices and its
/// weights bound (uploaded once where the device copies them): call [`Executable::run`] as
/// often as you like.
///
/// A plan whose steps run on one device runs on the calling thread. A plan whose steps use
/// several devices runs each device's steps on its own host thread, concurrently; a
/// [`Kernel::Transfer`] runs on the thread of its non-CPU side, and a step waits only for
/// the steps of other threads whose results it reads (or whose operands it overwrites).
/// See `docs/architecture.md`, *Plans across devices*.
pub struct Executable {
    plan: Plan,
    devices: Vec<Arc<dyn Device>>,
    /// One buffer per arena of the plan, on its device.
    arenas: Vec<DeviceBuffer>,
    /// The bound weights, by buffer index (each keeps its storage alive: the CPU's holds the
    /// store it reads in place).
    weight_bufs: HashMap<usize, Arc<DeviceBuffer>>,
    /// Which thread runs each step and which steps of other threads it waits for.
    schedule: Schedule,
    /// Per step time (ns) of the last profiled run, when profiling is on.
    profile: Option<Vec<u64>>,
    /// Every step's span of the last profiled run, when profiling is on.
    timeline: Option<Vec<Span>>,
    /// Fill arenas with NaN bytes before every run (tests: unwritten elements show up).
    poison: bool,
    /// States of runs through [`Executable::run`] (not [`Executable::run_with_states`]).
    states: StateSet,
}

impl Executable {
    /// Binds `plan` to `devices` (by name, in the plan's order) and `weights`, checks that
    /// every weight exists with the right size, binds each weight on its device, and
    /// allocates the arenas.
    pub fn new(plan: Plan, devices: Vec<Arc<dyn Device>>, weights: Arc<dyn WeightStore + Send + Sync>) -> Result<Executable, RuntimeError> {
        if devices.len() != plan.devices.len() || devices.iter().zip(&plan.devices).any(|(d, n)| d.name() != n) {
            return Err(RuntimeError::Plan(format!("plan wants devices {:?}, got {:?}", plan.devices, devices.iter().map(|d| d.name().to_string()).collect::<Vec<_>>())));
        }
        let device = |i: usize| devices.get(i).ok_or_else(|| RuntimeError::Plan(format!("device {i} missing")));
        let mut weight_bufs = HashMap::new();
        for (bi, b) in plan.buffers.iter().enumerate() {
            match &b.storage {
                Storage::Weight { name, device: d } => {
                    let bytes = weights.bytes(name).ok_or_else(|| RuntimeError::Weight { name: name.clone(), detail: "not in the weight store".into() })?;
                    if bytes.len() != b.bytes {
                        return Err(RuntimeError::Weight { name: name.clone(), detail: format!("store has {} bytes, plan expects {}", bytes.len(), b.bytes) });
                    }
                    let buf = device(*d)?.bind_weight(&weights, name).map_err(|e| RuntimeError::Weight { name: name.clone(), detail: e.to_string() })?;
                    weight_bufs.insert(bi, buf);
                }
                Storage::Arena { arena, offset } => {
                    let a = plan.arenas.get(*arena).ok_or_else(|| RuntimeError::Plan(format!("buffer in missing arena {arena}")))?;
                    if offset.checked_add(b.bytes).is_none_or(|e| e > a.bytes) {
                        return Err(RuntimeError::Plan(format!("buffer [{offset}, {}) past arena {arena} of {} bytes", offset.saturating_add(b.bytes), a.bytes)));
                    }
                }
                Storage::State { device: d, .. } => {
                    device(*d)?;
                }
            }
        }
        let schedule = Schedule::new(&plan, &devices)?;
        let mut arenas = Vec::new();
        for (i, a) in plan.arenas.iter().enumerate() {
            let dev = device(a.device)?;
            arenas.push(dev.alloc(a.bytes).map_err(|e| RuntimeError::Alloc { arena: i, device: dev.name().to_string(), bytes: a.bytes, detail: e.to_string() })?);
        }
        Ok(Executable { plan, devices, arenas, weight_bufs, schedule, profile: None, timeline: None, poison: false, states: StateSet::new() })
    }

    /// The plan being executed.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The devices, in the plan's order.
    pub fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
    }

    /// Turns per-step timing on or off (see [`Executable::step_times`] and
    /// [`Executable::timeline`]). A profiled run waits for each step to finish on its device
    /// before timing the next step of that device (the threads of other devices still run
    /// concurrently).
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = on.then(|| vec![0; self.plan.steps.len()]);
        self.timeline = on.then(Vec::new);
    }

    /// Fills every arena with NaN bytes (0xFF) before each run, so a kernel that leaves
    /// part of its output unwritten produces NaNs instead of stale values. For tests.
    pub fn set_poison(&mut self, on: bool) {
        self.poison = on;
    }

    /// Nanoseconds each step took in the last run, if profiling is on (each step's
    /// `end_ns - start_ns` in [`Executable::timeline`]).
    pub fn step_times(&self) -> Option<&[u64]> {
        self.profile.as_deref()
    }

    /// Every step of the last profiled run on the host's clock, in step order: its device
    /// (for a transfer, both), the thread that ran it, its start and end in ns since the
    /// run's first step could start. Spans of different threads overlap where their devices
    /// worked at the same time. `None` unless profiling is on; empty before the first run,
    /// and after a failed run empty (several threads) or up to the failed step (one thread).
    pub fn timeline(&self) -> Option<&[Span]> {
        self.timeline.as_deref()
    }

    /// How many host threads a run uses: one per device that runs a step (1 for a plan on
    /// one device, which runs on the calling thread).
    pub fn threads(&self) -> usize {
        self.schedule.threads.len().max(1)
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
                Storage::State { name, .. } => Some((name.clone(), b.bytes)),
                _ => None,
            })
            .collect()
    }

    /// Runs the plan with its states in `states` (created zeroed on first use), updating
    /// them in place. The only writes to a state are its `StoreRows` steps, which write the
    /// rows of this run (at the run-time offset) and nothing else: if the run fails, the
    /// rows before that offset are as they were.
    pub fn run_with_states(&mut self, inputs: &HashMap<String, HostTensor>, states: &mut StateSet) -> Result<HashMap<String, HostTensor>, RuntimeError> {
        // Check the inputs before touching any device memory.
        for (name, tref) in &self.plan.inputs {
            let t = inputs.get(name).ok_or_else(|| RuntimeError::Input { name: name.clone(), detail: "not supplied".into() })?;
            if t.shape != tref.layout.shape || t.dtype() != tref.layout.dtype {
                return Err(RuntimeError::Input {
                    name: name.clone(),
                    detail: format!("got {:?} {}, plan expects {:?} {}", t.shape, t.dtype(), tref.layout.shape, tref.layout.dtype),
                });
            }
        }
        let state_bufs: Vec<(usize, usize, String)> = self
            .plan
            .buffers
            .iter()
            .enumerate()
            .filter_map(|(i, b)| match &b.storage {
                Storage::State { name, device } => Some((i, *device, name.clone())),
                _ => None,
            })
            .collect();
        for (i, d, name) in &state_bufs {
            states.get(name, self.plan.buffers[*i].bytes, &self.devices[*d])?;
        }
        let mut state_refs: HashMap<usize, &DeviceBuffer> = HashMap::new();
        for (i, _, name) in &state_bufs {
            let b = states.bufs.get(name).map(|s| &s.buf).ok_or_else(|| RuntimeError::State { name: name.clone(), detail: "missing".into() })?;
            state_refs.insert(*i, b);
        }
        let dev_err = |device: &str, e: crate::DeviceError| RuntimeError::Device { device: device.to_string(), detail: e.to_string() };
        if self.poison {
            for (a, desc) in self.arenas.iter().zip(&self.plan.arenas) {
                let d = &self.devices[desc.device];
                d.fill(a, 0, a.bytes(), 0xFF).map_err(|e| dev_err(d.name(), e))?;
            }
        }
        let mut times = self.profile.take();
        let ctx = RunCtx { plan: &self.plan, devices: &self.devices, arenas: &self.arenas, weights: &self.weight_bufs, states: &state_refs };
        let mut spans = self.timeline.take().map(|mut v| {
            v.clear();
            v
        });
        let result = ctx.run(inputs, &self.schedule, &mut times, &mut spans);
        self.profile = times;
        self.timeline = spans;
        result
    }

    /// Total bytes of all arenas.
    pub fn arena_bytes(&self) -> usize {
        self.arenas.iter().map(|a| a.bytes()).sum()
    }
}

struct RunCtx<'a> {
    plan: &'a Plan,
    devices: &'a [Arc<dyn Device>],
    arenas: &'a [DeviceBuffer],
    weights: &'a HashMap<usize, Arc<DeviceBuffer>>,
    states: &'a HashMap<usize, &'a DeviceBuffer>,
}

impl RunCtx<'_> {
    /// The device buffer holding plan buffer `buf`, the byte offset of its storage in it, and
    /// whether steps may write it.
    fn locate(&self, buf: usize) -> Result<(&DeviceBuffer, usize, bool), RuntimeError> {
        let b = self.plan.buffers.get(buf).ok_or_else(|| RuntimeError::Plan(format!("buffer {buf} missing")))?;
        match &b.storage {
            Storage::Arena { arena, offset } => Ok((self.arenas.get(*arena).ok_or_else(|| RuntimeError::Plan(format!("arena {arena} missing")))?, *offset, true)),
            Storage::Weight { name, .. } => Ok((&**self.weights.get(&buf).ok_or_else(|| RuntimeError::Weight { name: name.clone(), detail: "not bound".into() })?, 0, false)),
            Storage::State { name, .. } => Ok((*self.states.get(&buf).ok_or_else(|| RuntimeError::State { name: name.clone(), detail: "not bound".into() })?, 0, true)),
        }
    }

    /// Copies inputs in, runs every step (on the calling thread in the first device's scope,
    /// or concurrently on one thread per device), reads outputs. With profiling, fills `times`
    /// and `spans`.
    fn run(
        &self,
        inputs: &HashMap<String, HostTensor>,
        sched: &Schedule,
        times: &mut Option<Vec<u64>>,
        spans: &mut Option<Vec<Span>>,
    ) -> Result<HashMap<String, HostTensor>, RuntimeError> {
        for (name, tref) in &self.plan.inputs {
            let t = inputs.get(name).ok_or_else(|| RuntimeError::Input { name: name.clone(), detail: "not supplied".into() })?;
            // SAFETY: plain-old-data element vectors viewed as bytes.
            let src: &[u8] = match &t.data {
                HostData::F32(v) => unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 4) },
                HostData::I32(v) => unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 4) },
                HostData::Bool(v) => v,
            };
            let (buf, base, writable) = self.locate(tref.buffer)?;
            let at = tref.layout.offset * tref.layout.elem_bytes();
            if !writable || at + src.len() > self.plan.buffers[tref.buffer].bytes {
                return Err(RuntimeError::Plan(format!("input '{name}' buffer cannot hold it")));
            }
            let dev = self.device_of_buffer(tref.buffer)?;
            dev.write(buf, base + at, src).map_err(|e| RuntimeError::Device { device: dev.name().into(), detail: e.to_string() })?;
        }
        let failure = if sched.concurrent() {
            match self.run_concurrent(sched, times.as_deref_mut()) {
                Ok(s) => {
                    if let (Some(out), Some(s)) = (spans.as_mut(), s) {
                        *out = s;
                    }
                    None
                }
                Err(e) => Some(e),
            }
        } else {
            let mut failure = None;
            let mut body = || {
                if let Err(e) = self.run_steps(sched, times.as_deref_mut(), spans.as_mut()) {
                    failure = Some(e);
                }
            };
            match self.devices.first() {
                Some(d) => d.scope(&mut body),
                None => body(),
            }
            failure
        };
        if let Some(e) = failure {
            // Let queued work drain before the caller reuses the buffers.
            for d in self.devices {
                let _ = d.synchronize();
            }
            return Err(e);
        }
        for d in self.devices {
            d.synchronize().map_err(|e| RuntimeError::Device { device: d.name().into(), detail: e.to_string() })?;
        }
        let mut outs = HashMap::new();
        for (name, tref) in &self.plan.outputs {
            let (buf, base, _) = self.locate(tref.buffer)?;
            let len = self.plan.buffers[tref.buffer].bytes;
            let mut bytes = vec![0u8; len];
            let dev = self.device_of_buffer(tref.buffer)?;
            dev.read(buf, base, &mut bytes).map_err(|e| RuntimeError::Device { device: dev.name().into(), detail: e.to_string() })?;
            outs.insert(name.clone(), read_tensor(&bytes, &tref.layout).map_err(RuntimeError::Plan)?);
        }
        Ok(outs)
    }

    /// The device whose memory holds plan buffer `buf`.
    fn device_of_buffer(&self, buf: usize) -> Result<&Arc<dyn Device>, RuntimeError> {
        let d = buffer_device(self.plan, buf)?;
        self.devices.get(d).ok_or_else(|| RuntimeError::Plan(format!("device {d} missing")))
    }

    /// Every step on the calling thread, in plan order (a plan on one device).
    fn run_steps(&self, sched: &Schedule, mut times: Option<&mut [u64]>, mut spans: Option<&mut Vec<Span>>) -> Result<(), RuntimeError> {
        let mut staging = Vec::new();
        let start = times.as_ref().map(|_| Instant::now());
        for (si, step) in self.plan.steps.iter().enumerate() {
            let t0 = start.map(|_| Instant::now());
            self.exec_step(si, &mut staging)?;
            if let (Some(t), Some(t0), Some(start)) = (times.as_deref_mut(), t0, start) {
                let dev = &self.devices[step.device];
                dev.synchronize().map_err(|e| RuntimeError::Kernel { step: si, kernel: step.kernel.name(), device: dev.name().to_string(), detail: e.to_string() })?;
                let end = Instant::now();
                t[si] = end.duration_since(t0).as_nanos() as u64;
                if let Some(v) = spans.as_deref_mut() {
                    let from = match step.kernel {
                        Kernel::Transfer { from } => Some(from),
                        _ => None,
                    };
                    let ns = |t: Instant| t.duration_since(start).as_nanos() as u64;
                    v.push(Span { step: si, device: step.device, from, thread: sched.runner[si], start_ns: ns(t0), end_ns: ns(end) });
                }
            }
        }
        Ok(())
    }

    /// Runs step `si`: launches its kernel on its device (queued, in the device's order), or
    /// runs its transfer (done when this returns). `staging` is the host buffer transfers
    /// reuse.
    fn exec_step(&self, si: usize, staging: &mut Vec<u8>) -> Result<(), RuntimeError> {
        let step = &self.plan.steps[si];
        let dev = self.devices.get(step.device).ok_or_else(|| RuntimeError::Plan(format!("step {si}: device {} missing", step.device)))?;
        if let Kernel::Transfer { from } = step.kernel {
            return self.transfer(si, step, from, staging);
        }
        let fail = |detail: String| RuntimeError::Kernel { step: si, kernel: step.kernel.name(), device: dev.name().to_string(), detail };
        let mut ins: Vec<Arg> = Vec::with_capacity(step.inputs.len());
        for tr in &step.inputs {
            let (buffer, offset, _) = self.locate(tr.buffer)?;
            ins.push(Arg { buffer, offset, bytes: self.plan.buffers[tr.buffer].bytes, layout: &tr.layout });
        }
        let (buffer, offset, writable) = self.locate(step.output.buffer)?;
        if !writable {
            return Err(RuntimeError::Plan(format!("step {si} writes a weight")));
        }
        let out = Arg { buffer, offset, bytes: self.plan.buffers[step.output.buffer].bytes, layout: &step.output.layout };
        dev.launch(0, &step.kernel, &ins, out).map_err(fail)
    }

    /// A [`Kernel::Transfer`]: the whole source buffer read from device `from` into
    /// `staging` (a blocking read, after everything queued before it there), then written to
    /// the output's buffer on the step's device (a blocking write). Both are done when this
    /// returns, so the step may be signalled complete to other threads at once.
    fn transfer(&self, si: usize, step: &Step, from: usize, staging: &mut Vec<u8>) -> Result<(), RuntimeError> {
        let (src_dev, dst_dev) = (&self.devices[from], &self.devices[step.device]);
        let fail = |detail: String| RuntimeError::Kernel { step: si, kernel: step.kernel.name(), device: format!("{} -> {}", src_dev.name(), dst_dev.name()), detail };
        let src = step.inputs.first().ok_or_else(|| fail("no source operand".into()))?;
        let (sbuf, soff, _) = self.locate(src.buffer)?;
        let (dbuf, doff, writable) = self.locate(step.output.buffer)?;
        let n = self.plan.buffers[src.buffer].bytes;
        if !writable || self.plan.buffers[step.output.buffer].bytes != n {
            return Err(fail(format!("the destination cannot take the source's {n} bytes")));
        }
        if from == step.device {
            return src_dev.copy(sbuf, soff, dbuf, doff, n).map_err(|e| fail(format!("copy {n} bytes on {}: {e}", src_dev.name())));
        }
        staging.resize(n, 0);
        src_dev.read(sbuf, soff, &mut staging[..n]).map_err(|e| fail(format!("read {n} bytes on {}: {e}", src_dev.name())))?;
        dst_dev.write(dbuf, doff, &staging[..n]).map_err(|e| fail(format!("write {n} bytes on {}: {e}", dst_dev.name())))
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
