//! Extraction under a cache budget per device ([`tg_egraph::StateBudget`]) when the devices
//! of the kept states are only known after the placing extractor has run.
//!
//! Two states that cannot be recomputed (each an input's rows appended in place), one
//! state's bytes of budget per device. The quick rounds see every state on the home
//! device and cannot fit; the placing extractor puts one state on each device, which fits.
//! That must compile (the budget is met), and a budget no placement can meet must still be
//! refused with the bytes.

use std::cell::Cell;
use tg_egraph::{kept_states, load, EgraphError, Extraction, Extractor, GreedyDagExtractor, Id, KernelCost, StateBudget, TEGraph};
use tg_ir::{DType, Graph, GraphBuilder};

const ROWS: usize = 16;
const WIDTH: usize = 8;

/// `a = store_rows(state a, x, pos)`, the same for `b` with `y`; both are outputs.
fn two_states() -> Graph {
    let mut b = GraphBuilder::new();
    let pos = b.input("pos", &[1], DType::I32).unwrap();
    for name in ["a", "b"] {
        let rows = b.input(&format!("rows_{name}"), &[1, WIDTH], DType::F32).unwrap();
        let st = b.state(name, &[ROWS, WIDTH], DType::F32).unwrap();
        let kept = b.store_rows(st, rows, pos, 0).unwrap();
        b.output(name, kept).unwrap();
    }
    b.finish().unwrap()
}

/// A placing extractor's stand-in: greedy extraction that records that it ran (after which
/// the states' devices are known).
struct Placing<'a> {
    greedy: GreedyDagExtractor<KernelCost>,
    ran: &'a Cell<bool>,
}

impl Extractor for Placing<'_> {
    fn name(&self) -> String {
        "placing".into()
    }
    fn extract(&self, egraph: &TEGraph, roots: &[Id]) -> Result<Extraction, EgraphError> {
        self.ran.set(true);
        self.greedy.extract(egraph, roots)
    }
}

fn extract_under(budget: u64) -> (Result<Extraction, EgraphError>, Vec<(String, usize)>, bool) {
    let g = two_states();
    let l = load(&g).unwrap();
    let roots = l.roots();
    let b = l.egraph.find(roots[1]);
    let ran = Cell::new(false);
    let inner = Placing { greedy: GreedyDagExtractor::default(), ran: &ran };
    let quick = GreedyDagExtractor::default();
    // Before the placing extractor's answer every state is on device 0; then `b` is on 1.
    let device_of = |c: Id| usize::from(ran.get() && l.egraph.find(c) == b);
    let cost = KernelCost::default();
    let budgeted = StateBudget { inner: &inner, quick: Some(&quick), budgets: vec![Some(budget); 2], device_of: Some(&device_of), cost: &cost, report: Default::default() };
    let r = budgeted.extract(&l.egraph, &roots);
    let kept = match &r {
        Ok(ex) => kept_states(&l.egraph, ex, Some(&device_of)).into_iter().map(|k| (k.name, k.device)).collect(),
        Err(_) => Vec::new(),
    };
    (r, kept, ran.get())
}

#[test]
fn states_the_quick_rounds_cannot_fit_are_left_to_the_placing_extractor() {
    let state_bytes = (ROWS * WIDTH * 4) as u64;
    let (r, kept, ran) = extract_under(state_bytes);
    assert!(r.is_ok(), "one state per device fits: {r:?}");
    assert!(ran, "the placing extractor chose");
    assert_eq!(kept, vec![("a".to_string(), 0), ("b".to_string(), 1)]);

    // Less than one state per device: no placement fits, and the refusal names the bytes.
    let (r, _, ran) = extract_under(state_bytes - 4);
    let e = r.unwrap_err().to_string();
    assert!(ran, "refused only after the placing extractor's choice");
    assert!(e.contains(&format!("need at least {state_bytes} bytes")) && e.contains(&format!("cache budget of {}", state_bytes - 4)), "{e}");
}
