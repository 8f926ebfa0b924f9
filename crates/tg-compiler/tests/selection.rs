//! One kernel choice: the kernel the measured cost model prices for a node
//! (`tg_compiler::cost::key_of`, through `tg_runtime::select`) is the kernel lowering runs for
//! it. Before the registry they disagreed on `q·kᵀ` with a rank-2 activation `k`: priced as
//! the weight-reading quantized matmul, run as the f32 matmul.

use std::sync::Arc;
use tg_compiler::{compile, cost::key_of, CompileOptions};
use tg_ir::{DType, GraphBuilder};
use tg_runtime::{CpuDevice, Device, Kernel, Operand};

#[test]
fn priced_kernel_is_the_lowered_kernel() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[3, 8], DType::F32).unwrap();
    let w = b.weight("w", &[5, 8], DType::F32).unwrap();
    let k = b.input("k", &[4, 8], DType::F32).unwrap();
    let xw = b.matmul(x, w, true).unwrap(); // x · Wᵀ: a weight
    let qk = b.matmul(x, k, true).unwrap(); // x · kᵀ: an activation
    b.output("xw", xw).unwrap();
    b.output("qk", qk).unwrap();
    let g = b.finish().unwrap();
    let dev: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let mut opts = CompileOptions::default();
    opts.disabled.insert("rewrite".into());
    let plan = compile(&g, std::slice::from_ref(&dev), &opts).unwrap().plan;
    let mut seen = Vec::new();
    for s in &plan.steps {
        let n = &g.nodes[s.node];
        if !matches!(n.op, tg_ir::Op::MatMul { .. }) {
            continue;
        }
        let ins: Vec<Operand> =
            n.inputs.iter().map(|&i| Operand { shape: &g.nodes[i].shape, dtype: g.nodes[i].dtype, weight: matches!(g.nodes[i].op, tg_ir::Op::Weight { .. }) }).collect();
        let key = key_of(&n.op, (&n.shape, n.dtype), &ins, "cpu", 1, false).expect("a kernel");
        assert_eq!(key.kernel, s.kernel, "node {}: priced {:?}, lowered {:?}", s.node, key.kernel, s.kernel);
        seen.push(s.kernel.clone());
    }
    assert!(seen.contains(&Kernel::MatMulQuant { quantize_activations: false }), "{seen:?}");
    assert!(seen.contains(&Kernel::MatMul { transpose_rhs: true }), "{seen:?}");
}
