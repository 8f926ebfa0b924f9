//! Plans across devices: which host thread runs each step, which steps of other threads it
//! waits for, and the concurrent run itself (`docs/architecture.md`, *Plans across devices*).
//!
//! Every device that runs a step gets one host thread, which walks that device's steps in
//! plan order. A [`Kernel::Transfer`] runs on the thread of its non-CPU side (the source's if
//! neither side is a CPU). A step waits, on the host, only for the steps of *other* threads
//! it depends on (the last writer of each buffer it reads; the last writer and the readers
//! since of the buffer it writes); the steps of its own thread are ordered by the thread
//! itself and by its device's in-order queue. A step is signalled complete only once it is
//! complete on its device: a CPU kernel has returned, a blocking transfer has returned, and
//! any other launch that another thread waits for is followed by `synchronize` first.

use super::RunCtx;
use crate::{Device, DeviceKind, Kernel, Plan, RuntimeError, Storage};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// One step on the host timeline of a profiled run ([`crate::Executable::timeline`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Index of the step in [`Plan::steps`].
    pub step: usize,
    /// The step's device (index in [`Plan::devices`]); for a transfer, the destination.
    pub device: usize,
    /// For a transfer, the source device; `None` for kernels.
    pub from: Option<usize>,
    /// The device whose host thread ran the step (for a transfer, its non-CPU side).
    pub thread: usize,
    /// Start, in ns since the run's first step could start (inputs written), taken on the
    /// host after the step's waits for other threads were over.
    pub start_ns: u64,
    /// End, in ns on the same clock, taken after the step finished on its device (a
    /// profiled launch is synchronised before its end is read).
    pub end_ns: u64,
}

/// How a plan's steps are spread over host threads; computed once per executable.
pub(crate) struct Schedule {
    /// The device whose thread runs each step.
    pub runner: Vec<usize>,
    /// Devices that run at least one step, ascending; more than one selects the concurrent
    /// path.
    pub threads: Vec<usize>,
    /// Per step: the steps of other threads it must wait for, ascending.
    pub waits: Vec<Vec<usize>>,
    /// Per step: another thread waits for it, so its thread signals its completion.
    pub signals: Vec<bool>,
    /// Per step: its launch returns before the work is done (a non-CPU kernel), so the
    /// thread synchronises its device before signalling it.
    pub sync_before_signal: Vec<bool>,
}

/// The device index whose memory holds plan buffer `buf`.
pub(crate) fn buffer_device(plan: &Plan, buf: usize) -> Result<usize, RuntimeError> {
    let b = plan.buffers.get(buf).ok_or_else(|| RuntimeError::Plan(format!("buffer {buf} missing")))?;
    match &b.storage {
        Storage::Arena { arena, .. } => plan.arenas.get(*arena).map(|a| a.device).ok_or_else(|| RuntimeError::Plan(format!("buffer {buf} in missing arena {arena}"))),
        Storage::Weight { device, .. } | Storage::State { device, .. } => Ok(*device),
    }
}

/// The thread that runs a transfer from `from` to `to`: the non-CPU side (its in-order
/// queue orders the copy after its own producer and before its own consumers), the source
/// if neither side is a CPU.
fn transfer_runner(devices: &[Arc<dyn Device>], from: usize, to: usize) -> usize {
    if devices[from].kind() != DeviceKind::Cpu || devices[to].kind() == DeviceKind::Cpu {
        from
    } else {
        to
    }
}

impl Schedule {
    /// Places every step on a thread and finds the cross-thread waits. Checks what the
    /// concurrency relies on: every operand of a step is on the step's device except a
    /// transfer's source (on `from`, of the destination's size), and the buffers of a
    /// transfer own their arena bytes (no other buffer of the plan overlaps them).
    pub fn new(plan: &Plan, devices: &[Arc<dyn Device>]) -> Result<Schedule, RuntimeError> {
        let n = plan.steps.len();
        let mut runner = Vec::with_capacity(n);
        for (si, step) in plan.steps.iter().enumerate() {
            let bad = |what: String| RuntimeError::Plan(format!("step {si} ({}): {what}", step.kernel.name()));
            if step.device >= devices.len() {
                return Err(bad(format!("device {} missing", step.device)));
            }
            let on = |buf: usize, want: usize, role: &str| -> Result<(), RuntimeError> {
                let d = buffer_device(plan, buf)?;
                if d != want {
                    let name = |i: usize| plan.devices.get(i).cloned().unwrap_or_else(|| format!("missing device {i}"));
                    return Err(bad(format!("{role} (buffer {buf}) is on {}, not {}", name(d), name(want))));
                }
                Ok(())
            };
            on(step.output.buffer, step.device, "the output")?;
            match step.kernel {
                Kernel::Transfer { from } => {
                    if from >= devices.len() {
                        return Err(bad(format!("source device {from} missing")));
                    }
                    let [src] = step.inputs.as_slice() else { return Err(bad(format!("a transfer has one operand, not {}", step.inputs.len()))) };
                    on(src.buffer, from, "the source")?;
                    let (sb, db) = (plan.buffers[src.buffer].bytes, plan.buffers[step.output.buffer].bytes);
                    if sb != db {
                        return Err(bad(format!("copies a buffer of {sb} bytes into one of {db}")));
                    }
                    for b in [src.buffer, step.output.buffer] {
                        if let Some(other) = overlapping(plan, b) {
                            return Err(bad(format!("buffer {b} shares arena bytes with buffer {other}; a transfer's buffers must own theirs")));
                        }
                    }
                    runner.push(transfer_runner(devices, from, step.device));
                }
                _ => {
                    for (i, t) in step.inputs.iter().enumerate() {
                        on(t.buffer, step.device, &format!("operand {i}"))?;
                    }
                    runner.push(step.device);
                }
            }
        }
        let mut threads: Vec<usize> = runner.clone();
        threads.sort_unstable();
        threads.dedup();

        // Hazards per buffer, in plan order: a read depends on the last write; a write on the
        // last write and on every read since.
        let mut last_write: Vec<Option<usize>> = vec![None; plan.buffers.len()];
        let mut reads: Vec<Vec<usize>> = vec![Vec::new(); plan.buffers.len()];
        let mut waits = vec![Vec::new(); n];
        let mut signals = vec![false; n];
        for (si, step) in plan.steps.iter().enumerate() {
            let mut deps = Vec::new();
            for t in &step.inputs {
                deps.extend(last_write[t.buffer]);
            }
            let o = step.output.buffer;
            deps.extend(last_write[o]);
            deps.extend(reads[o].iter().copied());
            deps.retain(|&d| d != si && runner[d] != runner[si]);
            deps.sort_unstable();
            deps.dedup();
            for &d in &deps {
                signals[d] = true;
            }
            waits[si] = deps;
            for t in &step.inputs {
                if !reads[t.buffer].contains(&si) {
                    reads[t.buffer].push(si);
                }
            }
            last_write[o] = Some(si);
            reads[o].clear();
        }
        // A transfer between two devices is blocking; a kernel (or a copy inside one device)
        // on a device other than the CPU is only queued when its launch returns.
        let blocking = |si: usize| matches!(plan.steps[si].kernel, Kernel::Transfer { from } if from != plan.steps[si].device);
        let sync_before_signal = (0..n).map(|si| signals[si] && !blocking(si) && devices[runner[si]].kind() != DeviceKind::Cpu).collect();
        Ok(Schedule { runner, threads, waits, signals, sync_before_signal })
    }

    /// True when the steps run on more than one thread.
    pub fn concurrent(&self) -> bool {
        self.threads.len() > 1
    }
}

/// Another buffer of the plan sharing arena bytes with `buf`, if any.
fn overlapping(plan: &Plan, buf: usize) -> Option<usize> {
    let b = &plan.buffers[buf];
    let Storage::Arena { arena, offset } = b.storage else { return None };
    let (lo, hi) = (offset, offset + b.bytes);
    plan.buffers.iter().enumerate().find_map(|(i, o)| match o.storage {
        Storage::Arena { arena: a, offset: oo } if i != buf && a == arena && o.bytes > 0 && b.bytes > 0 && oo < hi && lo < oo + o.bytes => Some(i),
        _ => None,
    })
}

/// Host-side completion flags shared by the threads of one run.
struct Progress {
    state: Mutex<Flags>,
    changed: Condvar,
    /// Set by the first failure (or a panic); read between steps without the lock.
    stop: AtomicBool,
    /// The first failure.
    first: Mutex<Option<RuntimeError>>,
}

struct Flags {
    done: Vec<bool>,
    stopped: bool,
}

impl Progress {
    fn lock(&self) -> MutexGuard<'_, Flags> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks until every step of `deps` is done (`true`) or the run stopped (`false`).
    fn wait_for(&self, deps: &[usize]) -> bool {
        let mut f = self.lock();
        loop {
            if f.stopped {
                return false;
            }
            if deps.iter().all(|&d| f.done[d]) {
                return true;
            }
            f = self.changed.wait(f).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn signal(&self, step: usize) {
        self.lock().done[step] = true;
        self.changed.notify_all();
    }

    /// Records `e` if it is the first failure and wakes every waiting thread.
    fn fail(&self, e: RuntimeError) {
        {
            let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_none() {
                *first = Some(e);
            }
        }
        self.halt();
    }

    fn halt(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.lock().stopped = true;
        self.changed.notify_all();
    }
}

/// Stops the run if its thread unwinds (a panicking kernel), so no other thread waits for
/// it forever; the panic itself resurfaces when the scope joins the thread.
struct HaltOnPanic<'a>(&'a Progress);

impl Drop for HaltOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.halt();
        }
    }
}

impl RunCtx<'_> {
    /// Runs every step, one host thread per device of [`Schedule::threads`] (each inside its
    /// device's scope), and returns the first failure after every thread stopped. With
    /// `times`, fills each step's time and returns the spans (sorted by step).
    pub(crate) fn run_concurrent(&self, sched: &Schedule, times: Option<&mut [u64]>) -> Result<Option<Vec<super::Span>>, RuntimeError> {
        let profile = times.is_some();
        let progress = Progress {
            state: Mutex::new(Flags { done: vec![false; self.plan.steps.len()], stopped: false }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            first: Mutex::new(None),
        };
        let start = Instant::now();
        let spans: Vec<Vec<Span>> = std::thread::scope(|s| {
            let handles: Vec<_> = sched
                .threads
                .iter()
                .map(|&d| {
                    let progress = &progress;
                    std::thread::Builder::new().name(format!("tg-run-{}", self.devices[d].name())).spawn_scoped(s, move || {
                        let _guard = HaltOnPanic(progress);
                        let mut spans = Vec::new();
                        let mut body = || {
                            if let Err(e) = self.run_thread(sched, d, progress, start, profile.then_some(&mut spans)) {
                                progress.fail(e);
                            }
                        };
                        self.devices[d].scope(&mut body);
                        spans
                    })
                })
                .collect();
            let mut all = Vec::new();
            for h in handles {
                match h {
                    Ok(h) => match h.join() {
                        Ok(v) => all.push(v),
                        Err(p) => std::panic::resume_unwind(p),
                    },
                    Err(e) => progress.fail(RuntimeError::Plan(format!("cannot start a host thread: {e}"))),
                }
            }
            all
        });
        if let Some(e) = progress.first.into_inner().unwrap_or_else(|e| e.into_inner()) {
            return Err(e);
        }
        if !profile {
            return Ok(None);
        }
        let mut all: Vec<Span> = spans.into_iter().flatten().collect();
        all.sort_by_key(|s| s.step);
        if let Some(t) = times {
            for s in &all {
                t[s.step] = s.end_ns - s.start_ns;
            }
        }
        Ok(Some(all))
    }

    /// The steps of device `d`'s thread, in plan order.
    fn run_thread(&self, sched: &Schedule, d: usize, progress: &Progress, start: Instant, mut spans: Option<&mut Vec<Span>>) -> Result<(), RuntimeError> {
        let dev = &self.devices[d];
        let mut staging = Vec::new();
        let ns = |t: Instant| t.duration_since(start).as_nanos() as u64;
        for (si, step) in self.plan.steps.iter().enumerate() {
            if sched.runner[si] != d {
                continue;
            }
            if progress.stop.load(Ordering::Relaxed) || (!sched.waits[si].is_empty() && !progress.wait_for(&sched.waits[si])) {
                return Ok(());
            }
            let t0 = Instant::now();
            self.exec_step(si, &mut staging)?;
            if spans.is_some() || sched.sync_before_signal[si] {
                dev.synchronize().map_err(|e| RuntimeError::Kernel { step: si, kernel: step.kernel.name(), device: dev.name().to_string(), detail: e.to_string() })?;
            }
            if let Some(v) = spans.as_deref_mut() {
                let from = match step.kernel {
                    Kernel::Transfer { from } => Some(from),
                    _ => None,
                };
                v.push(Span { step: si, device: step.device, from, thread: d, start_ns: ns(t0), end_ns: ns(Instant::now()) });
            }
            if sched.signals[si] {
                progress.signal(si);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArenaDesc, BufferDesc, CpuDevice, Layout, Step, TensorRef};
    use tg_ir::{DType, UnaryOp};

    fn arena_buf(arena: usize, offset: usize) -> BufferDesc {
        BufferDesc { storage: Storage::Arena { arena, offset }, bytes: 16, node: 0, first_step: None, last_step: None, persistent: false }
    }

    fn state_buf(name: &str, device: usize) -> BufferDesc {
        BufferDesc { storage: Storage::State { name: name.into(), device }, bytes: 16, node: 0, first_step: None, last_step: None, persistent: true }
    }

    fn t(buffer: usize) -> TensorRef {
        TensorRef { buffer, layout: Layout::contiguous(&[4], DType::F32) }
    }

    fn step(kernel: Kernel, device: usize, inputs: &[usize], output: usize) -> Step {
        Step { kernel, device, inputs: inputs.iter().map(|&b| t(b)).collect(), output: t(output), node: 0 }
    }

    /// Two CPU devices: a transfer runs on its source's thread; a read waits for the other
    /// thread's last writer, a write for the other thread's readers since its last write;
    /// steps of one thread never wait for each other.
    #[test]
    fn waits_cover_reads_after_writes_and_writes_after_reads_across_threads() {
        let devices: Vec<Arc<dyn Device>> = vec![Arc::new(CpuDevice::new(1).unwrap()), Arc::new(CpuDevice::new(1).unwrap())];
        let exp = Kernel::Unary(UnaryOp::Exp);
        let plan = Plan {
            devices: vec!["cpu".into(), "cpu".into()],
            arenas: vec![ArenaDesc { device: 0, bytes: 64 }, ArenaDesc { device: 1, bytes: 64 }],
            buffers: vec![
                arena_buf(0, 0),   // 0: x on 0
                state_buf("s", 0), // 1: a state on 0
                arena_buf(1, 0),   // 2: copy of s on 1
                arena_buf(1, 16),  // 3: on 1
            ],
            steps: vec![
                step(exp.clone(), 0, &[0], 1),                  // 0: s = exp(x) on 0
                step(Kernel::Transfer { from: 0 }, 1, &[1], 2), // 1: s -> 1 (source's thread: 0)
                step(exp.clone(), 1, &[2], 3),                  // 2: on 1, reads the copy
                step(exp, 0, &[0], 1),                          // 3: s written again on 0
            ],
            inputs: vec![],
            outputs: vec![],
        };
        let s = Schedule::new(&plan, &devices).unwrap();
        assert_eq!(s.runner, vec![0, 0, 1, 0]);
        assert_eq!(s.threads, vec![0, 1]);
        assert!(s.concurrent());
        // Step 2 reads what the transfer (thread 0) wrote; step 1 shares thread 0 with step 0.
        assert_eq!(s.waits, vec![vec![], vec![], vec![1], vec![]]);
        assert_eq!(s.signals, vec![false, true, false, false]);
        assert_eq!(s.sync_before_signal, vec![false; 4]);

        // Every step on device 0: one thread, no waits.
        let mut p2 = plan.clone();
        p2.steps[1].device = 0;
        p2.steps[1].kernel = Kernel::Transfer { from: 0 };
        p2.steps[2].device = 0;
        p2.buffers[2] = arena_buf(0, 32);
        p2.buffers[3] = arena_buf(0, 48);
        let s2 = Schedule::new(&p2, &devices).unwrap();
        assert!(!s2.concurrent(), "every step on device 0");
        assert!(s2.waits.iter().all(|w| w.is_empty()));

        let mut p3 = plan.clone();
        // 3: back to device 0 into x (on thread 1, the source's), before step 4 rewrites s.
        p3.steps.insert(3, step(Kernel::Transfer { from: 1 }, 0, &[3], 0));
        let s3 = Schedule::new(&p3, &devices).unwrap();
        assert_eq!(s3.runner, vec![0, 0, 1, 1, 0]);
        // Step 3 (thread 1) overwrites x, which step 0 (thread 0) read: it waits for it.
        // Step 4 (thread 0) reads x, written by step 3 on thread 1.
        assert_eq!(s3.waits[3], vec![0]);
        assert_eq!(s3.waits[4], vec![3]);
    }

    /// Refusals: an operand on another device, and a transfer of mismatched sizes.
    #[test]
    fn plans_that_would_race_are_refused() {
        let devices: Vec<Arc<dyn Device>> = vec![Arc::new(CpuDevice::new(1).unwrap()), Arc::new(CpuDevice::new(1).unwrap())];
        let mut plan = Plan {
            devices: vec!["cpu".into(), "cpu".into()],
            arenas: vec![ArenaDesc { device: 0, bytes: 64 }, ArenaDesc { device: 1, bytes: 64 }],
            buffers: vec![arena_buf(0, 0), arena_buf(1, 0)],
            steps: vec![step(Kernel::Unary(tg_ir::UnaryOp::Exp), 1, &[0], 1)],
            inputs: vec![],
            outputs: vec![],
        };
        let e = Schedule::new(&plan, &devices).err().expect("refused").to_string();
        assert!(e.contains("operand 0 (buffer 0) is on cpu"), "{e}");
        plan.steps[0].kernel = Kernel::Transfer { from: 0 };
        assert!(Schedule::new(&plan, &devices).is_ok());
        plan.buffers[1].bytes = 32;
        let e = Schedule::new(&plan, &devices).err().expect("refused").to_string();
        assert!(e.contains("16 bytes into one of 32"), "{e}");
    }
}
