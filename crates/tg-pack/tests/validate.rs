//! The validator rejects each kind of bad packing and accepts the edge cases that are
//! fine (touching intervals, stacked bytes, zero-size buffers).

use tg_pack::{validate, Buffer, Invalid, PackError, Problem, Solution};

fn problem() -> Problem {
    let mut c = Buffer::new("c", 2, 6, 4);
    c.alignment = 4;
    Problem::new(vec![Buffer::new("a", 0, 4, 4), Buffer::new("b", 4, 8, 4), c, Buffer::new("z", 0, 8, 0)]).unwrap()
}

fn sol(p: &Problem, offsets: &[u64]) -> Solution {
    Solution::from_offsets(p, offsets.to_vec())
}

#[test]
fn accepts_valid_packings() {
    let p = problem();
    // a and b touch in time ([0,4) and [4,8)): they may share bytes. c overlaps both.
    validate(&p, &sol(&p, &[0, 0, 4, 0]), 8).unwrap();
    // The zero-size buffer may sit anywhere inside the capacity, even amid others.
    validate(&p, &sol(&p, &[4, 4, 0, 5]), 8).unwrap();
    assert_eq!(sol(&p, &[4, 4, 0, 5]).height, 8);
}

#[test]
fn rejects_each_violation() {
    let p = problem();
    assert_eq!(validate(&p, &sol(&p, &[0, 0, 4]), 8), Err(Invalid::Count { offsets: 3, buffers: 4 }));
    assert_eq!(validate(&p, &sol(&p, &[0, 0, 6, 0]), 16), Err(Invalid::Misaligned { id: "c".into(), offset: 6, alignment: 4 }));
    assert_eq!(validate(&p, &sol(&p, &[0, 0, 4, 0]), 7), Err(Invalid::OutOfBounds { id: "c".into(), offset: 4, size: 4, capacity: 7 }));
    assert_eq!(validate(&p, &sol(&p, &[0, 8, 0, 0]), 16), Err(Invalid::Overlap { a: "a".into(), b: "c".into() }));
    assert_eq!(validate(&p, &sol(&p, &[2, 0, 4, 0]), 16), Err(Invalid::Overlap { a: "a".into(), b: "c".into() }));
    let mut bad = sol(&p, &[0, 0, 4, 0]);
    bad.height = 9;
    assert_eq!(validate(&p, &bad, 16), Err(Invalid::Height { reported: 9, actual: 8 }));
    assert_eq!(validate(&p, &sol(&p, &[u64::MAX, 0, 4, 0]), u64::MAX), Err(Invalid::OutOfBounds { id: "a".into(), offset: u64::MAX, size: 4, capacity: u64::MAX }));
}

#[test]
fn problem_checks() {
    assert!(matches!(Problem::new(vec![Buffer::new("a", 3, 3, 1)]), Err(PackError::EmptyInterval { .. })));
    let mut z = Buffer::new("a", 0, 1, 1);
    z.alignment = 0;
    assert!(matches!(Problem::new(vec![z]), Err(PackError::ZeroAlignment { .. })));
    assert!(matches!(Problem::new(vec![Buffer::new("a", 0, 1, 1), Buffer::new("a", 0, 1, 1)]), Err(PackError::DuplicateId { index: 1, .. })));
    assert_eq!(Problem::new(vec![Buffer::new("a", 0, 1, u64::MAX)]), Err(PackError::TooLarge));
    let p = Problem::new(vec![Buffer::new("a", 0, 2, 3), Buffer::new("b", 1, 3, 4), Buffer::new("c", 2, 4, 5)]).unwrap();
    // Live at t=2: b and c (a ended), 9 bytes; at t=1: a and b, 7 bytes.
    assert_eq!(p.max_live_bytes(), 9);
}

#[test]
fn empty_and_zero_size_problems() {
    use tg_pack::{minimize, solve, solve_exact, Limits, Verdict};
    let empty = Problem::new(vec![]).unwrap();
    for out in [solve(&empty, 0, &Limits::none()).unwrap(), solve_exact(&empty, 0, &Limits::none()).unwrap(), minimize(&empty, 0, &Limits::none()).unwrap()] {
        assert_eq!(out.verdict, Verdict::Feasible(Solution { offsets: vec![], height: 0 }));
    }
    let zeros = Problem::new(vec![Buffer::new("a", 0, 5, 0), Buffer::new("b", 1, 3, 0)]).unwrap();
    for out in [solve(&zeros, 0, &Limits::none()).unwrap(), solve_exact(&zeros, 0, &Limits::none()).unwrap()] {
        let Verdict::Feasible(s) = &out.verdict else { panic!("{out:?}") };
        validate(&zeros, s, 0).unwrap();
        assert_eq!(s.height, 0);
    }
}
