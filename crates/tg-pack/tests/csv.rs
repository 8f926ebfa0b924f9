//! CSV reading and writing: the MiniMalloc format, its aliases, and clear errors.

use tg_pack::{parse_csv, solve, validate, write_csv, CsvError, Limits, PackError, Solution, Verdict};

const EXAMPLE: &str = "id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n";

fn err(text: &str) -> CsvError {
    match parse_csv(text) {
        Ok(v) => panic!("accepted {text:?}: {v:?}"),
        Err(e) => e,
    }
}

#[test]
fn reads_the_minimalloc_example() {
    let input = parse_csv(EXAMPLE).unwrap();
    assert!(input.offsets.is_none());
    let bufs = input.problem.buffers();
    assert_eq!(bufs.len(), 5);
    assert_eq!((bufs[1].id.as_str(), bufs[1].lower, bufs[1].upper, bufs[1].size), ("b2", 3, 9, 4));
    assert!(bufs.iter().all(|b| b.alignment == 1 && b.hint.is_none()));
}

#[test]
fn output_round_trips_and_offsets_become_hints() {
    let input = parse_csv(EXAMPLE).unwrap();
    let out = solve(&input.problem, 12, &Limits::none()).unwrap();
    let Verdict::Feasible(sol) = out.verdict else { panic!("12 fits") };
    let text = write_csv(&input.problem, &sol);
    assert!(text.starts_with("id,lower,upper,size,offset\n"), "{text}");
    assert_eq!(text.lines().count(), 6);
    let again = parse_csv(&text).unwrap();
    assert_eq!(again.offsets.as_deref(), Some(sol.offsets.as_slice()));
    let hints: Vec<Option<u64>> = again.problem.buffers().iter().map(|b| b.hint).collect();
    assert_eq!(hints, sol.offsets.iter().map(|&o| Some(o)).collect::<Vec<_>>());
    // Re-solving from the hints reproduces a valid packing without search.
    let re = solve(&again.problem, 12, &Limits::none()).unwrap();
    let Verdict::Feasible(s2) = &re.verdict else { panic!("12 fits") };
    validate(&again.problem, s2, 12).unwrap();
    assert_eq!(re.stats.nodes, 0);
}

#[test]
fn aliases_columns_in_any_order_and_inclusive_end() {
    let text = "size,begin,end,buffer_id,alignment,hint\n8,0,2,x,4,-1\n4 , 3 , 3 , y , 1 , 8\r\n\n";
    let input = parse_csv(text).unwrap();
    let b = input.problem.buffers();
    assert_eq!((b[0].id.as_str(), b[0].lower, b[0].upper, b[0].size, b[0].alignment, b[0].hint), ("x", 0, 3, 8, 4, None));
    assert_eq!((b[1].id.as_str(), b[1].lower, b[1].upper, b[1].alignment, b[1].hint), ("y", 3, 4, 1, Some(8)));
    let sol = Solution::from_offsets(&input.problem, vec![0, 8]);
    let text = write_csv(&input.problem, &sol);
    assert_eq!(text, "id,lower,upper,size,alignment,offset\nx,0,3,8,4,0\ny,3,4,4,1,8\n");
}

#[test]
fn empty_inputs() {
    assert_eq!(err(""), CsvError::Empty);
    assert_eq!(err("\n  \n\r\n"), CsvError::Empty);
    assert_eq!(err("id,lower,upper,size\n"), CsvError::NoBuffers);
    assert_eq!(err("id,lower,upper,size\n\n\n"), CsvError::NoBuffers);
}

#[test]
fn header_errors() {
    for (col, text) in [("id", "lower,upper,size\n0,1,2\n"), ("lower", "id,upper,size\na,1,2\n"), ("upper", "id,lower,size\na,0,2\n"), ("size", "id,lower,upper\na,0,1\n")] {
        assert_eq!(err(text), CsvError::MissingColumn(col), "{text}");
    }
    assert_eq!(err("id,lower,upper,size,colour\na,0,1,2,red\n"), CsvError::UnknownColumn("colour".into()));
    assert_eq!(err("id,lower,upper,size,gaps\na,0,1,2,\n"), CsvError::UnknownColumn("gaps".into()));
    assert_eq!(err("id,lower,start,upper,size\na,0,0,1,2\n"), CsvError::DuplicateColumn("lower".into()));
    assert_eq!(err("id,lower,upper,end,size\na,0,1,0,2\n"), CsvError::DuplicateColumn("upper".into()));
    let msg = err("id,lower,size\na,0,2\n").to_string();
    assert!(msg.contains("line 1") && msg.contains("upper"), "{msg}");
}

#[test]
fn row_errors_name_the_line() {
    let h = "id,lower,upper,size\n";
    let cases: Vec<(String, CsvError)> = vec![
        (format!("{h}a,0,1,2\nb,0,1\n"), CsvError::FieldCount { line: 3, expected: 4, found: 3 }),
        (format!("{h}a,0,1,2,3\n"), CsvError::FieldCount { line: 2, expected: 4, found: 5 }),
        (format!("{h}a,x,1,2\n"), CsvError::NotInteger { line: 2, column: "lower", value: "x".into() }),
        (format!("{h}a,0,1.5,2\n"), CsvError::NotInteger { line: 2, column: "upper", value: "1.5".into() }),
        (format!("{h}a,0,1,\n"), CsvError::NotInteger { line: 2, column: "size", value: "".into() }),
        (format!("{h}a,0,1,99999999999999999999\n"), CsvError::NotInteger { line: 2, column: "size", value: "99999999999999999999".into() }),
        (format!("{h}a,0,1,-4\n"), CsvError::Negative { line: 2, column: "size", value: -4 }),
        (format!("{h}a,5,5,1\n"), CsvError::EmptyInterval { line: 2, id: "a".into(), lower: 5, upper: 5 }),
        (format!("{h}a,6,5,1\n"), CsvError::EmptyInterval { line: 2, id: "a".into(), lower: 6, upper: 5 }),
        (format!("{h}a,0,1,1\n\nb,0,1,1\na,2,3,1\n"), CsvError::DuplicateId { line: 5, id: "a".into(), first: 2 }),
        (format!("{h} ,0,1,1\n"), CsvError::EmptyId { line: 2 }),
        ("id,lower,upper,size,alignment\na,0,1,1,0\n".into(), CsvError::ZeroAlignment { line: 2 }),
        ("id,lower,upper,size,alignment\na,0,1,1,-2\n".into(), CsvError::Negative { line: 2, column: "alignment", value: -2 }),
        ("id,lower,upper,size,offset\na,0,1,1,-1\n".into(), CsvError::Negative { line: 2, column: "offset", value: -1 }),
        ("id,start,end,size\na,3,2,1\n".into(), CsvError::EmptyInterval { line: 2, id: "a".into(), lower: 3, upper: 3 }),
    ];
    for (text, want) in cases {
        assert_eq!(err(&text), want, "{text:?}");
        let msg = want.to_string();
        if let Some(line) = msg.strip_prefix("line ") {
            assert!(line.starts_with(|c: char| c.is_ascii_digit()), "{msg}");
        }
    }
}

#[test]
fn sizes_too_large_for_the_solver() {
    let big = 1u64 << 61;
    let text = format!("id,lower,upper,size\na,0,1,{big}\nb,0,1,{big}\n");
    assert_eq!(err(&text), CsvError::Problem(PackError::TooLarge));
}
