//! The pickle machine's unit tests, on opcode streams written by hand.

use super::*;

/// A format's allow-list, as the tests' stand-in: the builtins and the collections.
const PLAIN_DATA: Allowed = |module, _| matches!(module, "builtins" | "collections");

fn run(bytes: &[u8]) -> Pickle {
    load(bytes, PLAIN_DATA).unwrap_or_else(|e| panic!("{e:?}"))
}

fn err(bytes: &[u8]) -> PickleError {
    load(bytes, PLAIN_DATA).unwrap_err()
}

/// The items of the top value (a tuple or list), as values.
fn top_items(p: &Pickle) -> Vec<Value> {
    p.items(p.top)
        .unwrap()
        .iter()
        .map(|&i| p.get(i).clone())
        .collect()
}

#[test]
fn protocol_0_text_opcodes() {
    let p = run(b"(lp0\nI1\naI01\naL12345678901234567890L\naF1.5\naS'a\\nb'\naVh\\u00e9\naI-7\na.");
    assert_eq!(
        top_items(&p),
        [
            Value::Int(1),
            Value::Bool(true),
            Value::BigInt(12345678901234567890u128.to_le_bytes()[..9].into()),
            Value::Float(1.5),
            Value::Str("a\nb".into()),
            Value::Str("h\u{e9}".into()),
            Value::Int(-7),
        ]
    );
    // PUT/GET, DICT, TUPLE, POP, POP_MARK, DUP, PERSID.
    let p = run(b"(S'k'\np1\ng1\nd(I1\nI2\n0t(I3\n10Pkey\n\x86.");
    let items = p.items(p.top).unwrap();
    assert_eq!(p.get(items[0]), &Value::Dict(vec![(3, 3)]));
    assert!(matches!(p.get(items[1]), Value::PersistentId(_)));
}

#[test]
fn binary_numbers_and_strings() {
    let p = run(
        b"\x80\x02(J\xff\xff\xff\xffK\xffM\x00\x01\x8a\x01\xff\x8a\x02\x00\x01\x8b\x09\x00\x00\x00\
          \x00\x00\x00\x00\x00\x00\x00\x00\x01G?\xf8\x00\x00\x00\x00\x00\x00\
          X\x02\x00\x00\x00ab\x8c\x01c\x8d\x01\x00\x00\x00\x00\x00\x00\x00dU\x01eT\x01\x00\x00\x00f\
          B\x01\x00\x00\x00gC\x01h\x8e\x01\x00\x00\x00\x00\x00\x00\x00i\x96\x00\x00\x00\x00\x00\x00\x00\x00\
          N\x88\x89t.",
    );
    let items = top_items(&p);
    assert_eq!(
        items[..7],
        [
            Value::Int(-1),
            Value::Int(255),
            Value::Int(256),
            Value::Int(-1),
            Value::Int(256),
            Value::BigInt([0, 0, 0, 0, 0, 0, 0, 0, 1][..].into()),
            Value::Float(1.5),
        ]
    );
    let strs: Vec<&str> = p.items(p.top).unwrap()[7..12]
        .iter()
        .map(|&i| p.str(i).unwrap())
        .collect();
    assert_eq!(strs, ["ab", "c", "d", "e", "f"]);
    assert!(matches!(items[12], Value::Bytes { len: 1, .. }));
    assert!(matches!(items[15], Value::Bytes { len: 0, .. }));
    assert_eq!(
        items[16..],
        [Value::None, Value::Bool(true), Value::Bool(false)]
    );
}

#[test]
fn containers() {
    // EMPTY_DICT + SETITEM(S), EMPTY_SET + ADDITEMS, FROZENSET, TUPLE1-3, APPEND(S).
    let p = run(b"\x80\x04}K\x01K\x02s(K\x03K\x04u\x8f(K\x05\x90(K\x06\x91K\x07\x85K\x08K\x09\x86]K\x0aa(K\x0bK\x0ce\x87\x87\x86.");
    let top = p.items(p.top).unwrap();
    assert!(matches!(p.get(top[0]), Value::Dict(d) if d.len() == 2));
    let inner = p.items(top[1]).unwrap();
    assert!(matches!(p.get(inner[0]), Value::Seq(SeqKind::Set, s) if s.len() == 1));
    assert!(matches!(p.get(inner[1]), Value::Seq(SeqKind::FrozenSet, s) if s.len() == 1));
    let last = p.items(inner[2]).unwrap();
    assert_eq!(p.items(last[0]).unwrap().len(), 1);
    assert_eq!(p.items(last[1]).unwrap().len(), 2);
    let list: Vec<i64> = p
        .items(last[2])
        .unwrap()
        .iter()
        .map(|&i| p.int(i).unwrap())
        .collect();
    assert_eq!(list, [10, 11, 12]);
}

#[test]
fn memo_shares_and_cycles() {
    // A list memoized, then appended to itself through the memo: a cycle of indexes.
    let p = run(b"\x80\x02]q\x00h\x00a\x94j\x00\x00\x00\x00\x86.");
    let items = p.items(p.top).unwrap();
    assert_eq!(items[0], items[1]);
    assert_eq!(p.items(items[0]).unwrap(), &[items[0]]);
    // MEMOIZE numbers entries by the memo's size.
    let p = run(b"\x80\x04K\x05\x94K\x06\x94h\x01.");
    assert_eq!(p.int(p.top), Some(6));
}

#[test]
fn globals_and_calls() {
    let p = run(
        b"\x80\x04(cmod\nf\n)R\x8c\x01m\x8c\x01g\x93)\x81}b\x8c\x01m\x8c\x01h\x93)}\x92(imod\nK\n(cmod\nC\nK\x01o\x82\x07Qt.",
    );
    let items = p.items(p.top).unwrap();
    let Value::Call { callable, .. } = p.get(items[0]) else {
        panic!()
    };
    assert_eq!(p.global(*callable), Some(("mod", "f")));
    assert!(matches!(p.get(items[1]), Value::Call { .. }));
    // The NEWOBJ result got a BUILD.
    assert_eq!(p.added[&items[1]].states.len(), 1);
    let callables: Vec<_> = items[1..5]
        .iter()
        .map(|&i| match p.get(i) {
            Value::Call { callable, .. } => p.global(*callable).unwrap(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(
        callables,
        [("m", "g"), ("m", "h"), ("mod", "K"), ("mod", "C")]
    );
    let Value::PersistentId(ext) = p.get(items[5]) else {
        panic!()
    };
    assert_eq!(p.global(*ext), Some(("copyreg._extension_registry", "7")));
}

#[test]
fn ordered_dict_is_a_dict() {
    let p = run(b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01X\x01\x00\x00\x00aK\x01s}b.");
    assert!(matches!(p.get(p.top), Value::Dict(d) if d.len() == 1));
}

/// Protocol 0's `STRING` decodes as Python's `codecs.escape_decode`: `S'\157\163'` is `os`.
#[test]
fn protocol_0_strings_decode_every_escape() {
    let cases: [(&[u8], &[u8]); 5] = [
        (br"'\157\163'", b"os"),
        (br"'\x6fs'", b"os"),
        (br"'\1\12\123\1234'", b"\x01\x0aS\x534"),
        (br#""\a\b\f\v\\\'\"""#, b"\x07\x08\x0c\x0b\\'\""),
        (br"'\q'", br"\q"),
    ];
    for (quoted, decoded) in cases {
        let mut p = b"S".to_vec();
        p.extend_from_slice(quoted);
        p.extend_from_slice(b"\n.");
        let v = run(&p);
        assert_eq!(
            v.get(v.top),
            &Value::Str(String::from_utf8_lossy(decoded).into()),
            "{}",
            String::from_utf8_lossy(quoted)
        );
    }
    assert_eq!(err(b"S'\\x6'\n.").rule, PickleRule::BadText);
    // A module and a name spelled in escapes are a global like any other.
    let p = run(b"S'\\157\\163'\nS'\\163ystem'\n\x93.");
    assert_eq!(p.global(p.top), Some(("os", "system")));
}

/// `STACK_GLOBAL` of values that are not strings is a global all the same, of a name only
/// Python would know; a pickle that fails after naming an unsafe global carries it.
#[test]
fn computed_globals_and_failures_after_a_global() {
    let p = run(b"K\x01K\x02\x93.");
    assert_eq!(p.get(p.top), &Value::ComputedGlobal);
    let e = err(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R\xff");
    assert_eq!(e.rule, PickleRule::UnknownOpcode);
    assert_eq!(e.unsafe_globals, ["os.system"]);
    let e = err(b"\x80\x02ccollections\nOrderedDict\n)R");
    assert_eq!(e.rule, PickleRule::Truncated);
    assert!(e.unsafe_globals.is_empty());
}

#[test]
fn errors_name_rule_and_offset() {
    assert_eq!(err(b"\x80\x02\xff").rule, PickleRule::UnknownOpcode);
    assert_eq!(err(b"\x80\x02\xff").at, 2);
    assert_eq!(err(b"\x80\x06.").rule, PickleRule::UnsupportedProtocol);
    assert_eq!(err(b"h\x05.").rule, PickleRule::MemoMissing);
    assert_eq!(err(b"a.").rule, PickleRule::StackUnderflow);
    assert_eq!(err(b"(K\x01t0.").rule, PickleRule::StackUnderflow);
    assert_eq!(err(b"e.").rule, PickleRule::NoMark);
    assert_eq!(err(b"\x97.").rule, PickleRule::OutOfBandBuffer);
    assert_eq!(err(b"(K\x01d.").rule, PickleRule::OddItems);
    // Huge claimed lengths fail before any allocation.
    for bomb in [
        &b"X\xff\xff\xff\xff"[..],
        b"\x8d\xff\xff\xff\xff\xff\xff\xff\xff",
        b"\x8e\xff\xff\xff\xff\xff\xff\xff\x7f",
        b"\x8b\xff\xff\xff\x7f",
        b"T\xff\xff\xff\xff",
    ] {
        let e = err(bomb);
        assert!(
            matches!(e.rule, PickleRule::Truncated | PickleRule::NegativeLength),
            "{e:?}"
        );
    }
}

#[test]
fn every_prefix_of_a_pickle_is_truncated() {
    let whole = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01ctorch\nFloatStorage\nq\x02K\x01\x8a\x02\x00\x01G?\xf0\x00\x00\x00\x00\x00\x00\x87\x86u.";
    run(whole);
    for n in 0..whole.len() {
        assert!(load(&whole[..n], PLAIN_DATA).is_err(), "{n}");
    }
    assert!(err(b"\x80\x02K").cut_short());
}

#[test]
fn bombs_stay_bounded() {
    // Memo bomb: one value fetched a million times costs stack slots, not values.
    let mut b = b"\x80\x02]q\x00(".to_vec();
    b.extend(std::iter::repeat_n(&b"h\x00"[..], 1_000_000).flatten());
    b.extend(b"e.");
    let p = run(&b);
    assert_eq!(p.values.len(), 4);
    assert_eq!(p.items(p.top).unwrap().len(), 1_000_000);
    // Stack bomb: a million DUPs.
    let mut b = b"N".to_vec();
    b.extend(std::iter::repeat_n(b'2', 1_000_000));
    b.push(b'.');
    assert_eq!(run(&b).top, NONE);
    // Deep nesting: 100,000 lists in lists.
    let mut b = vec![b'('; 100_000];
    b.extend(std::iter::repeat_n(b'l', 100_000));
    b.push(b'.');
    let p = run(&b);
    assert_eq!(p.values.len(), 100_003);
    // A million-element list.
    let mut b = b"(".to_vec();
    b.extend(std::iter::repeat_n(&b"K\x01"[..], 1_000_000).flatten());
    b.extend(b"l.");
    assert_eq!(run(&b).items(run(&b).top).unwrap().len(), 1_000_000);
    // Values never outnumber the bytes (plus the three shared ones).
    let b: Vec<u8> = std::iter::repeat_n(b')', 1000).chain([b'.']).collect();
    assert!(run(&b).values.len() <= b.len() + 3);
}
