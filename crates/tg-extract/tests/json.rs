//! The extraction-gym reader: semantics and every error.

use tg_extract::{check, extract, read_json_str, ClassId, Options, ReadError};

fn err(text: &str) -> ReadError {
    match read_json_str(text) {
        Ok(g) => panic!("accepted invalid input ({} classes)", g.num_classes()),
        Err(e) => e,
    }
}

const GOOD: &str = r#"{
  "comment": "ignored",
  "nodes": {
    "r0": {"op": "f", "children": ["a1", "b0", "b0"], "eclass": "R", "cost": 1.0},
    "a0": {"op": "x", "eclass": "A", "cost": 3},
    "a1": {"op": "h", "children": ["b0"], "eclass": "A", "cost": 0.5},
    "b0": {"op": "y", "children": [], "eclass": "B"}
  },
  "root_eclasses": ["R"],
  "class_data": {"A": {"type": "T"}}
}"#;

#[test]
fn reads_classes_children_and_defaults() {
    let g = read_json_str(GOOD).unwrap();
    assert_eq!(g.num_classes(), 3);
    assert_eq!(g.num_nodes(), 4);
    let names: Vec<&str> = g.classes().map(|c| g.class_name(c)).collect();
    assert_eq!(names, ["R", "A", "B"], "classes in order of first appearance");
    let id = |name: &str| g.nodes().find(|&n| g.node_name(n) == name).unwrap();
    // Children are node ids standing for their classes; repeats collapse.
    assert_eq!(g.children(id("r0")), &[ClassId(1), ClassId(2)]);
    assert_eq!(g.children(id("a0")), &[]);
    // Missing cost means 1.0, as in egraph-serialize.
    assert_eq!(g.cost(id("b0")), 1.0);
    assert_eq!(g.cost(id("a0")), 3.0);
    assert_eq!(g.roots(), &[ClassId(0)]);
    assert_eq!(g.class_nodes(ClassId(1)), &[id("a0"), id("a1")]);
    // f(h(y), y) = 1 + 0.5 + 1 beats f(x, y) = 1 + 3 + 1.
    let x = extract(&g, &Options::default()).unwrap();
    assert!(x.optimal);
    assert_eq!(x.dag_cost, 2.5);
    assert_eq!(check(&g, &x.choices).unwrap(), 2.5);
}

#[test]
fn a_child_may_name_any_node_of_its_class() {
    // "a0" names class A although the cheap node of A is "a1".
    let g = read_json_str(
        r#"{"nodes": {
            "r": {"op": "f", "children": ["a0"], "eclass": "R", "cost": 1},
            "a0": {"op": "x", "eclass": "A", "cost": 5},
            "a1": {"op": "z", "eclass": "A", "cost": 2}},
          "root_eclasses": ["R"]}"#,
    )
    .unwrap();
    let x = extract(&g, &Options::default()).unwrap();
    assert_eq!(x.dag_cost, 3.0);
    assert!(x.choices.iter().any(|&(_, n)| g.node_name(n) == "a1"));
}

#[test]
fn subsumed_nodes_are_never_chosen() {
    let g = read_json_str(
        r#"{"nodes": {
            "r": {"op": "f", "children": ["a0"], "eclass": "R", "cost": 1},
            "a0": {"op": "x", "eclass": "A", "cost": 5},
            "a1": {"op": "z", "eclass": "A", "cost": 2, "subsumed": true}},
          "root_eclasses": ["R"]}"#,
    )
    .unwrap();
    assert_eq!(g.num_nodes(), 2);
    assert_eq!(extract(&g, &Options::default()).unwrap().dag_cost, 6.0);
}

#[test]
fn rejects_malformed_json() {
    assert!(matches!(err("{\"nodes\": {"), ReadError::Syntax(_)));
    assert!(matches!(err("[]"), ReadError::Syntax(_)));
    assert!(matches!(err(r#"{"nodes": {"a": {"op": "x", "eclass": "A", "children": "b"}}, "root_eclasses": ["A"]}"#), ReadError::Syntax(_)));
}

#[test]
fn rejects_missing_fields() {
    assert!(matches!(err(r#"{"root_eclasses": ["A"]}"#), ReadError::MissingNodes));
    match err(r#"{"nodes": {"a": {"eclass": "A"}}, "root_eclasses": ["A"]}"#) {
        ReadError::MissingField { node, field } => assert_eq!((node.as_str(), field), ("a", "op")),
        e => panic!("{e}"),
    }
    match err(r#"{"nodes": {"a": {"op": "x"}}, "root_eclasses": ["A"]}"#) {
        ReadError::MissingField { node, field } => {
            assert_eq!((node.as_str(), field), ("a", "eclass"))
        }
        e => panic!("{e}"),
    }
}

#[test]
fn rejects_unknown_children_and_roots() {
    match err(r#"{"nodes": {"a": {"op": "x", "eclass": "A", "children": ["zz"]}}, "root_eclasses": ["A"]}"#) {
        ReadError::UnknownChild { node, child } => {
            assert_eq!((node.as_str(), child.as_str()), ("a", "zz"))
        }
        e => panic!("{e}"),
    }
    match err(r#"{"nodes": {"a": {"op": "x", "eclass": "A"}}, "root_eclasses": ["B"]}"#) {
        ReadError::UnknownRoot(r) => assert_eq!(r, "B"),
        e => panic!("{e}"),
    }
}

#[test]
fn rejects_missing_or_empty_roots() {
    assert!(matches!(err(r#"{"nodes": {"a": {"op": "x", "eclass": "A"}}}"#), ReadError::NoRoots));
    assert!(matches!(err(r#"{"nodes": {"a": {"op": "x", "eclass": "A"}}, "root_eclasses": []}"#), ReadError::NoRoots));
}

#[test]
fn rejects_bad_costs() {
    for cost in ["-1", "-0.5", "\"1\"", "null", "[1]", "true"] {
        let text = format!(r#"{{"nodes": {{"a": {{"op": "x", "eclass": "A", "cost": {cost}}}}}, "root_eclasses": ["A"]}}"#);
        match err(&text) {
            ReadError::BadCost { node, .. } => assert_eq!(node, "a", "cost {cost}"),
            e => panic!("cost {cost}: {e}"),
        }
    }
    // Out of f64 range: serde_json refuses the number itself.
    let text = r#"{"nodes": {"a": {"op": "x", "eclass": "A", "cost": 1e999}}, "root_eclasses": ["A"]}"#;
    assert!(matches!(err(text), ReadError::Syntax(_) | ReadError::BadCost { .. }));
}

#[test]
fn rejects_duplicate_node_ids() {
    let e = err(r#"{"nodes": {"a": {"op": "x", "eclass": "A"}, "a": {"op": "y", "eclass": "A"}}, "root_eclasses": ["A"]}"#);
    assert!(matches!(e, ReadError::Syntax(_)));
    assert!(e.to_string().contains("duplicate node id `a`"), "{e}");
}

#[test]
fn rejects_empty_classes() {
    match err(r#"{"nodes": {"a": {"op": "x", "eclass": "A"}}, "root_eclasses": ["A"], "class_data": {"B": {}}}"#) {
        ReadError::EmptyClass { class, .. } => assert_eq!(class, "B"),
        e => panic!("{e}"),
    }
    match err(r#"{"nodes": {"a": {"op": "x", "eclass": "A", "subsumed": true}}, "root_eclasses": ["A"]}"#) {
        ReadError::EmptyClass { class, what } => {
            assert_eq!(class, "A");
            assert!(what.contains("subsumed"));
        }
        e => panic!("{e}"),
    }
}

#[test]
fn io_errors_name_the_file() {
    let e = tg_extract::read_json_file("/nonexistent/egraph.json").unwrap_err();
    assert!(matches!(e, ReadError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/egraph.json"));
}

#[test]
fn infeasible_roots_are_reported() {
    // A's only node needs A itself; B's needs C, whose only node needs B.
    for text in [
        r#"{"nodes": {"a": {"op": "x", "eclass": "A", "children": ["a"]}}, "root_eclasses": ["A"]}"#,
        r#"{"nodes": {"b": {"op": "x", "eclass": "B", "children": ["c"]},
                      "c": {"op": "y", "eclass": "C", "children": ["b"]}}, "root_eclasses": ["B"]}"#,
    ] {
        let g = read_json_str(text).unwrap();
        let e = extract(&g, &Options::default()).unwrap_err();
        assert!(e.to_string().contains("no acyclic extraction"), "{e}");
    }
}
