//! The compact working form of an extraction instance, shared by the preprocessing, the
//! heuristics, the bound and the search.
//!
//! Nodes are renumbered so that the nodes of a class are a contiguous range; classes and
//! nodes remember their ids in the original [`EGraph`].

use crate::graph::{ClassId, EGraph, NodeId};

/// A compact extraction instance (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Problem {
    /// Nodes of class `c`: `class_first[c]..class_first[c + 1]`.
    pub class_first: Vec<u32>,
    /// The class of each node.
    pub node_class: Vec<u32>,
    /// The cost of each node.
    pub cost: Vec<f64>,
    /// Child classes of node `n`: `children[child_first[n]..child_first[n + 1]]`, sorted.
    pub child_first: Vec<u32>,
    /// See `child_first`.
    pub children: Vec<u32>,
    /// Nodes that have class `c` as a child: `parents[parent_first[c]..parent_first[c+1]]`.
    pub parent_first: Vec<u32>,
    /// See `parent_first`.
    pub parents: Vec<u32>,
    /// Root classes (no repetitions).
    pub roots: Vec<u32>,
    /// Original class of each class.
    pub orig_class: Vec<ClassId>,
    /// Original node of each node.
    pub orig_node: Vec<NodeId>,
}

/// The instance has no acyclic extraction: this root class has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Infeasible(pub ClassId);

impl Problem {
    pub fn num_classes(&self) -> usize {
        self.class_first.len() - 1
    }

    pub fn num_nodes(&self) -> usize {
        self.node_class.len()
    }

    #[inline]
    pub fn nodes_of(&self, c: usize) -> std::ops::Range<usize> {
        self.class_first[c] as usize..self.class_first[c + 1] as usize
    }

    #[inline]
    pub fn kids(&self, n: usize) -> &[u32] {
        &self.children[self.child_first[n] as usize..self.child_first[n + 1] as usize]
    }

    #[inline]
    pub fn parents_of(&self, c: usize) -> &[u32] {
        &self.parents[self.parent_first[c] as usize..self.parent_first[c + 1] as usize]
    }

    /// The whole e-graph as a problem, without nodes that are their own child (they can
    /// never be chosen), restricted to what the roots can reach.
    pub fn from_egraph(g: &EGraph) -> Result<Problem, Infeasible> {
        let nc = g.num_classes();
        let mut class_first = Vec::with_capacity(nc + 1);
        class_first.push(0u32);
        let mut node_class = Vec::with_capacity(g.num_nodes());
        let mut cost = Vec::with_capacity(g.num_nodes());
        let mut child_first = vec![0u32];
        let mut children = Vec::new();
        let mut orig_node = Vec::with_capacity(g.num_nodes());
        for c in g.classes() {
            for &n in g.class_nodes(c) {
                node_class.push(c.0);
                cost.push(g.cost(n));
                children.extend(g.children(n).iter().map(|d| d.0));
                child_first.push(children.len() as u32);
                orig_node.push(n);
            }
            class_first.push(node_class.len() as u32);
        }
        let p = Problem {
            class_first,
            node_class,
            cost,
            child_first,
            children,
            parent_first: Vec::new(),
            parents: Vec::new(),
            roots: g.roots().iter().map(|r| r.0).collect(),
            orig_class: g.classes().collect(),
            orig_node,
        };
        let keep: Vec<bool> = (0..p.num_nodes()).map(|n| !p.kids(n).contains(&p.node_class[n])).collect();
        p.retain(&keep)
    }

    /// The instance with only the kept nodes, then only the nodes that have an acyclic
    /// extraction at all (every child class grounded, bottom-up), then only the classes
    /// the roots reach. Fails when a root has no acyclic extraction left.
    pub fn retain(&self, keep: &[bool]) -> Result<Problem, Infeasible> {
        let nc = self.num_classes();
        let nn = self.num_nodes();
        let mut keep = keep.to_vec();

        // Grounded classes: least fixed point of "some kept node has all children grounded".
        let mut grounded = vec![false; nc];
        let mut missing: Vec<u32> = (0..nn).map(|n| self.kids(n).len() as u32).collect();
        let mut queue: Vec<usize> = (0..nn).filter(|&n| keep[n] && missing[n] == 0).collect();
        let parent_lists = self.parent_lists();
        while let Some(n) = queue.pop() {
            let c = self.node_class[n] as usize;
            if grounded[c] {
                continue;
            }
            grounded[c] = true;
            for &p in &parent_lists[c] {
                let p = p as usize;
                missing[p] -= 1;
                if missing[p] == 0 && keep[p] && !grounded[self.node_class[p] as usize] {
                    queue.push(p);
                }
            }
        }
        for n in 0..nn {
            if keep[n] && missing[n] != 0 {
                keep[n] = false;
            }
        }
        for &r in &self.roots {
            if !grounded[r as usize] {
                return Err(Infeasible(self.orig_class[r as usize]));
            }
        }

        // Classes reachable from the roots through kept nodes.
        let mut reach = vec![false; nc];
        let mut stack: Vec<usize> = Vec::new();
        for &r in &self.roots {
            if !reach[r as usize] {
                reach[r as usize] = true;
                stack.push(r as usize);
            }
        }
        while let Some(c) = stack.pop() {
            for n in self.nodes_of(c) {
                if !keep[n] {
                    continue;
                }
                for &d in self.kids(n) {
                    if !reach[d as usize] {
                        reach[d as usize] = true;
                        stack.push(d as usize);
                    }
                }
            }
        }

        // Compact.
        let mut new_class = vec![u32::MAX; nc];
        let mut k = 0u32;
        for c in 0..nc {
            if reach[c] {
                new_class[c] = k;
                k += 1;
            }
        }
        let mut class_first = vec![0u32];
        let mut node_class = Vec::new();
        let mut cost = Vec::new();
        let mut child_first = vec![0u32];
        let mut children = Vec::new();
        let mut orig_class = Vec::with_capacity(k as usize);
        let mut orig_node = Vec::new();
        for c in 0..nc {
            if !reach[c] {
                continue;
            }
            for n in self.nodes_of(c) {
                if !keep[n] {
                    continue;
                }
                node_class.push(new_class[c]);
                cost.push(self.cost[n]);
                let start = children.len();
                children.extend(self.kids(n).iter().map(|&d| new_class[d as usize]));
                // Renumbering preserves order, so the list stays sorted.
                debug_assert!(children[start..].iter().all(|&d| d != u32::MAX));
                child_first.push(children.len() as u32);
                orig_node.push(self.orig_node[n]);
            }
            class_first.push(node_class.len() as u32);
            orig_class.push(self.orig_class[c]);
        }
        let mut p = Problem {
            class_first,
            node_class,
            cost,
            child_first,
            children,
            parent_first: Vec::new(),
            parents: Vec::new(),
            roots: self.roots.iter().map(|&r| new_class[r as usize]).collect(),
            orig_class,
            orig_node,
        };
        p.index_parents();
        Ok(p)
    }

    fn parent_lists(&self) -> Vec<Vec<u32>> {
        let mut out = vec![Vec::new(); self.num_classes()];
        for n in 0..self.num_nodes() {
            for &d in self.kids(n) {
                out[d as usize].push(n as u32);
            }
        }
        out
    }

    fn index_parents(&mut self) {
        let nc = self.num_classes();
        let mut first = vec![0u32; nc + 1];
        for &d in &self.children {
            first[d as usize + 1] += 1;
        }
        for c in 0..nc {
            first[c + 1] += first[c];
        }
        let mut fill = first.clone();
        let mut parents = vec![0u32; self.children.len()];
        for n in 0..self.num_nodes() {
            for &d in self.kids(n) {
                parents[fill[d as usize] as usize] = n as u32;
                fill[d as usize] += 1;
            }
        }
        self.parent_first = first;
        self.parents = parents;
    }

    /// Strongly connected components of the class graph (class `c` → class `d` when a
    /// node of `c` has child `d`). Returns the component of each class and the
    /// components in an order where every component comes after all components it
    /// reaches (children first).
    pub fn sccs(&self) -> (Vec<u32>, Vec<Vec<u32>>) {
        let nc = self.num_classes();
        const UNSEEN: u32 = u32::MAX;
        let mut index = vec![UNSEEN; nc];
        let mut low = vec![0u32; nc];
        let mut on_stack = vec![false; nc];
        let mut comp = vec![UNSEEN; nc];
        let mut stack: Vec<u32> = Vec::new();
        let mut comps: Vec<Vec<u32>> = Vec::new();
        let mut next = 0u32;
        // Call stack: (class, position in the flattened child list of its nodes).
        let mut call: Vec<(u32, usize)> = Vec::new();
        for s in 0..nc {
            if index[s] != UNSEEN {
                continue;
            }
            call.push((s as u32, 0));
            index[s] = next;
            low[s] = next;
            next += 1;
            stack.push(s as u32);
            on_stack[s] = true;
            while let Some(&mut (c, ref mut pos)) = call.last_mut() {
                let c = c as usize;
                let a = self.child_first[self.class_first[c] as usize] as usize;
                let b = self.child_first[self.class_first[c + 1] as usize] as usize;
                if a + *pos < b {
                    let d = self.children[a + *pos] as usize;
                    *pos += 1;
                    if index[d] == UNSEEN {
                        index[d] = next;
                        low[d] = next;
                        next += 1;
                        stack.push(d as u32);
                        on_stack[d] = true;
                        call.push((d as u32, 0));
                    } else if on_stack[d] {
                        low[c] = low[c].min(index[d]);
                    }
                } else {
                    call.pop();
                    if let Some(&(p, _)) = call.last() {
                        let p = p as usize;
                        low[p] = low[p].min(low[c]);
                    }
                    if low[c] == index[c] {
                        let id = comps.len() as u32;
                        let mut members = Vec::new();
                        while let Some(x) = stack.pop() {
                            on_stack[x as usize] = false;
                            comp[x as usize] = id;
                            members.push(x);
                            if x as usize == c {
                                break;
                            }
                        }
                        comps.push(members);
                    }
                }
            }
        }
        (comp, comps)
    }
}
