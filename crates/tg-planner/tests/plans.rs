//! Hand-made planning problems with known optima, random problems whose every plan must pass
//! the independent validator, and corrupted plans the validator must reject.

use rand::{Rng, SeedableRng};
use tg_planner::{solve, validate, Limits, Problem, Status};

fn problem(json: serde_json::Value) -> Problem {
    Problem::from_json(&json.to_string()).expect("valid problem")
}

fn exact(p: &Problem) -> tg_planner::Outcome {
    let out = solve(p, &Limits { time: std::time::Duration::from_secs(20), ..Limits::default() });
    if let Some(b) = &out.best {
        let plan = b.to_plan();
        let c = validate(p, &plan).unwrap_or_else(|e| panic!("{e}\nplan {plan:#?}"));
        assert_eq!((c.makespan, c.peak), (b.makespan(), b.peak()), "the validator recomputes what the search claims");
    }
    out
}

/// x = input; y = exp(x) on cpu (10) or gpu (2, copies 5 each way).
fn two_devices(latency: u64) -> Problem {
    problem(serde_json::json!({
        "devices": [{"name": "cpu", "capacity": 64}, {"name": "gpu", "capacity": 64}],
        "links": [{"from": 0, "to": 1, "latency": latency, "bytes_per_us": 1000000}, {"from": 1, "to": 0, "latency": latency, "bytes_per_us": 1000000}],
        "classes": [{"bytes": 8}, {"bytes": 8}],
        "nodes": [
            {"class": 0, "source": "input"},
            {"class": 1, "children": [0], "options": [{"kernel": "exp", "device": 0, "time": 10}, {"kernel": "exp", "device": 1, "time": 2}]}
        ],
        "roots": [1]
    }))
}

#[test]
fn device_choice_follows_copy_cost() {
    // Via the gpu: copy 1+1 (latency 1, 8 bytes at 1e6 B/us rounds up to 1 ns), kernel 2, copy back 2 → 6 < 10.
    let out = exact(&two_devices(1));
    assert_eq!(out.status, Status::Optimal);
    assert_eq!(out.best.as_ref().unwrap().makespan(), 6);
    // With latency 5 each copy costs 6: 6 + 2 + 6 = 14 > 10, so the cpu wins.
    let out = exact(&two_devices(5));
    assert_eq!(out.best.as_ref().unwrap().makespan(), 10);
}

#[test]
fn shared_subexpression_is_paid_once() {
    // r = f(a, a') where class 1 has a cheap node reading the expensive class 2 and an
    // expensive standalone node; class 3 also reads class 2, so sharing class 2 wins.
    let p = problem(serde_json::json!({
        "devices": [{"capacity": 1000}],
        "classes": [{"bytes": 4}, {"bytes": 4}, {"bytes": 4}, {"bytes": 4}, {"bytes": 4}],
        "nodes": [
            {"class": 0, "source": "input"},
            {"class": 2, "children": [0], "options": [{"device": 0, "time": 10}]},
            {"class": 1, "children": [2], "options": [{"device": 0, "time": 1}]},
            {"class": 1, "children": [0], "options": [{"device": 0, "time": 8}]},
            {"class": 3, "children": [2], "options": [{"device": 0, "time": 1}]},
            {"class": 4, "children": [1, 3], "options": [{"device": 0, "time": 1}]}
        ],
        "roots": [4]
    }));
    let out = exact(&p);
    assert_eq!(out.status, Status::Optimal);
    // 10 (class 2) + 1 + 1 + 1 = 13, not 8 + 10 + 1 + 1 = 20.
    assert_eq!(out.best.unwrap().makespan(), 13);
}

#[test]
fn capacity_decides_feasibility_and_cycles_are_avoided() {
    // A cycle: class 1 = g(class 2), class 2 = h(class 1) or h'(input).
    let base = serde_json::json!({
        "devices": [{"capacity": 8}],
        "classes": [{"bytes": 4}, {"bytes": 4}, {"bytes": 4}],
        "nodes": [
            {"class": 0, "source": "input"},
            {"class": 1, "children": [2], "options": [{"device": 0, "time": 1}]},
            {"class": 2, "children": [1], "options": [{"device": 0, "time": 1}]},
            {"class": 2, "children": [0], "options": [{"device": 0, "time": 5}]}
        ],
        "roots": [1]
    });
    let out = exact(&problem(base.clone()));
    assert_eq!(out.status, Status::Optimal);
    assert_eq!(out.best.unwrap().makespan(), 6);
    // Capacity 7: class 1's kernel needs its 4-byte operand and 4-byte output at once.
    let mut small = base.clone();
    small["devices"][0]["capacity"] = serde_json::json!(7);
    assert_eq!(exact(&problem(small)).status, Status::Infeasible);
    // Only the cyclic node: no plan.
    let mut cyclic = base;
    cyclic["nodes"].as_array_mut().unwrap().remove(3);
    assert_eq!(exact(&problem(cyclic)).status, Status::Infeasible);
}

#[test]
fn kept_values_cost_memory_not_time() {
    let base = serde_json::json!({
        "devices": [{"capacity": 100, "cache_budget": 16}],
        "classes": [{"bytes": 4}, {"bytes": 16, "cacheable": true}, {"bytes": 4}],
        "nodes": [
            {"class": 0, "source": "weight"},
            {"class": 1, "children": [0], "options": [{"device": 0, "time": 50}]},
            {"class": 2, "children": [1], "options": [{"device": 0, "time": 3}]}
        ],
        "roots": [2]
    });
    let out = exact(&problem(base.clone()));
    let b = out.best.unwrap();
    assert_eq!((b.makespan(), b.peak()), (3, 20));
    let mut tight = base;
    tight["devices"][0]["cache_budget"] = serde_json::json!(15);
    let b = exact(&problem(tight)).best.unwrap();
    assert_eq!((b.makespan(), b.peak()), (53, 20));
}

#[test]
fn weights_are_uploaded_once_not_copied() {
    // c1 = k(weight c0) on the cpu (20) or the gpu (4); links 1 byte/ns, no latency.
    let base = serde_json::json!({
        "devices": [{"name": "cpu", "capacity": 100}, {"name": "gpu", "capacity": 100}],
        "links": [{"from": 0, "to": 1, "latency": 0, "bytes_per_us": 1000}, {"from": 1, "to": 0, "latency": 0, "bytes_per_us": 1000}],
        "classes": [{"bytes": 8}, {"bytes": 2}],
        "nodes": [
            {"class": 0, "source": "weight"},
            {"class": 1, "children": [0], "options": [{"device": 0, "time": 20}, {"device": 1, "time": 4}]}
        ],
        "roots": [1]
    });
    // On the gpu the weight is there at 0 (no 8 ns copy): kernel [0,4), copy back [4,6).
    // Peak: gpu upload 8 (persistent) + output 2; home: the copy 2.
    let out = exact(&problem(base.clone()));
    assert_eq!(out.status, Status::Optimal);
    let b = out.best.unwrap();
    assert_eq!((b.makespan(), b.peak()), (6, 12));
    let plan = b.to_plan();
    assert!(plan.steps.iter().all(|s| !matches!(s, tg_planner::result::PlanStep::Copy { class: 0, .. })), "no copy of the weight: {plan:?}");
    let up: Vec<_> = plan.buffers.iter().filter(|x| x.kind == tg_planner::result::BufferKind::Weight).collect();
    assert_eq!(up.len(), 1);
    assert_eq!((up[0].class, up[0].device, up[0].bytes, up[0].start, up[0].end), (0, 1, 8, 0, None));
    // The upload counts against the capacity: with 9 bytes on the gpu (8 + 2 > 9) the cpu runs it.
    let mut tight = base;
    tight["devices"][1]["capacity"] = serde_json::json!(9);
    let b = exact(&problem(tight)).best.unwrap();
    assert_eq!((b.makespan(), b.peak()), (20, 2));
    assert!(b.to_plan().buffers.iter().all(|x| x.kind != tg_planner::result::BufferKind::Weight));
}

/// The first plan (the seeds, before any branching: a node budget of 1 stops the search
/// there) is valid and never worse than the best plan on the home device alone.
#[test]
fn first_plan_is_no_worse_than_one_device() {
    let seed: u64 = std::env::var("TG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    eprintln!("seed {seed}");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut better = 0;
    for case in 0..200 {
        let nc = rng.gen_range(3..=14);
        let mut nodes = vec![serde_json::json!({"class": 0, "source": "input"}), serde_json::json!({"class": 1, "source": "weight"})];
        for c in 2..nc {
            for _ in 0..rng.gen_range(1..=2) {
                let children: Vec<usize> = (0..rng.gen_range(1..=3)).map(|_| rng.gen_range(0..c)).collect();
                let t = rng.gen_range(1..=40u64);
                let mut options = vec![serde_json::json!({"device": 0, "time": t})];
                if rng.gen_bool(0.8) {
                    options.push(serde_json::json!({"device": 1, "time": (t / rng.gen_range(1..=4)).max(1)}));
                }
                nodes.push(serde_json::json!({"class": c, "children": children, "options": options}));
            }
        }
        let classes: Vec<_> = (0..nc).map(|_| serde_json::json!({"bytes": rng.gen_range(1..=64)})).collect();
        let links: Vec<_> =
            [(0, 1), (1, 0)].iter().map(|&(a, b)| serde_json::json!({"from": a, "to": b, "latency": rng.gen_range(0..=5), "bytes_per_us": rng.gen_range(2000..=20000)})).collect();
        let two = serde_json::json!({"devices": [{"capacity": 1 << 20}, {"capacity": 1 << 20}], "links": links, "classes": classes, "nodes": nodes.clone(), "roots": [nc - 1]});
        for n in nodes.iter_mut() {
            if let Some(o) = n.get_mut("options") {
                o.as_array_mut().unwrap().retain(|x| x["device"] == 0);
            }
        }
        let one = serde_json::json!({"devices": [{"capacity": 1 << 20}], "classes": classes, "nodes": nodes, "roots": [nc - 1]});
        let (two, one) = (problem(two), problem(one));
        let first = solve(&two, &Limits { nodes: 1, ..Limits::default() });
        let alone = exact(&one);
        let (Some(f), Some(a)) = (&first.best, &alone.best) else { panic!("case {case}: no plan: {}", serde_json::to_string(&two).unwrap()) };
        let c = validate(&two, &f.to_plan()).unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_eq!(c.makespan, f.makespan());
        assert_eq!(alone.status, Status::Optimal);
        assert!(f.makespan() <= a.makespan(), "case {case}: first plan {} > one device {}: {}", f.makespan(), a.makespan(), serde_json::to_string(&two).unwrap());
        better += usize::from(f.makespan() < a.makespan());
    }
    eprintln!("{better} of 200 first plans beat the one-device optimum");
    assert!(better > 50, "the accelerator should pay off in many cases ({better})");
}

/// Random small problems: every plan passes the validator; small ones finish.
#[test]
fn random_problems_give_valid_plans() {
    let seed: u64 = std::env::var("TG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x91a7);
    eprintln!("seed {seed}");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (mut opt, mut inf) = (0, 0);
    for case in 0..400 {
        let p = random_problem(&mut rng);
        let out = exact(&p);
        match out.status {
            Status::Optimal => opt += 1,
            Status::Infeasible => inf += 1,
            s => panic!("case {case}: small problem ended {s:?}: {}", serde_json::to_string(&p).unwrap()),
        }
    }
    eprintln!("{opt} optimal, {inf} infeasible");
    assert!(opt > 100 && inf > 20);
}

fn random_problem(rng: &mut impl Rng) -> Problem {
    let nd = rng.gen_range(1..=2);
    let nc = rng.gen_range(2..=6);
    let mut nodes = vec![serde_json::json!({"class": 0, "source": "input"})];
    for c in 1..nc {
        for _ in 0..rng.gen_range(1..=2) {
            let nch = rng.gen_range(1..=2);
            // Mostly earlier classes, sometimes a later one (cycles).
            let children: Vec<usize> = (0..nch).map(|_| if rng.gen_bool(0.15) { rng.gen_range(0..nc) } else { rng.gen_range(0..c) }).collect();
            let mut options = Vec::new();
            for _ in 0..rng.gen_range(1..=2) {
                let dev = rng.gen_range(0..nd);
                if children.len() == 1 && rng.gen_bool(0.15) {
                    options.push(serde_json::json!({"device": dev, "time": 0, "alias": true}));
                } else {
                    options.push(serde_json::json!({"device": dev, "time": rng.gen_range(1..=9)}));
                }
            }
            nodes.push(serde_json::json!({"class": c, "children": children, "options": options}));
        }
    }
    let classes: Vec<_> = (0..nc).map(|c| serde_json::json!({"bytes": rng.gen_range(1..=4), "cacheable": c > 0 && rng.gen_bool(0.15)})).collect();
    let devices: Vec<_> = (0..nd)
        .map(|_| {
            let cap = rng.gen_range(3..=14);
            serde_json::json!({"capacity": cap, "cache_budget": rng.gen_range(0..=cap.min(4))})
        })
        .collect();
    let mut links = Vec::new();
    if nd == 2 {
        for (a, b) in [(0, 1), (1, 0)] {
            if rng.gen_bool(0.9) {
                links.push(serde_json::json!({"from": a, "to": b, "latency": rng.gen_range(0..=3), "bytes_per_us": rng.gen_range(500..=2000)}));
            }
        }
    }
    let mut roots = vec![nc - 1];
    if nc > 2 && rng.gen_bool(0.3) {
        roots.push(rng.gen_range(1..nc - 1));
    }
    problem(serde_json::json!({"devices": devices, "links": links, "classes": classes, "nodes": nodes, "roots": roots}))
}

#[test]
fn validator_rejects_corrupted_plans() {
    let p = two_devices(1);
    let out = exact(&p);
    let plan = out.best.unwrap().to_plan();
    let mut late = plan.clone();
    {
        let (tg_planner::result::PlanStep::Kernel { start, end, .. } | tg_planner::result::PlanStep::Copy { start, end, .. }) = &mut late.steps[1];
        *start += 1;
        *end += 1;
    }
    assert!(validate(&p, &late).is_err(), "a step that starts later than its order allows");
    let mut missing = plan.clone();
    missing.steps.remove(0);
    assert!(validate(&p, &missing).is_err(), "a missing copy");
    let mut overlap = plan.clone();
    overlap.buffers[0].offset = 60;
    assert!(validate(&p, &overlap).is_err(), "a buffer past the arena");
    let mut wrong = plan;
    wrong.option.insert(1, 0);
    assert!(validate(&p, &wrong).is_err(), "steps that do not match the decisions");
}

#[test]
fn bad_problems_get_errors_naming_the_item() {
    let cases = [
        (r#"{"devices": [], "classes": [], "nodes": [], "roots": []}"#, "no devices"),
        (r#"{"devices": [{"capacity": 8}], "classes": [{"bytes": 4}], "nodes": [{"class": 0, "source": "input"}], "roots": [1]}"#, "root class 1"),
        (r#"{"devices": [{"capacity": 8}], "classes": [{"bytes": 4}, {"bytes": 4}], "nodes": [{"class": 0, "source": "input"}], "roots": [0]}"#, "class 1 has no nodes"),
        (
            r#"{"devices": [{"capacity": 8}], "classes": [{"bytes": 4}, {"bytes": 4}], "nodes": [{"class": 0, "source": "input"}, {"class": 1, "children": [0], "options": [{"device": 0, "time": 0}]}], "roots": [1]}"#,
            "time at least 1",
        ),
        (
            r#"{"devices": [{"capacity": 8}], "classes": [{"bytes": 4}, {"bytes": 4}], "nodes": [{"class": 0, "source": "input"}, {"class": 1, "children": [0], "options": [{"device": 0, "time": 18446744073709551615}]}], "roots": [1]}"#,
            "exceeds",
        ),
        (
            r#"{"devices": [{"capacity": 8}], "classes": [{"bytes": 4}, {"bytes": 4}], "nodes": [{"class": 0, "source": "input"}, {"class": 1, "children": [0, 0], "options": [{"device": 0, "time": 0, "alias": true}]}], "roots": [1]}"#,
            "exactly one child",
        ),
        (r#"{"devices": [{"capacity": 8}], "classes": [{"bytes": 4}], "nodes": [{"class": 0, "source": "input"}], "roots": [0], "extra": 1"#, "planning problem"),
    ];
    for (text, want) in cases {
        let e = Problem::from_json(text).expect_err(text).to_string();
        assert!(e.contains(want), "{e:?} should mention {want:?}");
    }
}
