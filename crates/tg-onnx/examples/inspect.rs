//! What an ONNX model needs: its inputs, its op types (with counts and the opset), and
//! what the importer says of it for given input shapes.
//!
//! `cargo run --release -p tg-onnx --example inspect -- MODEL.onnx [NAME=D0,D1,...]...`
//! (a dynamic dimension not given is bound to 1). `TG_INSPECT_OPS=Conv,Resize` also prints
//! every node of those op types with its attributes.

use std::collections::{BTreeMap, HashMap};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: inspect MODEL.onnx [NAME=D0,D1,...]...");
        std::process::exit(2);
    };
    let m = match tg_onnx::OnnxModel::open(&path) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let mut shapes: HashMap<String, Vec<usize>> = HashMap::new();
    for a in args {
        let Some((n, d)) = a.split_once('=') else {
            eprintln!("bad shape '{a}': expected NAME=D0,D1,...");
            std::process::exit(2);
        };
        shapes.insert(n.to_string(), d.split(',').filter_map(|x| x.trim().parse().ok()).collect());
    }
    let g = m.graph();
    println!("{path}: opset {}, {} nodes, {} initializers", m.opset, g.node.len(), g.initializer.len());
    for v in m.inputs() {
        let name = v.name.clone().unwrap_or_default();
        let dims: Vec<String> = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(tg_onnx::proto::type_proto::Value::TensorType(t)) => t
                .shape
                .as_ref()
                .map(|s| {
                    s.dim
                        .iter()
                        .map(|d| match &d.value {
                            Some(tg_onnx::proto::tensor_shape_proto::dimension::Value::DimValue(x)) => x.to_string(),
                            Some(tg_onnx::proto::tensor_shape_proto::dimension::Value::DimParam(p)) => p.clone(),
                            None => "?".into(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            _ => vec!["not a tensor".into()],
        };
        if !shapes.contains_key(&name) {
            shapes.insert(name.clone(), dims.iter().map(|d| d.parse().unwrap_or(1)).collect());
        }
        println!("  input {name}: [{}]", dims.join(", "));
    }
    let mut ops: BTreeMap<String, usize> = BTreeMap::new();
    for n in &g.node {
        *ops.entry(n.op_type.clone().unwrap_or_default()).or_default() += 1;
    }
    let show: Vec<String> = std::env::var("TG_INSPECT_OPS").unwrap_or_default().split(',').filter(|s| !s.is_empty()).map(String::from).collect();
    for n in g.node.iter().filter(|n| show.iter().any(|s| Some(s) == n.op_type.as_ref())) {
        let attrs: Vec<String> = n
            .attribute
            .iter()
            .map(|a| {
                let v = if !a.ints.is_empty() {
                    format!("{:?}", a.ints)
                } else if let Some(s) = &a.s {
                    format!("{:?}", String::from_utf8_lossy(s))
                } else if let Some(i) = a.i {
                    i.to_string()
                } else if let Some(f) = a.f {
                    f.to_string()
                } else if a.g.is_some() {
                    "<graph>".into()
                } else {
                    "?".into()
                };
                format!("{}={v}", a.name.clone().unwrap_or_default())
            })
            .collect();
        println!("  {} {:?}: in {:?} out {:?} {}", n.op_type.clone().unwrap_or_default(), n.name.clone().unwrap_or_default(), n.input, n.output, attrs.join(" "));
        for a in n.attribute.iter().filter(|a| a.g.is_some()) {
            let Some(sub) = &a.g else { continue };
            let outs: Vec<String> = sub.output.iter().map(|o| o.name.clone().unwrap_or_default()).collect();
            println!("    {}: outputs {outs:?}", a.name.clone().unwrap_or_default());
            for bn in &sub.node {
                println!("      {} {:?}: in {:?} out {:?}", bn.op_type.clone().unwrap_or_default(), bn.name.clone().unwrap_or_default(), bn.input, bn.output);
            }
        }
    }
    let supported = tg_onnx::supported_ops();
    let line: Vec<String> = ops.iter().map(|(o, k)| format!("{o}:{k}{}", if supported.contains(&o.as_str()) { "" } else { "*" })).collect();
    println!("  ops (* = not mapped): {}", line.join(" "));
    match tg_onnx::import(&m, &shapes) {
        Ok(i) => println!("  imported: {} IR nodes, {} weights", i.graph.nodes.len(), i.weights.len()),
        Err(e) => println!("  import: {e}"),
    }
}
