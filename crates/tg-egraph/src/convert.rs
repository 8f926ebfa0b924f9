//! Graph → e-graph, and a chosen node per class → graph.

use crate::{takes_declared_type, ENode, EgraphError, TEGraph, TensorAnalysis};
use egg::Id;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use tg_ir::{Graph, Node};

/// A graph loaded into an e-graph.
pub struct Loaded {
    /// The e-graph (one class per distinct live node of the graph).
    pub egraph: TEGraph,
    /// Named outputs, as classes.
    pub outputs: Vec<(String, Id)>,
    /// For every class that holds an original node: the smallest original node index.
    /// Extraction orders the graph it emits by these positions, so a graph comes back in
    /// its own order where it was not rewritten.
    pub positions: HashMap<Id, usize>,
}

impl Loaded {
    /// The position of a class (its canonical id is looked up).
    pub fn position(&self, id: Id) -> Option<usize> {
        self.positions.get(&self.egraph.find(id)).copied()
    }

    /// Re-keys positions by canonical class ids (after unions): the minimum of merged
    /// classes' positions.
    pub fn canonicalize_positions(&mut self) {
        let mut p: HashMap<Id, usize> = HashMap::with_capacity(self.positions.len());
        for (&id, &pos) in &self.positions {
            let c = self.egraph.find(id);
            let e = p.entry(c).or_insert(pos);
            *e = (*e).min(pos);
        }
        self.positions = p;
    }

    /// The output classes.
    pub fn roots(&self) -> Vec<Id> {
        self.outputs.iter().map(|(_, id)| self.egraph.find(*id)).collect()
    }
}

/// The e-node of a graph node, with children mapped to classes.
pub fn enode_of(n: &Node, map: &[Option<Id>]) -> Result<ENode, EgraphError> {
    let children = n
        .inputs
        .iter()
        .map(|&x| map.get(x).copied().flatten().ok_or_else(|| EgraphError::Internal(format!("operand {x} of a {} node is not loaded", n.op.name()))))
        .collect::<Result<Vec<Id>, _>>()?;
    Ok(if takes_declared_type(&n.op) { ENode::typed(n.op.clone(), n.shape.clone(), n.dtype, &children) } else { ENode::new(n.op.clone(), &children) })
}

/// Loads the live part of a (verified) graph into a fresh e-graph. Structurally identical
/// nodes become one class, and so do the ways of an [`tg_ir::Op::Alternatives`].
pub fn load(graph: &Graph) -> Result<Loaded, EgraphError> {
    tg_ir::verify(graph)?;
    let mut egraph = TEGraph::new(TensorAnalysis::default());
    let live = graph.live_mask();
    let mut map: Vec<Option<Id>> = vec![None; graph.nodes.len()];
    let mut positions = HashMap::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        if matches!(n.op, tg_ir::Op::Alternatives) {
            // The ways are one value: one class, and extraction keeps one of its nodes.
            let ways: Vec<Id> =
                n.inputs.iter().map(|&x| map[x].ok_or_else(|| EgraphError::Internal(format!("way {x} of alternatives {i} is not loaded")))).collect::<Result<_, _>>()?;
            let mut id = ways[0];
            for &w in &ways[1..] {
                egraph.union(id, w);
                id = egraph.find(id);
            }
            map[i] = Some(id);
            continue;
        }
        let id = egraph.add(enode_of(n, &map)?);
        map[i] = Some(id);
        positions.entry(id).or_insert(i);
    }
    if let Some(e) = egraph.analysis.errors.first() {
        return Err(EgraphError::Internal(format!("loading a verified graph: {e}")));
    }
    egraph.rebuild();
    let outputs = graph
        .outputs
        .iter()
        .map(|(name, o)| Ok((name.clone(), map[*o].ok_or_else(|| EgraphError::Internal(format!("output '{name}' not loaded")))?)))
        .collect::<Result<Vec<_>, EgraphError>>()?;
    let mut l = Loaded { egraph, outputs, positions };
    l.canonicalize_positions();
    Ok(l)
}

/// One chosen e-node per class reachable from the roots.
pub type Choice = HashMap<Id, ENode>;

/// Builds the graph computing `outputs` with the chosen node of every class, checked by
/// [`tg_ir::verify`].
///
/// Nodes are emitted in a topological order that follows `positions` (classes that hold an
/// original node keep its place; a new class is placed just before its first user), so
/// memory planning over the result sees the original schedule wherever nothing changed.
pub fn build_graph(egraph: &TEGraph, outputs: &[(String, Id)], choice: &Choice, positions: &HashMap<Id, usize>) -> Result<Graph, EgraphError> {
    build_graph_classes(egraph, outputs, choice, positions).map(|(g, _)| g)
}

/// [`build_graph`], also returning the (canonical) e-class of every node of the graph.
pub fn build_graph_classes(egraph: &TEGraph, outputs: &[(String, Id)], choice: &Choice, positions: &HashMap<Id, usize>) -> Result<(Graph, Vec<Id>), EgraphError> {
    let chosen = |c: Id| choice.get(&egraph.find(c)).ok_or_else(|| EgraphError::Internal(format!("class {c} has no chosen node")));
    // Reachable classes (iterative DFS) and their users.
    let mut order: Vec<Id> = Vec::new();
    let mut index: HashMap<Id, usize> = HashMap::new();
    let mut stack: Vec<Id> = outputs.iter().map(|(_, o)| egraph.find(*o)).collect();
    while let Some(c) = stack.pop() {
        if index.contains_key(&c) {
            continue;
        }
        index.insert(c, order.len());
        order.push(c);
        for &ch in chosen(c)?.children.iter() {
            let ch = egraph.find(ch);
            if !index.contains_key(&ch) {
                stack.push(ch);
            }
        }
    }
    let n = order.len();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut pending: Vec<usize> = vec![0; n];
    for (k, &c) in order.iter().enumerate() {
        let mut seen: Vec<usize> = Vec::new();
        for &ch in chosen(c)?.children.iter() {
            let j = index[&egraph.find(ch)];
            if !seen.contains(&j) {
                seen.push(j);
                users[j].push(k);
                pending[k] += 1;
            }
        }
    }
    // Placement keys: the original position, else just below the smallest key of a user,
    // resolved users-first (reverse topological order).
    let topo = {
        let mut pend = pending.clone();
        let mut ready: Vec<usize> = (0..n).filter(|&k| pend[k] == 0).collect();
        let mut t = Vec::with_capacity(n);
        while let Some(k) = ready.pop() {
            t.push(k);
            for &u in &users[k] {
                pend[u] -= 1;
                if pend[u] == 0 {
                    ready.push(u);
                }
            }
        }
        t
    };
    let mut key: Vec<Option<f64>> = order.iter().map(|c| positions.get(c).map(|&p| p as f64)).collect();
    for &k in topo.iter().rev() {
        if key[k].is_none() {
            key[k] = users[k].iter().filter_map(|&u| key[u]).reduce(f64::min).map(|v| v - 0.5);
        }
    }
    // Kahn's algorithm, smallest key first (ties: discovery order).
    #[derive(PartialEq)]
    struct Item(f64, usize);
    impl Eq for Item {}
    impl PartialOrd for Item {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Item {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            // Reversed: BinaryHeap is a max-heap.
            o.0.total_cmp(&self.0).then_with(|| o.1.cmp(&self.1))
        }
    }
    let mut heap = BinaryHeap::new();
    for k in 0..n {
        if pending[k] == 0 {
            heap.push(Item(key[k].unwrap_or(f64::MAX), k));
        }
    }
    let mut graph = Graph::default();
    let mut class_of: Vec<Id> = Vec::with_capacity(n);
    let mut node_of: Vec<Option<usize>> = vec![None; n];
    while let Some(Item(_, k)) = heap.pop() {
        let c = order[k];
        let en = chosen(c)?;
        let inputs = en
            .children
            .iter()
            .map(|&ch| node_of[index[&egraph.find(ch)]].ok_or_else(|| EgraphError::Internal("operand emitted after its user".into())))
            .collect::<Result<Vec<usize>, _>>()?;
        let data = &egraph[c].data;
        graph.nodes.push(Node { op: en.op.clone(), inputs, shape: data.shape.clone(), dtype: data.dtype });
        class_of.push(c);
        node_of[k] = Some(graph.nodes.len() - 1);
        for &u in &users[k] {
            pending[u] -= 1;
            if pending[u] == 0 {
                heap.push(Item(key[u].unwrap_or(f64::MAX), u));
            }
        }
    }
    if graph.nodes.len() != n {
        return Err(EgraphError::Internal(format!("the chosen nodes form a cycle ({} of {n} classes emitted)", graph.nodes.len())));
    }
    graph.outputs = outputs.iter().map(|(name, o)| (name.clone(), node_of[index[&egraph.find(*o)]].unwrap_or(usize::MAX))).collect();
    tg_ir::verify(&graph).map_err(|e| EgraphError::Internal(format!("extracted graph fails verification: {e}")))?;
    Ok((graph, class_of))
}

/// Structural fingerprint of a graph's live part, up to node order and merging of
/// identical nodes: for every output, an id in `interner` that is equal for two graphs iff
/// they compute the output with the same ops on the same operands. Used to check that
/// loading and extracting without rules gives the graph back.
pub fn canonical_outputs(graph: &Graph, interner: &mut BTreeMap<(String, Vec<usize>, Vec<usize>), usize>) -> Vec<(String, usize)> {
    let live = graph.live_mask();
    let mut canon: Vec<usize> = vec![usize::MAX; graph.nodes.len()];
    for (i, n) in graph.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let key = (format!("{:?}|{}", n.op, n.dtype), n.shape.clone(), n.inputs.iter().map(|&x| canon[x]).collect());
        let next = interner.len();
        canon[i] = *interner.entry(key).or_insert(next);
    }
    graph.outputs.iter().map(|(name, o)| (name.clone(), canon[*o])).collect()
}
