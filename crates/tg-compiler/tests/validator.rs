//! The validator rejects corrupted plans (each corruption is one invariant).

use std::sync::Arc;
use tg_compiler::{compile, validate, CompileOptions};
use tg_ir::{DType, GraphBuilder, UnaryOp};
use tg_runtime::{CpuDevice, Device, Plan, Storage};

fn plan() -> (Plan, Arc<dyn Device>) {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[4, 8], DType::F32).unwrap();
    let a = b.unary(UnaryOp::Exp, x).unwrap();
    let c = b.unary(UnaryOp::Neg, a).unwrap();
    let d = b.unary(UnaryOp::Tanh, c).unwrap();
    let e = b.add(d, x).unwrap();
    b.output("y", e).unwrap();
    let g = b.finish().unwrap();
    let dev: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let p = compile(&g, std::slice::from_ref(&dev), &CompileOptions::default()).unwrap().plan;
    validate(&p, std::slice::from_ref(&dev)).unwrap();
    (p, dev)
}

#[test]
fn overlapping_live_buffers_are_rejected() {
    let (mut p, dev) = plan();
    // Put the output of step 1 where step 0's output (its input) lives.
    let b0 = p.steps[0].output.buffer;
    let b1 = p.steps[1].output.buffer;
    let Storage::Arena { offset, .. } = p.buffers[b0].storage else { panic!() };
    p.buffers[b1].storage = Storage::Arena { arena: 0, offset };
    let e = validate(&p, &[dev]).unwrap_err();
    assert!(e.0.contains("overlap"), "{e}");
}

#[test]
fn reading_before_writing_is_rejected() {
    let (mut p, dev) = plan();
    p.steps.swap(0, 1);
    let e = validate(&p, &[dev]).unwrap_err();
    assert!(e.0.contains("before it is written"), "{e}");
}

#[test]
fn unsupported_layouts_are_rejected() {
    let (mut p, dev) = plan();
    p.steps[0].output.layout.shape = vec![8, 4, 1, 1];
    p.steps[0].output.layout.strides = vec![1, 8, 1, 1];
    assert!(validate(&p, &[dev]).is_err());
}

#[test]
fn buffers_past_the_arena_are_rejected() {
    let (mut p, dev) = plan();
    p.arenas[0].bytes = 16;
    let e = validate(&p, &[dev]).unwrap_err();
    assert!(e.0.contains("exceeds arena"), "{e}");
}

#[test]
fn missing_devices_are_rejected() {
    let (mut p, dev) = plan();
    p.devices = vec!["gpu".into()];
    assert!(validate(&p, &[dev]).is_err());
}
